"""A node with only the MessagePack-RPC API, on the suite's store (``--store``, tests/suite_store.py), and
clients connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from pylmq.node import LMQNode
from tests.rpc.rpc_helpers import Connect, RawClient, open_client
from tests.suite_store import SuiteOptions


@pytest.fixture
async def node(suite_options: SuiteOptions) -> AsyncIterator[LMQNode]:
    n = LMQNode(suite_options(http=None, rpc=("127.0.0.1", 0)))
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
