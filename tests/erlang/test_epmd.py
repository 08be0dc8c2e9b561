"""EPMD messages byte for byte, pylmq's own epmd server, and the client against the system epmd."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess

import pytest

from pylmq.erlang import Atom, Node, epmd
from pylmq.errors import DistError
from tests.erlang.dist_helpers import erl_eval
from tests.erlang.otp_nodes import COOKIE, ensure_epmd, unique_name


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_alive2_request_layout() -> None:
    entry = epmd.NodeEntry("py", 5000, epmd.NODE_HIDDEN, 0, 6, 5)
    assert epmd.alive2_request(entry) == bytes.fromhex("000f 78 1388 48 00 0006 0005 0002 7079 0000")


def test_alive2_responses_old_and_extended() -> None:
    assert epmd.parse_alive2_response(bytes.fromhex("76 00 6b018c17")) == (0, 0x6B018C17)
    assert epmd.parse_alive2_response(bytes.fromhex("79 00 0002")) == (0, 2)
    assert epmd.alive2_response(1, 0, extended=True) == bytes.fromhex("76 01 00000000")


def test_port2_response_round_trips_and_unknown_is_none() -> None:
    entry = epmd.NodeEntry("lmq", 41234, epmd.NODE_NORMAL, 0, 6, 5, b"x")
    assert epmd.parse_port2_response(epmd.port2_response(entry)) == entry
    assert epmd.parse_port2_response(bytes([119, 1])) is None
    assert epmd.port_please2_request("lmq") == bytes.fromhex("0004 7a 6c6d71")


def test_names_response_parses() -> None:
    raw = epmd.names_response(4369, [epmd.NodeEntry("a", 1), epmd.NodeEntry("b", 2)])
    assert epmd.parse_names_response(raw) == {"a": 1, "b": 2}


async def test_own_server_registers_looks_up_lists_and_forgets_closed_registrations() -> None:
    server = await epmd.EpmdServer().start("127.0.0.1", 0)
    try:
        reg = await epmd.register("pyx", 5555, port=server.port)
        assert reg.creation != 0
        with pytest.raises(DistError, match="refused"):
            await epmd.register("pyx", 5556, port=server.port)
        entry = await epmd.lookup("pyx", port=server.port)
        assert entry is not None and (entry.port, entry.node_type, entry.highest_version) == (5555, 72, 6)
        assert await epmd.names(port=server.port) == {"pyx": 5555}
        await reg.close()
        for _ in range(50):
            if await epmd.lookup("pyx", port=server.port) is None:
                break
            await asyncio.sleep(0.02)
        assert await epmd.lookup("pyx", port=server.port) is None
    finally:
        await server.stop()


async def test_ensure_epmd_starts_a_server_only_when_none_answers() -> None:
    port = free_port()
    started = await epmd.ensure_epmd("127.0.0.1", port)
    try:
        assert started is not None and started.port == port
        assert await epmd.ensure_epmd("127.0.0.1", port) is None
    finally:
        assert started is not None
        await started.stop()


async def test_unreachable_epmd_is_a_clear_error() -> None:
    with pytest.raises(DistError, match="unreachable"):
        await epmd.names(port=free_port(), timeout=2)


@pytest.mark.erl
async def test_client_against_system_epmd_sees_our_registration() -> None:
    ensure_epmd()
    alive = unique_name("pyreg")
    reg = await epmd.register(alive, 6789, port=4369)
    try:
        entry = await epmd.lookup(alive, port=4369)
        assert entry is not None and entry.port == 6789
        assert alive in subprocess.run(["epmd", "-names"], capture_output=True, text=True, timeout=10).stdout
    finally:
        await reg.close()


@pytest.mark.erl
async def test_erlang_node_finds_pylmq_through_pylmq_own_epmd() -> None:
    # A host with no epmd: pylmq starts its own on ERL_EPMD_PORT and an Erlang node registers there.
    port = free_port()
    node = await Node(unique_name("py") + "@127.0.0.1", COOKIE, epmd_port=port, listen_host="127.0.0.1").start()
    assert node.net_kernel.epmd_server is not None, "pylmq did not start its own epmd"
    alive = unique_name("e")
    env = dict(os.environ, ERL_EPMD_PORT=str(port))
    erl = subprocess.Popen(
        ["erl", "-name", f"{alive}@127.0.0.1", "-setcookie", COOKIE, "-noshell", "-noinput"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            if alive in await epmd.names(port=port):
                break
            await asyncio.sleep(0.1)
        peer = f"{alive}@127.0.0.1"
        assert await node.rpc(peer, "net_adm", "ping", [Atom(node.name)]) is Atom("pong")
        assert await erl_eval(node, peer, f"net_adm:ping('{node.name}').") is Atom("pong")
    finally:
        erl.kill()
        erl.wait(10)
        await node.stop()
