"""What HTTP clients may hold of requests not yet whole: bodies across connections share one
budget (the one that would pass it gets a 503 and its bytes are given back), and a body must keep
coming at the minimum receive rate, not merely a byte now and then."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from pylmq.api._limits import BufferBudget
from pylmq.api.http import HttpApi
from pylmq.api.http_server import HttpServer
from pylmq.node import LMQNode
from tests.suite_store import node_eager

KIB = 1024

Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter


async def _answer(reader: Reader) -> tuple[int, bytes]:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status = int(head.split(b" ", 2)[1])
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    return status, await asyncio.wait_for(reader.readexactly(length), 5)


async def _until(cond: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


Serve = Callable[..., Awaitable[HttpServer]]


@pytest.fixture
async def serve(node: LMQNode) -> AsyncIterator[Serve]:
    servers: list[HttpServer] = []

    async def start(**kw: object) -> HttpServer:
        srv = HttpServer(HttpApi(node.manager), eager=node_eager(node), **kw)  # type: ignore[arg-type]
        await srv.start("127.0.0.1", 0)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        await srv.close()


async def _begin_upload(srv: HttpServer, queue: str, length: int, first: bytes) -> tuple[Reader, Writer]:
    assert srv._listener is not None
    reader, writer = await asyncio.open_connection(*srv._listener.sockets[0].getsockname()[:2])
    writer.write(b"POST /messages/%s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (queue.encode(), length))
    writer.write(first)
    await writer.drain()
    return reader, writer


async def test_the_body_that_passes_the_budget_is_503_and_every_byte_is_given_back(
    serve: Serve, node: LMQNode, caplog: pytest.LogCaptureFixture
) -> None:
    budget = BufferBudget(1024 * KIB, logging.getLogger("test"), lambda: 0.0)
    srv = await serve(budget=budget, body_timeout=30)
    part = b"a" * (400 * KIB)
    held = [await _begin_upload(srv, f"held{i}", 500 * KIB, part) for i in range(2)]
    await _until(lambda: budget.used == 800 * KIB, "both bodies charged")
    caplog.set_level(logging.WARNING, logger="test")
    reader, writer = await _begin_upload(srv, "over", 500 * KIB, part)
    status, body = await _answer(reader)
    assert (status, json.loads(body)["error"]) == (503, "too_much_buffered"), body
    assert "max_buffered_bytes" in json.loads(body)["detail"]
    assert budget.used == 800 * KIB, "the refused body's bytes are given back at once"
    assert [r.getMessage() for r in caplog.records if "max_buffered_bytes" in r.getMessage()], "one log line"
    writer.close()
    # The two within the budget complete; their bytes are no longer charged once they are whole.
    for reader, writer in held:
        writer.write(b"b" * (100 * KIB))
        assert (await _answer(reader))[0] == 200
        writer.close()
    assert budget.used == 0
    for i in range(2):
        assert len((await node.manager.pull(f"held{i}", 0)).message.items()[0][1]) == 500 * KIB  # type: ignore[union-attr]
    assert node.manager.get("over") is None


async def test_a_client_gone_mid_body_gives_its_bytes_back(serve: Serve) -> None:
    budget = BufferBudget(1024 * KIB, logging.getLogger("test"), lambda: 0.0)
    srv = await serve(budget=budget)
    _, writer = await _begin_upload(srv, "gone", 500 * KIB, b"a" * (300 * KIB))
    await _until(lambda: budget.used == 300 * KIB, "the body charged")
    writer.transport.abort()
    await _until(lambda: budget.used == 0, "the body given back")


async def test_a_body_trickled_below_the_minimum_rate_is_408_though_bytes_keep_coming(serve: Serve) -> None:
    budget = BufferBudget(1024 * KIB, logging.getLogger("test"), lambda: 0.0)
    srv = await serve(budget=budget, body_timeout=0.3, min_receive_rate=10 * KIB)
    reader, writer = await _begin_upload(srv, "trickle", 200 * KIB, b"a" * (100 * KIB))
    answer = asyncio.ensure_future(_answer(reader))
    for _ in range(100):  # a byte every 20 ms: never near 0.3 s without one, but 50 bytes/s
        if answer.done():
            break
        writer.write(b"b")
        await asyncio.sleep(0.02)
    status, body = await answer
    assert (status, json.loads(body)["error"]) == (408, "request_timeout"), body
    assert "min_receive_rate" in json.loads(body)["detail"]
    assert budget.used == 0
    writer.close()


async def test_an_upload_within_the_budget_and_the_rate_succeeds(serve: Serve, node: LMQNode) -> None:
    budget = BufferBudget(1024 * KIB, logging.getLogger("test"), lambda: 0.0)
    srv = await serve(budget=budget, body_timeout=0.3, min_receive_rate=10 * KIB)
    body = bytes(range(256)) * (3 * 1024)  # 768 KiB, in 32 KiB pieces every 20 ms (1.6 MiB/s)
    reader, writer = await _begin_upload(srv, "fits", len(body), b"")
    for i in range(0, len(body), 32 * KIB):
        writer.write(body[i : i + 32 * KIB])
        await asyncio.sleep(0.02)
    assert (await _answer(reader))[0] == 200
    writer.close()
    assert budget.used == 0
    d = await node.manager.pull("fits", 0)
    assert d is not None and d.message.items()[0][1] == body


async def test_small_requests_are_served_while_the_budget_is_full(serve: Serve) -> None:
    budget = BufferBudget(256 * KIB, logging.getLogger("test"), lambda: 0.0)
    srv = await serve(budget=budget)
    _, holder = await _begin_upload(srv, "hold", 256 * KIB, b"a" * (256 * KIB - 1))
    await _until(lambda: budget.used == 256 * KIB - 1, "the budget filled")
    reader, writer = await _begin_upload(srv, "small", 5, b"small")  # whole within one read
    assert (await _answer(reader))[0] == 200
    writer.close()
    holder.close()


async def test_a_body_larger_than_the_whole_budget_is_413_before_it_is_sent(serve: Serve) -> None:
    budget = BufferBudget(256 * KIB, logging.getLogger("test"), lambda: 0.0)
    srv = await serve(budget=budget)
    reader, writer = await _begin_upload(srv, "huge", 512 * KIB, b"")
    status, body = await _answer(reader)
    assert (status, json.loads(body)["error"]) == (413, "too_large"), body
    assert "max_buffered_bytes" in json.loads(body)["detail"]
    writer.close()
