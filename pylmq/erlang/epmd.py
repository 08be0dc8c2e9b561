"""EPMD, the Erlang port mapper: sans-IO messages, an asyncio client and a small server.

The server exists so that a host without Erlang can still be reached by node name: pylmq
starts it on 127.0.0.1:4369 (or ``ERL_EPMD_PORT``) only when no epmd answers there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import struct
from dataclasses import dataclass

from pylmq.errors import DistError

__all__ = [
    "NODE_HIDDEN",
    "NODE_NORMAL",
    "EpmdServer",
    "NodeEntry",
    "Registration",
    "default_port",
    "ensure_epmd",
    "lookup",
    "names",
    "register",
]

log = logging.getLogger("pylmq.erlang.epmd")

ALIVE2_REQ = 120
ALIVE2_X_RESP = 118
ALIVE2_RESP = 121
PORT_PLEASE2_REQ = 122
PORT2_RESP = 119
NAMES_REQ = 110

NODE_NORMAL = 77
NODE_HIDDEN = 72
PROTO_TCP_IPV4 = 0

_entry = struct.Struct(">HBBHHH")


def default_port() -> int:
    return int(os.environ.get("ERL_EPMD_PORT", "4369"))


@dataclass(frozen=True)
class NodeEntry:
    """What EPMD knows about one node (the PORT2_RESP body)."""

    alive: str
    port: int
    node_type: int = NODE_NORMAL
    protocol: int = PROTO_TCP_IPV4
    highest_version: int = 6
    lowest_version: int = 5
    extra: bytes = b""


# ----------------------------------------------------------------------- sans-IO messages


def _framed(body: bytes) -> bytes:
    return struct.pack(">H", len(body)) + body


def _entry_body(e: NodeEntry) -> bytes:
    alive = e.alive.encode()
    return (
        _entry.pack(e.port, e.node_type, e.protocol, e.highest_version, e.lowest_version, len(alive))
        + alive
        + struct.pack(">H", len(e.extra))
        + e.extra
    )


def alive2_request(entry: NodeEntry) -> bytes:
    return _framed(bytes([ALIVE2_REQ]) + _entry_body(entry))


def parse_alive2_request(body: bytes) -> NodeEntry:
    """``body`` without the length prefix, starting with the request tag."""
    port, node_type, protocol, high, low, nlen = _entry.unpack_from(body, 1)
    alive = body[11 : 11 + nlen].decode()
    (elen,) = struct.unpack_from(">H", body, 11 + nlen)
    extra = body[13 + nlen : 13 + nlen + elen]
    return NodeEntry(alive, port, node_type, protocol, high, low, extra)


def alive2_response(result: int, creation: int, extended: bool) -> bytes:
    if extended:
        return struct.pack(">BBI", ALIVE2_X_RESP, result, creation)
    return struct.pack(">BBH", ALIVE2_RESP, result, creation & 0xFFFF)


def parse_alive2_response(data: bytes) -> tuple[int, int]:
    """(result, creation) from an ALIVE2_X_RESP (6 bytes) or ALIVE2_RESP (4 bytes)."""
    if data[0] == ALIVE2_X_RESP:
        return struct.unpack_from(">BI", data, 1)
    if data[0] == ALIVE2_RESP:
        return struct.unpack_from(">BH", data, 1)
    raise DistError(f"epmd: unexpected ALIVE2 response tag {data[0]}")


def port_please2_request(alive: str) -> bytes:
    return _framed(bytes([PORT_PLEASE2_REQ]) + alive.encode())


def port2_response(entry: NodeEntry | None) -> bytes:
    if entry is None:
        return bytes([PORT2_RESP, 1])
    return bytes([PORT2_RESP, 0]) + _entry_body(entry)


def parse_port2_response(data: bytes) -> NodeEntry | None:
    if not data or data[0] != PORT2_RESP:
        raise DistError(f"epmd: unexpected PORT_PLEASE2 response {data[:8]!r}")
    if data[1] != 0:
        return None
    return parse_alive2_request(data[1:])


def names_response(epmd_port: int, entries: list[NodeEntry]) -> bytes:
    lines = "".join(f"name {e.alive} at port {e.port}\n" for e in entries)
    return struct.pack(">I", epmd_port) + lines.encode()


def parse_names_response(data: bytes) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in data[4:].decode(errors="replace").splitlines():
        parts = line.split()
        if len(parts) == 5 and parts[0] == "name" and parts[2:4] == ["at", "port"]:
            found[parts[1]] = int(parts[4])
    return found


# ----------------------------------------------------------------------- asyncio client


async def _request(host: str, port: int, request: bytes, timeout: float) -> bytes:
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(request)
                return await reader.read()
            finally:
                writer.close()
    except (OSError, TimeoutError) as e:
        raise DistError(f"epmd at {host}:{port} unreachable: {e or type(e).__name__}") from e


async def lookup(
    alive: str, host: str = "127.0.0.1", port: int | None = None, timeout: float = 5.0
) -> NodeEntry | None:
    """PORT_PLEASE2: where node ``alive`` on ``host`` listens, or None if it is not registered."""
    data = await _request(host, port or default_port(), port_please2_request(alive), timeout)
    return parse_port2_response(data)


async def names(host: str = "127.0.0.1", port: int | None = None, timeout: float = 5.0) -> dict[str, int]:
    """NAMES: every node registered in the epmd at ``host`` and its port."""
    data = await _request(host, port or default_port(), _framed(bytes([NAMES_REQ])), timeout)
    return parse_names_response(data)


class Registration:
    """An ALIVE2 registration; it lasts as long as its TCP connection, so close() unregisters."""

    def __init__(self, writer: asyncio.StreamWriter, creation: int) -> None:
        self._writer = writer
        self.creation = creation

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


async def register(
    alive: str,
    listen_port: int,
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    hidden: bool = True,
    highest_version: int = 6,
    timeout: float = 5.0,
) -> Registration:
    """ALIVE2: register ``alive`` at ``listen_port``; raises DistError if the name is taken."""
    epmd_port = port or default_port()
    entry = NodeEntry(alive, listen_port, NODE_HIDDEN if hidden else NODE_NORMAL, PROTO_TCP_IPV4, highest_version, 5)
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, epmd_port)
            writer.write(alive2_request(entry))
            first = await reader.readexactly(1)
            rest = await reader.readexactly(5 if first[0] == ALIVE2_X_RESP else 3)
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
        raise DistError(f"epmd at {host}:{epmd_port}: cannot register {alive!r}: {e or type(e).__name__}") from e
    result, creation = parse_alive2_response(first + rest)
    if result != 0:
        writer.close()
        raise DistError(f"epmd at {host}:{epmd_port} refused to register {alive!r} (result {result}: name taken?)")
    return Registration(writer, creation)


# ----------------------------------------------------------------------- small server


class EpmdServer:
    """Enough of epmd for pylmq and Erlang nodes on this host: ALIVE2, PORT_PLEASE2, NAMES."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeEntry] = {}
        self._server: asyncio.Server | None = None
        self._creation = secrets.randbelow(0xFFFF_FFF0) + 1
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int | None = None) -> EpmdServer:
        self._server = await asyncio.start_server(self._serve, host, default_port() if port is None else port)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("epmd server listening on %s:%d", host, self.port)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None

    @property
    def nodes(self) -> dict[str, NodeEntry]:
        return dict(self._nodes)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        registered: str | None = None
        try:
            (length,) = struct.unpack(">H", await reader.readexactly(2))
            body = await reader.readexactly(length)
            if not body:
                return
            if body[0] == ALIVE2_REQ:
                entry = parse_alive2_request(body)
                extended = entry.highest_version >= 6
                if entry.alive in self._nodes:
                    writer.write(alive2_response(1, 0, extended))
                    return
                self._creation = self._creation % 0xFFFF_FFFE + 1
                creation = self._creation if extended else self._creation % 3 + 1
                self._nodes[entry.alive] = entry
                registered = entry.alive
                writer.write(alive2_response(0, creation, extended))
                await reader.read()  # the registration lasts until the node closes
            elif body[0] == PORT_PLEASE2_REQ:
                writer.write(port2_response(self._nodes.get(body[1:].decode(errors="replace"))))
            elif body[0] == NAMES_REQ:
                writer.write(names_response(self.port, list(self._nodes.values())))
            else:
                log.warning("epmd server: unsupported request %d", body[0])
        except (asyncio.IncompleteReadError, ConnectionError, struct.error, UnicodeDecodeError) as e:
            log.debug("epmd server: bad or closed request: %r", e)
        finally:
            if registered is not None and self._nodes.get(registered) is not None:
                del self._nodes[registered]
            writer.close()


async def ensure_epmd(host: str = "127.0.0.1", port: int | None = None) -> EpmdServer | None:
    """Start pylmq's own epmd server if none answers at host:port; return it (None if one runs)."""
    epmd_port = port or default_port()
    try:
        await names(host, epmd_port, timeout=2.0)
        return None
    except DistError:
        pass
    try:
        return await EpmdServer().start(host, epmd_port)
    except OSError:
        # another process won the race to start one: use it
        await names(host, epmd_port, timeout=2.0)
        return None
