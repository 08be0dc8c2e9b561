"""``token=`` of the HTTP clients (sync and asyncio) against a node with ``http_auth``: sent as
a Bearer header on every request, carried through pickling, never shown; and the clients'
``purge`` and ``peek(preview=)``."""

from __future__ import annotations

import pickle
from collections.abc import AsyncIterator, Iterator

import pytest

from pylmq.client import AsyncHttpClient, HttpClient
from pylmq.errors import BadRequest, QueueNotFound, Unauthorized
from pylmq.node import LMQNode
from pylmq.node.testing import NodeThread, http_url, local_options, running_node

TOKEN = "client-token-0123456789"


@pytest.fixture
async def guarded() -> AsyncIterator[LMQNode]:
    async with running_node(local_options(http_tokens=(TOKEN,))) as n:
        yield n


@pytest.fixture
def guarded_thread() -> Iterator[NodeThread]:
    with NodeThread(local_options(http_tokens=(TOKEN,), http_protect="all")) as n:
        yield n


async def test_async_client_sends_its_token_with_every_request(guarded: LMQNode) -> None:
    async with AsyncHttpClient(http_url(guarded), request_timeout=10) as anonymous:
        with pytest.raises(Unauthorized):
            await anonymous.push("q", b"x")
        with pytest.raises(Unauthorized):
            await anonymous.purge("q")
    async with AsyncHttpClient(http_url(guarded), request_timeout=10, token=TOKEN) as c:
        assert await c.push("q", b"x") == "no"
        assert [e["body"] for e in await c.peek("q", preview=1)] == ["x"]
        msg = await c.pull("q", 0)
        assert msg is not None and msg.body == b"x"
        await c.ack("q", msg.id)
        await c.push("q", b"y")
        assert await c.purge("q") == 1
        with pytest.raises(QueueNotFound):
            await c.purge("never")
        assert TOKEN not in repr(c)


def test_sync_client_sends_its_token_and_keeps_it_through_pickling(guarded_thread: NodeThread) -> None:
    with HttpClient(guarded_thread.http_url, request_timeout=10) as anonymous:
        with pytest.raises(Unauthorized) as e:
            anonymous.stats()  # protect = all: even monitoring's reads
        assert TOKEN not in str(e.value)
    with HttpClient(guarded_thread.http_url, request_timeout=10, token=TOKEN) as c:
        c.push("s", "hello " * 100)
        [entry] = c.peek("s", preview=5)
        assert (entry["body"], entry["truncated"]) == ("hello", True)
        with pickle.loads(pickle.dumps(c)) as copy:
            assert isinstance(copy, HttpClient)
            assert copy.purge("s") == 1
        assert TOKEN not in repr(c)


@pytest.mark.parametrize("token", ["has space 0123456789", "line\r\nX-Injected: 1", "é" * 20, ""])
def test_a_token_that_cannot_be_a_header_is_refused_without_quoting_it(token: str) -> None:
    for make in (HttpClient, AsyncHttpClient):
        with pytest.raises(BadRequest) as e:
            make("http://127.0.0.1:1", token=token)
        if token:
            assert token not in str(e.value)
