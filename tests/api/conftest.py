"""A real pylmq node on 127.0.0.1 (port 0) and an ``Api`` client of it (api_helpers.py) for the HTTP API tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from pylmq.node import LMQNode, NodeOptions
from tests.api.api_helpers import Api, StartNode, base_url


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[LMQNode]:
    n = LMQNode(NodeOptions(http=("127.0.0.1", 0), rpc=None, store="memory", data_dir=tmp_path / "data"))
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    # A bound on every request: a broken long poll fails the test instead of hanging it.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as s:
        yield s


@pytest.fixture
async def api(node: LMQNode, session: aiohttp.ClientSession) -> Api:
    return Api(session, base_url(node))


@pytest.fixture
async def start(tmp_path: Path, session: aiohttp.ClientSession) -> AsyncIterator[StartNode]:
    """Starts durable nodes on one data directory (one at a time: stop one before the next)."""
    nodes: list[LMQNode] = []

    async def _start() -> tuple[LMQNode, Api]:
        opts = NodeOptions(http=("127.0.0.1", 0), rpc=None, store="durable", data_dir=tmp_path / "data")
        node = LMQNode(opts)
        await node.start()
        nodes.append(node)
        return node, Api(session, base_url(node))

    yield _start
    for node in nodes:
        await node.stop()
