"""Real pylmq nodes (memory store, 127.0.0.1, port 0) and the four clients against them.

Async tests get a node on their own loop (``node``); blocking clients get one on a background
thread (``node_thread``), both from :mod:`pylmq.node.testing`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from pylmq.client import AsyncHttpClient, AsyncRpcClient, HttpClient, RpcClient
from pylmq.node import LMQNode
from pylmq.node.testing import NodeThread, http_url, running_node


@pytest.fixture
async def node() -> AsyncIterator[LMQNode]:
    async with running_node() as n:
        yield n


@pytest.fixture
async def http(node: LMQNode) -> AsyncIterator[AsyncHttpClient]:
    async with AsyncHttpClient(http_url(node), request_timeout=10) as c:
        yield c


@pytest.fixture
async def rpc(node: LMQNode) -> AsyncIterator[AsyncRpcClient]:
    assert node.rpc_address is not None
    async with AsyncRpcClient(*node.rpc_address, request_timeout=10) as c:
        yield c


@pytest.fixture
def node_thread() -> Iterator[NodeThread]:
    with NodeThread() as n:
        yield n


@pytest.fixture
def sync_http(node_thread: NodeThread) -> Iterator[HttpClient]:
    with HttpClient(node_thread.http_url, request_timeout=10) as c:
        yield c


@pytest.fixture
def sync_rpc(node_thread: NodeThread) -> Iterator[RpcClient]:
    with RpcClient(*node_thread.rpc_address, request_timeout=10) as c:
        yield c
