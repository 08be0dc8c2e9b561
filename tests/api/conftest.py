"""A real pylmq node on 127.0.0.1 (port 0) and an ``Api`` client of it (api_helpers.py) for the HTTP API tests,
on the suite's store (``--store``, tests/suite_store.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from pylmq.node import LMQNode
from tests.api.api_helpers import Api, StartNode, base_url
from tests.suite_store import SuiteOptions


@pytest.fixture
async def node(suite_options: SuiteOptions) -> AsyncIterator[LMQNode]:
    n = LMQNode(suite_options(http=("127.0.0.1", 0), rpc=None))
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
async def start(suite_options: SuiteOptions, session: aiohttp.ClientSession) -> AsyncIterator[StartNode]:
    """Starts nodes on one durable store, one at a time (stop one before the next): the durable
    store on the test's data directory, or the test's database under postgres."""
    nodes: list[LMQNode] = []

    async def _start() -> tuple[LMQNode, Api]:
        node = LMQNode(suite_options(durable=True, http=("127.0.0.1", 0), rpc=None))
        await node.start()
        nodes.append(node)
        return node, Api(session, base_url(node))

    yield _start
    for node in nodes:
        await node.stop()
