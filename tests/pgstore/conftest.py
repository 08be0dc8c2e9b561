"""Fixtures of the postgres store tests: nodes on one fresh database, each with its own HTTP
port, and the HTTP session their tests talk through; a connection to a migrated database; two
nodes serving SQS only."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import asyncpg
import pytest

from pylmq.node import LMQNode, NodeOptions
from pylmq.pgstore import PostgresStore
from pylmq.pgstore.schema import migrate
from tests.api.api_helpers import Api, base_url

StartPgNode = Callable[..., Awaitable[tuple[LMQNode, Api]]]


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as s:
        yield s


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to a fresh database with the node's schema (the message functions' tests)."""
    c = await asyncpg.connect(pg_dsn)
    await migrate(c)
    try:
        yield c
    finally:
        await c.close()


@pytest.fixture
async def start(pg_dsn: str, session: aiohttp.ClientSession) -> AsyncIterator[StartPgNode]:
    """Starts nodes on one fresh database. ``refresh_delay`` and ``resync_interval`` tune how a
    node re-reads what other nodes changed (tests of the wake-ups turn the periodic re-read, a
    safety net, off so that it is not what wakes)."""
    nodes: list[LMQNode] = []

    async def _start(
        *, refresh_delay: float | None = None, resync_interval: float | None = None
    ) -> tuple[LMQNode, Api]:
        node = LMQNode(NodeOptions(http=("127.0.0.1", 0), rpc=None, store="postgres", dsn=pg_dsn, pg_timeout=3.0))
        assert isinstance(node.store, PostgresStore)
        if refresh_delay is not None:
            node.store.refresh_delay = refresh_delay
        if resync_interval is not None:
            node.store.resync_interval = resync_interval
        await node.start()
        nodes.append(node)
        return node, Api(session, base_url(node))

    yield _start
    for node in nodes:
        await node.stop()


@pytest.fixture
async def sqs_nodes(pg_dsn: str) -> AsyncIterator[list[LMQNode]]:
    """Two nodes serving the SQS API (only) on one fresh database."""
    started: list[LMQNode] = []
    try:
        for _ in range(2):
            opts = NodeOptions(http=None, rpc=None, sqs=("127.0.0.1", 0), store="postgres", dsn=pg_dsn, pg_timeout=3.0)
            node = LMQNode(opts)
            await node.start()
            started.append(node)
        yield started
    finally:
        for node in started:
            await node.stop()
