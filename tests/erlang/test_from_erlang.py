"""Erlang nodes calling into a pylmq node: ping, rpc/erpc, gen_server calls, events, monitors, links."""

from __future__ import annotations

import asyncio

import pytest

from pylmq.erlang import Atom, ImproperList, Node, Reference
from tests.erlang.dist_helpers import erl_eval
from tests.erlang.otp_nodes import ErlNode

pytestmark = pytest.mark.erl
A = Atom


async def test_net_adm_ping_from_erlang_gives_pong(py: Node, erl: ErlNode) -> None:
    got = await py.rpc(erl.name, "net_adm", "ping", [A(py.name)])
    assert got is A("pong"), f"expected pong, got {got!r}"


async def test_rpc_call_into_whitelisted_function_returns_its_value(py: Node, erl: ErlNode) -> None:
    py.register_function("pyt", "add", lambda a, b: a + b)
    got = await py.rpc(erl.name, "rpc", "call", [A(py.name), A("pyt"), A("add"), [40, 2]])
    assert got == 42


async def test_erpc_call_into_async_whitelisted_function_returns_its_value(py: Node, erl: ErlNode) -> None:
    async def greet(who: bytes) -> tuple[Atom, bytes]:
        await asyncio.sleep(0)
        return (A("hello"), who)

    py.register_function("pyt", "greet", greet)
    got = await py.rpc(erl.name, "erpc", "call", [A(py.name), A("pyt"), A("greet"), [b"erl"]])
    assert got == (A("hello"), b"erl")


async def test_rpc_call_into_missing_function_is_undef(py: Node, erl: ErlNode) -> None:
    got = await erl_eval(py, erl.name, f"rpc:call('{py.name}', os, cmd, [\"true\"]).")
    assert got == (A("badrpc"), (A("EXIT"), (A("undef"), [(A("os"), A("cmd"), [[116, 114, 117, 101]], [])])))


async def test_erpc_call_into_missing_function_raises_undef(py: Node, erl: ErlNode) -> None:
    code = f"try erpc:call('{py.name}', pyt, nope, []) catch error:{{exception, undef, _}} -> got_undef end."
    assert await erl_eval(py, erl.name, code) is A("got_undef")


async def test_python_exception_reaches_erlang_as_an_error(py: Node, erl: ErlNode) -> None:
    def boom() -> None:
        raise ValueError("no")

    py.register_function("pyt", "boom", boom)
    code = f"try erpc:call('{py.name}', pyt, boom, []) catch error:{{exception, E, _}} -> E end."
    assert await erl_eval(py, erl.name, code) == (A("python"), b"ValueError", b"no")


async def test_gen_server_call_to_a_named_python_process_is_answered_with_the_callers_tag(
    py: Node, erl: ErlNode
) -> None:
    tags: list[object] = []

    def handle_call(request: object, from_: tuple[object, object]) -> object:
        tags.append(from_[1])
        return (A("got"), request)

    py.serve("pyserver", handle_call=handle_call)
    got = await erl_eval(py, erl.name, f"gen_server:call({{pyserver, '{py.name}'}}, {{ask, 1}}, 5000).")
    assert got == (A("got"), (A("ask"), 1))
    assert len(tags) == 1 and isinstance(tags[0], (ImproperList, Reference)), tags


async def test_gen_server_call_to_an_unknown_name_fails_at_once_with_noproc(py: Node, erl: ErlNode) -> None:
    code = f"try gen_server:call({{nobody, '{py.name}'}}, x, 10000) catch exit:{{R, _}} -> R end."
    assert await erl_eval(py, erl.name, code, timeout=5) is A("noproc")


async def test_gen_event_notify_arrives_as_notify_tuple(py: Node, erl: ErlNode) -> None:
    events = py.spawn("lmq_event")
    await erl_eval(py, erl.name, f"gen_event:notify({{lmq_event, '{py.name}'}}, {{remote, new_message}}).")
    got = await events.receive(timeout=5)
    assert got == (A("notify"), (A("remote"), A("new_message")))


async def test_erlang_monitor_on_a_python_process_gets_down_with_the_exit_reason(py: Node, erl: ErlNode) -> None:
    proc = py.spawn("watched")
    code = (
        f"P = rpc:call('{py.name}', erlang, whereis, [watched]), "  # undef: whereis is not whitelisted
        f"Pid = {{watched, '{py.name}'}}, Ref = monitor(process, Pid), Pid ! monitored, "
        "receive {'DOWN', Ref, process, _, R} -> {P, R} after 5000 -> timeout end."
    )
    waiting = asyncio.ensure_future(erl_eval(py, erl.name, code))
    assert await proc.receive(timeout=5) is A("monitored")
    proc.exit(A("shutdown_by_python"))
    got = await waiting
    assert got[1] is A("shutdown_by_python"), got


async def test_link_from_erlang_gets_the_python_exit_reason(py: Node, erl: ErlNode) -> None:
    proc = py.spawn("linked")
    code = (
        "process_flag(trap_exit, true), "
        f"{{linked, '{py.name}'}} ! {{self(), hello}}, "
        "receive {linked_pid, P} -> link(P), P ! linked end, "
        "receive {'EXIT', _, R} -> R after 5000 -> timeout end."
    )
    waiting = asyncio.ensure_future(erl_eval(py, erl.name, code))
    _, hello = sender = await proc.receive(timeout=5)
    assert hello is A("hello")
    proc.send(sender[0], (A("linked_pid"), proc.pid))
    assert await proc.receive(timeout=5) is A("linked")
    proc.exit(A("bye"))
    assert await waiting is A("bye")


async def test_link_from_python_gets_the_erlang_exit_reason(py: Node, erl: ErlNode) -> None:
    proc = py.spawn()
    proc.trap_exit = True
    epid = await erl_eval(py, erl.name, "spawn(fun() -> receive stop -> exit(erlang_said_bye) end end).")
    proc.link(epid)
    proc.send(epid, A("stop"))
    got = await proc.receive(timeout=5)
    assert got == (A("EXIT"), epid, A("erlang_said_bye"))


async def test_unlink_completes_the_unlink_id_exchange(py: Node, erl: ErlNode) -> None:
    proc = py.spawn()
    epid = await erl_eval(py, erl.name, "spawn(fun() -> receive stop -> exit(crash) end end).")
    proc.link(epid)
    links = await py.rpc(erl.name, "erlang", "process_info", [epid, A("links")])
    assert links == (A("links"), [proc.pid])
    proc.unlink(epid)
    assert proc.links[epid] != 0  # unlinking: waiting for the ack
    for _ in range(100):
        if epid not in proc.links:
            break
        await asyncio.sleep(0.02)
    assert epid not in proc.links, "no UNLINK_ID_ACK came"
    links = await py.rpc(erl.name, "erlang", "process_info", [epid, A("links")])
    assert links == (A("links"), [])
    proc.send(epid, A("stop"))
    await asyncio.sleep(0.2)
    assert proc.alive, "an exit through a removed link killed the process"
