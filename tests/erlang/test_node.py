"""Node semantics between pylmq nodes (no Erlang): simultaneous connects, local links, monitors, receive."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from pylmq.erlang import Atom, Node
from pylmq.erlang.epmd import EpmdServer
from pylmq.errors import DistError, PeerStalled, ProcessExited, RemoteError
from tests.erlang.otp_nodes import unique_name

A = Atom


@pytest.fixture
async def epmd_port() -> AsyncIterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = await EpmdServer().start("127.0.0.1", port)
    yield port
    await server.stop()


async def two_nodes(epmd_port: int) -> tuple[Node, Node]:
    a = await Node(unique_name("a") + "@127.0.0.1", "c", epmd_port=epmd_port, listen_host="127.0.0.1").start()
    b = await Node(unique_name("b") + "@127.0.0.1", "c", epmd_port=epmd_port, listen_host="127.0.0.1").start()
    return a, b


async def test_simultaneous_connect_ends_with_one_connection_and_both_messages(epmd_port: int) -> None:
    a, b = await two_nodes(epmd_port)
    try:
        pa, pb = a.spawn("inbox"), b.spawn("inbox")
        pa.send(("inbox", b.name), A("from_a"))
        pb.send(("inbox", a.name), A("from_b"))
        assert await pb.receive(timeout=5) is A("from_a")
        assert await pa.receive(timeout=5) is A("from_b")
        await asyncio.sleep(0.1)
        assert a.connected_nodes() == [b.name] and b.connected_nodes() == [a.name]
    finally:
        await a.stop()
        await b.stop()


async def test_rpc_between_pylmq_nodes_only_reaches_registered_functions(epmd_port: int) -> None:
    a, b = await two_nodes(epmd_port)
    try:
        b.register_function("m", "double", lambda x: 2 * x)
        assert await a.rpc(b.name, "m", "double", [21]) == 42
        with pytest.raises(RemoteError) as info:
            await a.rpc(b.name, "os", "system", [b"true"])
        term = info.value.term
        assert isinstance(term, tuple) and isinstance(term[1], tuple) and term[1][0] is A("undef"), term
    finally:
        await a.stop()
        await b.stop()


async def test_selective_receive_leaves_other_messages_in_order(epmd_port: int) -> None:
    node = await Node(unique_name("s") + "@127.0.0.1", "c", epmd_port=epmd_port).start(register=False)
    try:
        p = node.spawn()
        for m in (1, A("x"), 2, 3):
            node.send(p.pid, m)
        assert await p.receive(lambda m: m is A("x"), timeout=1) is A("x")
        assert [await p.receive(timeout=1) for _ in range(3)] == [1, 2, 3]
        with pytest.raises(TimeoutError):
            await p.receive(timeout=0.05)
    finally:
        await node.stop()


async def test_local_link_kills_a_non_trapping_process_and_wakes_its_receive(epmd_port: int) -> None:
    node = await Node(unique_name("s") + "@127.0.0.1", "c", epmd_port=epmd_port).start(register=False)
    try:
        p, q = node.spawn(), node.spawn()
        p.link(q.pid)
        waiting = asyncio.ensure_future(p.receive())
        await asyncio.sleep(0)
        q.exit(A("crash"))
        with pytest.raises(ProcessExited):
            await waiting
        assert p.exit_reason is A("crash")
    finally:
        await node.stop()


async def test_local_monitor_by_name_gets_down_and_unknown_name_gets_noproc(epmd_port: int) -> None:
    node = await Node(unique_name("s") + "@127.0.0.1", "c", epmd_port=epmd_port).start(register=False)
    try:
        watcher, target = node.spawn(), node.spawn("target")
        ref = watcher.monitor("target")
        target.exit(A("bye"))
        assert await watcher.receive(timeout=1) == (A("DOWN"), ref, A("process"), (A("target"), node.atom), A("bye"))
        ref2 = watcher.monitor("nobody")
        assert (await watcher.receive(timeout=1))[1::3] == (ref2, A("noproc"))
    finally:
        await node.stop()


async def test_registering_a_taken_name_is_refused(epmd_port: int) -> None:
    node = await Node(unique_name("s") + "@127.0.0.1", "c", epmd_port=epmd_port).start(register=False)
    try:
        node.spawn("only")
        with pytest.raises(DistError, match="already registered"):
            node.spawn("only")
    finally:
        await node.stop()


async def stalled_pair(epmd_port: int, stall_timeout: float) -> tuple[Node, Node]:
    a = await Node(
        unique_name("a") + "@127.0.0.1", "c", epmd_port=epmd_port, listen_host="127.0.0.1", stall_timeout=stall_timeout
    ).start()
    b = await Node(unique_name("b") + "@127.0.0.1", "c", epmd_port=epmd_port, listen_host="127.0.0.1").start()
    return a, b


def freeze(b: Node, peer: str) -> asyncio.ReadTransport:
    """b stops reading from peer, as a suspended node: it neither answers nor ticks (ticks come
    only every net_ticktime/4, a minute's quarter here)."""
    transport = b.net_kernel.connections[peer]._writer.transport
    assert isinstance(transport, asyncio.ReadTransport)
    transport.pause_reading()
    return transport


async def test_a_silent_peer_is_stalled_within_the_stall_timeout_and_its_pending_call_fails(
    epmd_port: int, caplog: pytest.LogCaptureFixture
) -> None:
    a, b = await stalled_pair(epmd_port, stall_timeout=0.4)
    seen: list[tuple[str, bool]] = []
    a.monitor_stalls(lambda peer, stalled: seen.append((peer, stalled)))
    try:
        b.register_function("m", "echo", lambda x: x)
        assert await a.rpc(b.name, "m", "echo", [1]) == 1
        transport = freeze(b, a.name)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(PeerStalled):
            await a.rpc(b.name, "m", "echo", [2], timeout=30)
        assert loop.time() - started < 5, "the pending call should fail at the stall, not at its 30 s timeout"
        assert b.name in a.stalled_nodes() and seen == [(b.name, True)]
        with pytest.raises(PeerStalled) as info:  # at once: no call waits on a stalled peer
            await a.rpc(b.name, "m", "echo", [3], timeout=30)
        assert info.value.sent is False
        assert any(b.name in r.getMessage() and "stalled" in r.getMessage() for r in caplog.records)
        transport.resume_reading()
        for _ in range(100):
            if not a.stalled_nodes():
                break
            await asyncio.sleep(0.05)
        assert a.stalled_nodes() == {} and seen == [(b.name, True), (b.name, False)]
        assert await a.rpc(b.name, "m", "echo", [4]) == 4
        assert a.connected_nodes() == [b.name], "a stall alone must not drop the connection"
    finally:
        await a.stop()
        await b.stop()


async def test_an_idle_peer_that_answers_the_probe_is_never_stalled(epmd_port: int) -> None:
    a, b = await stalled_pair(epmd_port, stall_timeout=0.3)
    try:
        b.register_function("m", "echo", lambda x: x)
        assert await a.rpc(b.name, "m", "echo", [1]) == 1
        await asyncio.sleep(1.5)  # five stall timeouts of silence but for the probes' answers
        assert a.stalled_nodes() == {}
    finally:
        await a.stop()
        await b.stop()
