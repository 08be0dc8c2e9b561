"""A memory-store node with only the MessagePack-RPC API, and clients connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from pylmq.node import LMQNode, NodeOptions
from tests.rpc.rpc_helpers import Connect, RawClient, open_client


@pytest.fixture
async def node() -> AsyncIterator[LMQNode]:
    n = LMQNode(NodeOptions(http=None, rpc=("127.0.0.1", 0), store="memory"))
    await n.start()
    yield n
    await n.stop()


@pytest.fixture
async def connect(node: LMQNode) -> AsyncIterator[Connect]:
    clients: list[RawClient] = []

    async def make() -> RawClient:
        assert node.rpc_address is not None
        c = await open_client(node.rpc_address)
        clients.append(c)
        return c

    yield make
    for c in clients:
        await c.close()


@pytest.fixture
async def client(connect: Connect) -> RawClient:
    return await connect()
