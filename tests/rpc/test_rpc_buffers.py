"""What MessagePack-RPC clients may hold of frames not yet whole: frames across connections share
one budget (the connection that would pass it is closed and its bytes given back), a frame begun
must keep coming, and slow sockets stuck in a frame give their places to new clients at the
connection limit. A connection idle between frames is left alone."""

from __future__ import annotations

import asyncio
import logging
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable

import msgpack
import pytest

from pylmq.api._limits import BufferBudget
from pylmq.api.rpc_server import RpcServer
from pylmq.node import LMQNode
from pylmq.wire.msgpack_rpc import Decoder
from tests.rpc.rpc_helpers import open_client
from tests.suite_store import SuiteOptions, node_eager

KIB = 1024


def _frame_start(msgid: int, size: int) -> bytes:
    """The first bytes of ``[0, msgid, "push", ["q", <bin of size bytes>]]``."""
    packed_id: bytes = msgpack.packb(msgid)
    return b"\x94\x00" + packed_id + b"\xa4push\x92\xa1q\xc6" + size.to_bytes(4, "big")


async def _until(cond: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if cond():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


Serve = Callable[..., Awaitable[tuple[RpcServer, tuple[str, int]]]]


@pytest.fixture
async def serve(node: LMQNode) -> AsyncIterator[Serve]:
    servers: list[RpcServer] = []

    async def start(**kw: object) -> tuple[RpcServer, tuple[str, int]]:
        srv = RpcServer(node.manager, eager=node_eager(node), **kw)  # type: ignore[arg-type]
        servers.append(srv)
        return srv, await srv.start("127.0.0.1", 0)

    yield start
    for srv in servers:
        await srv.close()


async def test_the_frame_that_passes_the_budget_closes_its_connection_and_every_byte_is_given_back(
    serve: Serve, node: LMQNode
) -> None:
    budget = BufferBudget(1024 * KIB, logging.getLogger("test"), lambda: 0.0)
    _, address = await serve(budget=budget)
    held = [await open_client(address) for _ in range(2)]
    for i, c in enumerate(held):
        c.send(_frame_start(i, 500 * KIB) + b"a" * (400 * KIB))
    await _until(lambda: budget.used >= 800 * KIB, "both frames charged")
    over = await open_client(address)
    over.send(_frame_start(7, 500 * KIB) + b"a" * (400 * KIB))
    assert await over.closed_by_server()
    assert over.responses[7][0][0] == "too_much_buffered", over.responses
    await _until(lambda: budget.used <= 800 * KIB + 32, "the refused frame's bytes given back")
    # The two within the budget complete; whole, they are no longer charged.
    for i, c in enumerate(held):
        c.send(b"b" * (100 * KIB))
        assert await c.response(i) == (None, "ok")
    assert budget.used == 0
    for _ in held:
        d = await node.manager.pull("q", 0)
        assert d is not None and len(d.message.items()[0][1]) > 500 * KIB
    for c in held:
        await c.close()


async def test_a_client_gone_mid_frame_gives_its_bytes_back(serve: Serve) -> None:
    budget = BufferBudget(1024 * KIB, logging.getLogger("test"), lambda: 0.0)
    _, address = await serve(budget=budget)
    c = await open_client(address)
    c.send(_frame_start(1, 500 * KIB) + b"a" * (300 * KIB))
    await _until(lambda: budget.used >= 300 * KIB, "the frame charged")
    c.writer.transport.abort()
    await _until(lambda: budget.used == 0, "the frame given back")


async def test_a_frame_trickled_in_is_closed_at_its_deadline_and_an_idle_connection_is_not(serve: Serve) -> None:
    _, address = await serve(frame_timeout=0.3, min_receive_rate=KIB)
    idle = await open_client(address)
    assert await idle.call("push", "q", "before") == "ok"
    slow = await open_client(address)
    frame = msgpack.packb([0, 1, "push", ["q", "x" * 100]])
    loop = asyncio.get_running_loop()
    start = loop.time()
    closed = asyncio.ensure_future(slow.closed_by_server(timeout=5))
    for byte in frame[:-1]:  # a byte every 20 ms: the frame is never whole
        if closed.done():
            break
        slow.send(bytes((byte,)))
        await asyncio.sleep(0.02)
    assert await closed
    assert loop.time() - start < 1.5, "the frame's deadline runs from its first byte"
    assert await idle.call("push", "q", "after") == "ok", "a connection idle between frames stays"
    await idle.close()
    await slow.close()


async def test_slow_sockets_stuck_in_frames_give_their_places_to_a_new_client(serve: Serve) -> None:
    _, address = await serve(max_connections=3, evict_after=0.1, frame_timeout=60)
    waiting = await open_client(address)
    pull = waiting.request("pull", "lp", 30)  # a request in flight: keeps its place
    stuck = [await open_client(address) for _ in range(2)]
    for c in stuck:
        c.send(_frame_start(1, 1000))
    await asyncio.sleep(0.2)
    fresh = []
    for _ in range(2):  # each newcomer takes the place of one stuck socket
        fresh.append(await open_client(address))
        assert await fresh[-1].call("push", "lp", "hello", timeout=2) == "ok"
    for c in stuck:
        assert await c.closed_by_server()
    assert (await waiting.response(pull))[1]["content"] == "hello"
    # With no stuck socket left, a newcomer past the limit is refused.
    extra = await open_client(address)
    assert await extra.closed_by_server()
    for c in [waiting, extra, *stuck, *fresh]:
        await c.close()


async def test_a_large_frame_streaming_in_keeps_its_place_at_the_limit(serve: Serve) -> None:
    _, address = await serve(max_connections=2, evict_after=0.1, min_receive_rate=KIB)
    idle = await open_client(address)
    assert await idle.call("push", "big", "first") == "ok"
    streaming = await open_client(address)
    size = 400 * KIB
    streaming.send(_frame_start(5, size))
    sent = 0
    for _ in range(10):  # 8 KiB every 20 ms (about 400 KiB/s): well above the rate, for 0.2 s
        streaming.send(b"s" * (8 * KIB))
        sent += 8 * KIB
        await asyncio.sleep(0.02)
    newcomer = await open_client(address)
    assert await newcomer.closed_by_server(), "no place to take: the newcomer is refused"
    streaming.send(b"s" * (size - sent))
    assert await streaming.response(5) == (None, "ok")
    for c in [idle, streaming, newcomer]:
        await c.close()


async def test_rpc_and_http_share_the_node_budget(suite_options: SuiteOptions) -> None:
    opts = suite_options(http=("127.0.0.1", 0), rpc=("127.0.0.1", 0), max_buffered_bytes=KIB * KIB)
    node = LMQNode(opts)
    await node.start()
    try:
        assert node.http_address is not None and node.rpc_address is not None
        _, writer = await asyncio.open_connection(*node.http_address)
        writer.write(b"POST /messages/h HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (KIB * KIB))
        writer.write(b"a" * (700 * KIB))
        await _until(lambda: node.budget().used >= 700 * KIB, "the HTTP body charged")
        c = await open_client(node.rpc_address)
        c.send(_frame_start(3, 500 * KIB) + b"a" * (400 * KIB))
        assert await c.closed_by_server()
        assert c.responses[3][0][0] == "too_much_buffered"
        writer.close()
        await _until(lambda: node.budget().used == 0, "all given back")
    finally:
        await node.stop()


def test_the_decoder_lets_go_of_a_large_frame_once_it_is_whole() -> None:
    frame = msgpack.packb([0, 1, "push", ["q", b"z" * (8 << 20)]])
    decoder = Decoder()
    tracemalloc.start()
    try:
        for i in range(0, len(frame), 64 * KIB):
            events = decoder.feed(frame[i : i + 64 * KIB])
        assert len(events) == 1 and decoder.pending == 0
        del events
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del frame
    # Kept, the unpacker's buffer would still hold the 8 MiB frame on an idle connection.
    assert held < 3 << 20, f"{held} bytes still held after the frame"  # a new unpacker has 1 MiB


def test_a_broken_decoder_holds_nothing() -> None:
    decoder = Decoder(max_message_size=1 << 20)
    decoder.feed(_frame_start(1, 900 * KIB) + b"a" * (800 * KIB))
    assert decoder.pending > 800 * KIB and decoder.pending_msgid == 1
    decoder.discard()
    assert decoder.pending == 0 and decoder.feed(b"\x90") == []
