"""A pylmq node calling into Erlang: rpc, sends, monitors, big and many messages, node loss."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal

import pytest

from pylmq.erlang import Atom, Node
from pylmq.erlang.terms import Pid
from pylmq.errors import CookieMismatch, NodeDown, RemoteError
from tests.erlang.dist_helpers import erl_eval
from tests.erlang.otp_nodes import COOKIE, ErlNode, Runtime, unique_name

pytestmark = pytest.mark.erl
A = Atom


async def test_rpc_erlang_node_returns_the_node_atom(py: Node, erl: ErlNode) -> None:
    assert await py.rpc(erl.name, "erlang", "node", []) is A(erl.name)


async def test_rpc_lists_seq_returns_the_list(py: Node, erl: ErlNode) -> None:
    assert await py.rpc(erl.name, "lists", "seq", [1, 300]) == list(range(1, 301))


async def test_rpc_error_raises_remote_error_with_the_badrpc_reason(py: Node, erl: ErlNode) -> None:
    with pytest.raises(RemoteError) as info:
        await py.rpc(erl.name, "erlang", "binary_to_atom", [42])
    reason = info.value.term
    assert isinstance(reason, tuple) and isinstance(reason[1], tuple), reason
    assert reason[0] is A("EXIT") and reason[1][0] is A("badarg"), reason


async def test_spawn_call_runs_in_a_process_whose_pid_comes_before_the_answer(py: Node, erl: ErlNode) -> None:
    seen: list[Pid] = []
    me = await py.spawn_call(erl.name, "erlang", "self", [], 5, spawned=seen.append)
    assert seen == [me], "expected the pid of the process that ran the call, reported first"
    assert me.node is A(erl.name)
    assert await py.spawn_call(erl.name, "lists", "seq", [1, 300], 5) == list(range(1, 301))
    assert await py.spawn_call(erl.name, "erlang", "throw", [A("thrown")], 5) is A("thrown"), "as rpc:call"


async def test_spawn_call_processes_have_the_peers_user_as_group_leader(py: Node, erl: ErlNode) -> None:
    # As rex's workers: their output and log events go where the peer's own go.
    user = await py.rpc(erl.name, "erlang", "whereis", [A("user")])
    assert await py.spawn_call(erl.name, "erlang", "group_leader", [], 5) == user
    assert await py.spawn_call(erl.name, "io", "format", ["said ~p~n", [A("hello")]], 5) is A("ok")


async def test_a_spawn_call_given_up_before_its_spawn_reply_still_tells_the_pid(py: Node, erl: ErlNode) -> None:
    # The process may still run the call: its writes must still be known as this node's.
    await py.spawn_call(erl.name, "erlang", "node", [], 5)  # connected, its group leader known
    assert erl.proc is not None
    seen: list[Pid] = []
    os.kill(erl.proc.pid, signal.SIGSTOP)
    try:
        with pytest.raises((TimeoutError, NodeDown)):  # NodeDown: PeerStalled, if seen first
            await py.spawn_call(erl.name, "erlang", "self", [], 0.3, spawned=seen.append)
        assert seen == []
    finally:
        os.kill(erl.proc.pid, signal.SIGCONT)
    for _ in range(100):
        if seen:
            break
        await asyncio.sleep(0.05)
    assert len(seen) == 1 and seen[0].node is A(erl.name), seen


async def test_spawn_call_errors_are_those_of_rpc(py: Node, erl: ErlNode) -> None:
    with pytest.raises(RemoteError) as info:
        await py.spawn_call(erl.name, "erlang", "binary_to_atom", [42], 5)
    reason = info.value.term
    assert isinstance(reason, tuple) and isinstance(reason[1], tuple), reason
    assert reason[0] is A("EXIT") and reason[1][0] is A("badarg"), reason
    with pytest.raises(RemoteError) as info:
        await py.spawn_call(erl.name, "erlang", "exit", [A("gone")], 5)
    assert info.value.term == (A("EXIT"), A("gone"))
    with pytest.raises(TimeoutError):
        await py.spawn_call(erl.name, "timer", "sleep", [2000], 0.2)
    # The late end of the call given up is dropped; the node goes on answering.
    await asyncio.sleep(2)
    assert await py.spawn_call(erl.name, "erlang", "abs", [-3], 5) == 3


async def test_send_to_erlang_registered_process_gets_its_reply(py: Node, erl: ErlNode) -> None:
    name = unique_name("echo")
    await erl_eval(
        py, erl.name, f"register({name}, spawn(fun L() -> receive {{From, M}} -> From ! {{echoed, M}}, L() end end))."
    )
    proc = py.spawn()
    proc.send((name, erl.name), (proc.pid, b"ping"))
    assert await proc.receive(timeout=5) == (A("echoed"), b"ping")


async def test_gen_server_call_into_erlang_gets_the_reply(py: Node, erl: ErlNode) -> None:
    assert await py.call((A("rex"), A(erl.name)), (A("call"), A("erlang"), A("abs"), [-3], A("user"))) == 3


async def test_ping_from_python_is_pong(py: Node, erl: ErlNode) -> None:
    assert await py.ping(erl.name) is True


async def test_monitor_on_erlang_process_gets_down_when_it_exits(py: Node, erl: ErlNode) -> None:
    proc = py.spawn()
    epid = await erl_eval(py, erl.name, "spawn(fun() -> receive stop -> exit(done_here) end end).")
    ref = proc.monitor(epid)
    proc.send(epid, A("stop"))
    assert await proc.receive(timeout=5) == (A("DOWN"), ref, A("process"), epid, A("done_here"))


async def test_monitor_on_unknown_erlang_name_gets_noproc(py: Node, erl: ErlNode) -> None:
    proc = py.spawn()
    ref = proc.monitor((A("no_such_name"), A(erl.name)))
    got = await proc.receive(timeout=5)
    assert got == (A("DOWN"), ref, A("process"), (A("no_such_name"), A(erl.name)), A("noproc"))


async def test_ten_megabyte_binary_crosses_both_ways(py: Node, erl: ErlNode) -> None:
    big = bytes(range(256)) * 40960  # 10 MiB
    assert await py.rpc(erl.name, "erlang", "byte_size", [big]) == len(big)
    back = await py.rpc(erl.name, "binary", "copy", [b"\x07", 10 * 1024 * 1024])
    assert back == b"\x07" * (10 * 1024 * 1024)


async def test_ten_thousand_messages_from_erlang_arrive_in_order(py: Node, erl: ErlNode) -> None:
    proc = py.spawn()
    await erl_eval(py, erl.name, f"P = {erl_pid(proc.pid)}, [P ! {{seq, N}} || N <- lists:seq(1, 10000)], ok.")
    got = [(await proc.receive(timeout=10))[1] for _ in range(10000)]
    assert got == list(range(1, 10001))


async def test_ten_thousand_messages_from_python_arrive_in_order(py: Node, erl: ErlNode) -> None:
    proc = py.spawn()
    epid = await erl_eval(
        py,
        erl.name,
        "spawn(fun() -> Got = [receive {seq, N} -> N end || _ <- lists:seq(1, 10000)], "
        "receive {report, P} -> P ! {in_order, Got =:= lists:seq(1, 10000)} end end).",
    )
    for n in range(1, 10001):
        proc.send(epid, (A("seq"), n))
    proc.send(epid, (A("report"), proc.pid))
    assert await proc.receive(timeout=20) == (A("in_order"), A("true"))


def erl_pid(pid: object) -> str:
    """Erlang source that rebuilds ``pid`` on the remote node (binary_to_term of its encoding)."""
    from pylmq.erlang import encode

    return f"binary_to_term(<<{','.join(map(str, encode(pid)))}>>)"


async def test_wrong_cookie_from_python_fails_fast_naming_the_peer(erl: ErlNode) -> None:
    node = await Node(unique_name("py") + "@127.0.0.1", "not-the-cookie", listen_host="127.0.0.1").start()
    try:
        async with asyncio.timeout(5):
            with pytest.raises(CookieMismatch, match=re.escape(erl.name)):
                await node.rpc(erl.name, "erlang", "node", [])
    finally:
        await node.stop()


async def test_wrong_cookie_from_erlang_is_refused_and_logged(
    py: Node, erl: ErlNode, caplog: pytest.LogCaptureFixture
) -> None:
    other = await Node(unique_name("py") + "@127.0.0.1", "another-cookie", listen_host="127.0.0.1").start()
    try:
        with caplog.at_level(logging.ERROR, logger="pylmq.erlang"):
            got = await py.rpc(erl.name, "net_adm", "ping", [A(other.name)], timeout=10)
        assert got is A("pang")
        assert any("cookies differ" in r.getMessage() and erl.name in r.getMessage() for r in caplog.records), [
            r.getMessage() for r in caplog.records
        ]
    finally:
        await other.stop()


async def test_unregistered_peer_is_a_clear_node_down(py: Node) -> None:
    with pytest.raises(NodeDown, match="not registered"):
        await py.rpc("nobody_here@127.0.0.1", "erlang", "node", [])


@pytest.mark.slow
async def test_killed_node_gives_noconnection_and_a_restart_reconnects(runtime: Runtime, py: Node) -> None:
    erl = ErlNode(runtime, unique_name("k")).start()
    try:
        proc = py.spawn()
        proc.trap_exit = True
        epid = await erl_eval(py, erl.name, "spawn(fun() -> receive stop -> ok end end).")
        proc.link(epid)
        ref = proc.monitor(epid)
        downs: list[tuple[str, str]] = []
        py.monitor_node(erl.name, lambda peer, reason: downs.append((peer, reason)))
        await py.rpc(erl.name, "erlang", "process_info", [epid, A("links")])  # link is in place
        erl.kill()
        first = await proc.receive(timeout=10)
        second = await proc.receive(timeout=10)
        assert {first, second} == {
            (A("EXIT"), epid, A("noconnection")),
            (A("DOWN"), ref, A("process"), epid, A("noconnection")),
        }
        assert downs and downs[0][0] == erl.name
        erl = ErlNode(runtime, erl.alive).start()
        name = unique_name("back")
        await erl_eval(py, erl.name, f"register({name}, spawn(fun() -> receive {{P, M}} -> P ! {{back, M}} end end)).")
        proc.send((name, erl.name), (proc.pid, 1))
        assert await proc.receive(timeout=10) == (A("back"), 1)
    finally:
        erl.stop()


@pytest.mark.slow
async def test_idle_connection_survives_three_tick_times(runtime: Runtime) -> None:
    # net_ticktime 2 (Erlang's timer takes whole seconds): ticks every 0.5 s, a silent peer
    # dropped after 1.5 to 2 s, so 6.5 s of idleness is more than three tick times.
    erl = ErlNode(runtime, unique_name("t"), extra=["-kernel", "net_ticktime", "2"]).start()
    node = await Node(unique_name("py") + "@127.0.0.1", COOKIE, net_ticktime=2, listen_host="127.0.0.1").start()
    try:
        downs: list[tuple[str, str]] = []
        node.monitor_node(erl.name, lambda peer, reason: downs.append((peer, reason)))
        await node.rpc(erl.name, "erlang", "node", [])
        await asyncio.sleep(6.5)
        assert downs == [], f"connection dropped while idle: {downs}"
        assert erl.name in node.connected_nodes()
        assert A(node.name) in await node.rpc(erl.name, "erlang", "nodes", [A("hidden")])
    finally:
        await node.stop()
        erl.stop()
