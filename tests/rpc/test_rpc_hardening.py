"""The MessagePack-RPC server under hostile clients: pipelined long polls hold a bounded number
of requests in flight yet are all answered, and connections past the limit are refused."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from pylmq.api.rpc_server import RpcServer
from pylmq.log import format_line
from pylmq.node import LMQNode
from tests.rpc.rpc_helpers import RawClient, open_client
from tests.suite_store import SuiteOptions, node_eager


def _waiting(node: LMQNode, name: str) -> int:
    q = node.manager.get(name)
    return 0 if q is None else sum(1 for w in q._waiters if w.live)


async def _settled(node: LMQNode, name: str, at_least: int) -> int:
    """The number of pulls waiting on ``name`` once it has stopped growing."""
    last, stable = -1, 0
    for _ in range(500):
        n = _waiting(node, name)
        stable = stable + 1 if n == last and n >= at_least else 0
        if stable >= 10:
            return n
        last = n
        await asyncio.sleep(0.01)
    raise AssertionError(f"waiting pulls on {name} never settled (last {last})")


async def test_pipelined_long_polls_are_capped_per_connection_and_all_answered_in_order(
    client: RawClient, connect: Callable[[], Awaitable[RawClient]], node: LMQNode
) -> None:
    n = 2000
    pulls = [client.request("pull", "capped", 30) for _ in range(n)]
    await client.writer.drain()
    # The node's default cap: 128 pulls wait, the other 1,872 are not started yet.
    assert await _settled(node, "capped", 1) == 128
    pusher = await connect()
    pushes = [pusher.request("push", "capped", i) for i in range(n)]
    for msgid in pushes:
        assert await pusher.response(msgid) == (None, "ok")
    # Every pull is answered: none lost, none given twice.
    got = []
    for msgid in pulls:
        error, result = await client.response(msgid, timeout=10)
        assert error is None, error
        got.append(result["content"])
    assert sorted(got) == list(range(n))
    if node_eager(node)():
        # Each with the next message: pipelined requests run concurrently (docs/lmq-contract.md),
        # so the pulls join the line in the order they were sent only where each gets there at
        # once, as on an in-process store.
        assert got == list(range(n))
    assert await pusher.call("pull", "capped", 0) == "empty"


async def test_a_configured_cap_holds_under_a_flood_of_pulls(node: LMQNode) -> None:
    server = RpcServer(node.manager, eager=node_eager(node), max_inflight=16)
    address = await server.start("127.0.0.1", 0)
    c = await open_client(address)
    try:
        pulls = [c.request("pull", "cap16", 0.2) for _ in range(100)]
        await c.writer.drain()
        assert await _settled(node, "cap16", 1) == 16
        # They time out 16 at a time; every one is answered "empty".
        for msgid in pulls:
            assert await c.response(msgid, timeout=15) == (None, "empty")
    finally:
        await c.close()
        await server.close()


async def test_requests_waiting_their_turn_at_shutdown_are_answered_shutting_down(node: LMQNode) -> None:
    server = RpcServer(node.manager, eager=node_eager(node), max_inflight=2)
    address = await server.start("127.0.0.1", 0)
    c = await open_client(address)
    try:
        ids = [c.request("pull", "stop", 30) for _ in range(5)]
        await c.writer.drain()
        assert await _settled(node, "stop", 2) == 2
        await server.close()
        for msgid in ids:
            error, _ = await c.response(msgid)
            assert error is not None and error[0] == "shutting_down", error
        assert await c.closed_by_server()
    finally:
        await c.close()


@pytest.fixture
async def limited(node: LMQNode) -> AsyncIterator[tuple[str, int]]:
    server = RpcServer(node.manager, eager=node_eager(node), max_connections=2)
    yield await server.start("127.0.0.1", 0)
    await server.close()


async def test_connections_past_the_limit_are_closed_with_one_log_line(
    limited: tuple[str, int], caplog: pytest.LogCaptureFixture
) -> None:
    held = [await open_client(limited) for _ in range(2)]
    extra: list[RawClient] = []
    try:
        for c in held:
            assert await c.call("get_default_props") == []
        caplog.set_level(logging.WARNING, logger="pylmq.rpc")
        for _ in range(4):
            c = await open_client(limited)
            extra.append(c)
            assert await c.closed_by_server()
        lines = [r.getMessage() for r in caplog.records if "connection limit" in r.getMessage()]
        assert len(lines) == 1 and "MessagePack-RPC" in lines[0], lines
        assert await held[1].call("get_default_props") == []
        await held[0].close()
        for _ in range(100):  # once one goes, the next is let in
            c = await open_client(limited)
            extra.append(c)
            try:
                result: Any = await c.call("get_default_props", timeout=1)
            except (TimeoutError, ConnectionError):
                await asyncio.sleep(0.02)
                continue
            assert result == []
            break
        else:
            raise AssertionError("a connection within the limit was never served")
    finally:
        for c in held + extra:
            await c.close()


async def test_an_error_quoting_a_5000_character_id_is_cut_short(client: RawClient) -> None:
    await client.call("push", "q", "kept")
    error = await client.error("done", "q", "i" * 5000)
    assert error[0] == "not_found" and len(error[1]) < 400 and error[1].endswith(" more characters)"), error


async def test_a_newline_in_a_queue_name_does_not_forge_an_access_log_line(
    client: RawClient, caplog: pytest.LogCaptureFixture
) -> None:
    name = "q\n2026-01-01 00:00:00.000 [emergency] <0.1.0>@lmq:forged:1 node compromised"
    with caplog.at_level(logging.INFO, logger="pylmq.access"):
        assert await client.call("push", name, 1) == "ok"
    (record,) = [r for r in caplog.records if r.name == "pylmq.access"]
    line = format_line(record, 1_700_000_000.0)
    assert line.count("\n") == 1 and "push q\\n2026-01-01 00:00:00.000 [emergency]" in line, line


def test_the_in_flight_cap_on_uvloop(suite_options: SuiteOptions) -> None:
    """On uvloop, the loop a node runs: pipelined pulls wait their turn and are all answered."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        node = LMQNode(suite_options(http=None, rpc=None))
        await node.start()
        server = RpcServer(node.manager, eager=node_eager(node), max_inflight=8)
        address = await server.start("127.0.0.1", 0)
        c, pusher = await open_client(address), await open_client(address)
        try:
            pulls = [c.request("pull", "uv", 10) for _ in range(200)]
            await c.writer.drain()
            assert await _settled(node, "uv", 1) == 8
            for i in range(200):
                pusher.request("push", "uv", i)
            got = []
            for msgid in pulls:
                error, result = await c.response(msgid)
                assert error is None, error
                got.append(result["content"])
            assert sorted(got) == list(range(200))
            if node_eager(node)():  # in the order sent where requests run at once (as above)
                assert got == list(range(200))
        finally:
            await c.close()
            await pusher.close()
            await server.close()
            await node.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(asyncio.wait_for(main(), 30))
