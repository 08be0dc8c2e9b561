"""Connection handling of a node, as OTP's ``net_kernel`` does it apart from the processes.

The net kernel listens and registers in EPMD, dials peers (queueing what is sent meanwhile),
accepts them, keeps the table of live connections, drives their handshakes and ticks, and tells
the node and its watchers when a peer goes down or stalls. What arrives on a connection goes
to the local node (:class:`KernelHost`), which owns the processes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pylmq.erlang import epmd
from pylmq.erlang.connection import Connection, LocalIdentity, accept, dial
from pylmq.erlang.control import Op, frame
from pylmq.erlang.flags import Flag
from pylmq.erlang.terms import Term
from pylmq.errors import DistError, HandshakeError, NodeDown

__all__ = ["KernelHost", "NetKernel", "frame_for"]

log = logging.getLogger("pylmq.erlang.node")


class KernelHost(LocalIdentity, Protocol):
    """What the net kernel needs from its local node."""

    @property
    def alive(self) -> str: ...
    @property
    def epmd_port(self) -> int: ...
    @property
    def listen_host(self) -> str: ...

    def spawn_task(self, coro: Awaitable[Any], name: str) -> asyncio.Task[Any]: ...
    def _on_frame(self, conn: Connection, control: Term, payload: Term | None) -> None: ...
    def _probe_request(self) -> tuple[tuple[Term, ...], Term]: ...
    def _peer_stalled(self, peer: str, silence: float) -> None: ...
    def _peer_down(self, peer: str, reason: str) -> None: ...


class NetKernel:
    """The connections of one node; it is each connection's owner."""

    def __init__(self, host: KernelHost) -> None:
        self.host = host
        self.port = 0
        self.connections: dict[str, Connection] = {}
        self._connecting: dict[str, asyncio.Future[None]] = {}
        self._queued: dict[str, list[tuple[tuple[Term, ...], Term]]] = {}
        self._node_monitors: dict[str, list[Callable[[str, str], None]]] = {}
        self._stall_monitors: list[Callable[[str, bool], None]] = []
        self._server: asyncio.Server | None = None
        self._registration: epmd.Registration | None = None
        self.epmd_server: epmd.EpmdServer | None = None

    # What a connection reads from its owner: the node's identity, read when it is needed
    # (the creation changes once EPMD has answered).

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def cookie(self) -> bytes:
        return self.host.cookie

    @property
    def flags(self) -> int:
        return self.host.flags

    @property
    def creation(self) -> int:
        return self.host.creation

    @property
    def net_ticktime(self) -> float:
        return self.host.net_ticktime

    @property
    def stall_timeout(self) -> float:
        return self.host.stall_timeout

    # ------------------------------------------------------------------ lifecycle

    async def start(self, *, listen: bool, register: bool, start_epmd: bool) -> int | None:
        """Listen and register; returns the creation EPMD gave, if it gave one."""
        if listen:
            self._server = await asyncio.start_server(self._on_incoming, self.host.listen_host, 0)
            self.port = self._server.sockets[0].getsockname()[1]
        if listen and register:
            if start_epmd:
                self.epmd_server = await epmd.ensure_epmd("127.0.0.1", self.host.epmd_port)
            self._registration = await epmd.register(self.host.alive, self.port, port=self.host.epmd_port)
            return self._registration.creation or None
        return None

    async def stop(self) -> None:
        """Close every connection (peers see the node go down), unregister, stop listening."""
        for conn in list(self.connections.values()):
            conn.close("stopped")
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._registration is not None:
            await self._registration.close()
            self._registration = None
        if self.epmd_server is not None:
            await self.epmd_server.stop()
            self.epmd_server = None

    # ------------------------------------------------------------------ sending

    def send_ctrl(self, peer: str, control: tuple[Term, ...], payload: Term = None) -> None:
        """Send a control message to ``peer``, dialing it first (and queueing) if not connected."""
        conn = self.connections.get(peer)
        if conn is not None:
            conn.send(frame_for(conn.flags, control, payload))
            return
        self._queued.setdefault(peer, []).append((control, payload))
        self._ensure_connecting(peer)

    # ------------------------------------------------------------------ node monitoring

    def monitor_node(self, peer: str, callback: Callable[[str, str], None]) -> Callable[[], None]:
        self._node_monitors.setdefault(peer, []).append(callback)

        def cancel() -> None:
            cbs = self._node_monitors.get(peer, [])
            if callback in cbs:
                cbs.remove(callback)

        return cancel

    def monitor_stalls(self, callback: Callable[[str, bool], None]) -> Callable[[], None]:
        self._stall_monitors.append(callback)

        def cancel() -> None:
            if callback in self._stall_monitors:
                self._stall_monitors.remove(callback)

        return cancel

    def connected_nodes(self) -> list[str]:
        return sorted(self.connections)

    def stalled_nodes(self) -> dict[str, float]:
        return {p: c.silence() for p, c in sorted(self.connections.items()) if c.stalled}

    def disconnect(self, peer: str) -> None:
        conn = self.connections.get(peer)
        if conn is not None:
            conn.close("disconnect")

    # ------------------------------------------------------------------ connections

    async def connect(self, peer: str) -> None:
        """Make sure a connection to ``peer`` is up; raises NodeDown / HandshakeError / CookieMismatch."""
        if peer in self.connections:
            return
        await asyncio.shield(self._ensure_connecting(peer))

    def _ensure_connecting(self, peer: str) -> asyncio.Future[None]:
        fut = self._connecting.get(peer)
        if fut is None:
            fut = self._connecting[peer] = asyncio.get_running_loop().create_future()
            fut.add_done_callback(_consume_exception)
            self.host.spawn_task(self._dial(peer, fut), f"dist-dial-{peer}")
        return fut

    async def _dial(self, peer: str, fut: asyncio.Future[None]) -> None:
        try:
            if "@" not in peer:
                raise DistError(f"bad node name {peer!r}: expected alive@host")
            alive, host = peer.split("@", 1)
            entry = await epmd.lookup(alive, host, self.host.epmd_port)
            if entry is None:
                raise NodeDown(f"node {peer} is not registered in epmd on {host}")
            conn, _ = await dial(self, peer, host, entry.port, 6 if entry.highest_version >= 6 else 5)
            if conn is None:
                # The peer dials us too and wins: its incoming connection will resolve fut.
                async with asyncio.timeout(10):
                    await asyncio.shield(fut)
                return
            self._connection_up(conn)
        except (DistError, TimeoutError, OSError) as e:
            err = e if isinstance(e, DistError) else NodeDown(f"connecting to {peer} failed: {e!r}")
            log.error("dist: connection to %s failed: %s", peer, err)
            if self._connecting.get(peer) is fut:
                del self._connecting[peer]
            if not fut.done():
                fut.set_exception(err)
            if peer not in self.connections:
                self._queued.pop(peer, None)
                self._node_down(peer, "connect_failed")

    def _accept_status(self, peer: str) -> str:
        if peer in self.connections:
            return "alive"
        pending = self._connecting.get(peer)
        if pending is not None and not pending.done():
            return "nok" if self.host.name > peer else "ok_simultaneous"
        return "ok"

    async def _on_incoming(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            conn = await accept(self, reader, writer)
        except HandshakeError as e:
            log.error("dist: incoming connection refused: %s", e)
            return
        except Exception:
            log.exception("dist: incoming handshake crashed")
            writer.close()
            return
        old = self.connections.get(conn.peer)
        if old is not None:
            old.close("replaced")
        self._connection_up(conn)

    def _connection_up(self, conn: Connection) -> None:
        peer = conn.peer
        self.connections[peer] = conn
        conn.start()
        log.info("dist: connected to %s", peer)
        for control, payload in self._queued.pop(peer, []):
            conn.send(frame_for(conn.flags, control, payload))
        fut = self._connecting.pop(peer, None)
        if fut is not None and not fut.done():
            fut.set_result(None)

    # ------------------------------------------------------------------ what connections report

    def _on_frame(self, conn: Connection, control: Term, payload: Term | None) -> None:
        self.host._on_frame(conn, control, payload)

    def _on_connection_lost(self, conn: Connection, reason: str) -> None:
        if self.connections.get(conn.peer) is conn:
            del self.connections[conn.peer]
            log.info("dist: connection to %s lost (%s)", conn.peer, reason)
            self._node_down(conn.peer, reason)

    def _probe(self, conn: Connection) -> None:
        control, payload = self.host._probe_request()
        conn.send(frame_for(conn.flags, control, payload))

    def _on_stall(self, conn: Connection, stalled: bool, silence: float) -> None:
        peer = conn.peer
        if stalled:
            log.warning(
                "dist: node %s is stalled: nothing received from it for %.1f s, a ping unanswered;"
                " its pending calls fail now (the connection stays until net_ticktime, %.0f s)",
                peer, silence, self.host.net_ticktime,
            )  # fmt: skip
            self.host._peer_stalled(peer, silence)
        else:
            log.warning("dist: node %s is heard from again after %.1f s of silence", peer, silence)
        for cb in list(self._stall_monitors):
            try:
                cb(peer, stalled)
            except Exception:
                log.exception("stall monitor callback for %s failed", peer)

    def _node_down(self, peer: str, reason: str) -> None:
        """The node's links, monitors and calls involving ``peer`` fail; node monitors are told."""
        self.host._peer_down(peer, reason)
        for key in (peer, "*"):
            for cb in list(self._node_monitors.get(key, [])):
                try:
                    cb(peer, reason)
                except Exception:
                    log.exception("node monitor callback for %s failed", peer)


# ---------------------------------------------------------------------- helpers

_PAYLOAD_FALLBACK = {Op.PAYLOAD_EXIT: Op.EXIT, Op.PAYLOAD_EXIT2: Op.EXIT2, Op.PAYLOAD_MONITOR_P_EXIT: Op.MONITOR_P_EXIT}
_WITH_PAYLOAD = {Op.SEND, Op.REG_SEND, Op.SEND_SENDER, Op.SPAWN_REQUEST, Op.ALIAS_SEND, *_PAYLOAD_FALLBACK}


def frame_for(peer_flags: int, control: tuple[Term, ...], payload: Term) -> bytearray:
    """The frame of ``control`` (+ ``payload``) as a peer with ``peer_flags`` understands it."""
    op = control[0]
    if op in _PAYLOAD_FALLBACK and not peer_flags & Flag.EXIT_PAYLOAD:
        return frame((_PAYLOAD_FALLBACK[op], *control[1:], payload))
    if op in _WITH_PAYLOAD:
        return frame(control, payload)
    return frame(control)


def _consume_exception(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()
