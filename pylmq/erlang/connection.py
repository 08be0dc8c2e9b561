"""One distribution connection over asyncio streams: handshake driving, framing, ticks.

Frames of a connection are decoded and handled one after the other by a single reader task,
with no task per message, so Erlang's per-pair ordering holds and the UNLINK_ID exchange
sees signals in order.

Liveness, as Erlang's net_kernel judges it: a peer that sends nothing for ``net_ticktime`` is
dropped. That takes a minute by default, far too long for the requests waiting on the peer, so
the connection also watches for a *stall* (the owner's ``stall_timeout``, a few seconds; 0 turns
it off): after half of it without a byte from the peer the owner probes it (a call any live node
answers at once), and after all of it the peer is ``stalled``: the owner is told once, and told
again when anything arrives from the peer. An idle Erlang peer sends a tick only every
net_ticktime/4, so silence alone would be normal; the unanswered probe is what makes it a stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from typing import Protocol

from pylmq.erlang.control import plain_send
from pylmq.erlang.etf import DecodeError, decode_from
from pylmq.erlang.handshake import Acceptor, Initiator
from pylmq.erlang.terms import Term
from pylmq.errors import CookieMismatch, DistError, HandshakeError

__all__ = ["Connection", "ConnectionOwner", "LocalIdentity", "accept", "dial"]

log = logging.getLogger("pylmq.erlang.connection")

TICK = b"\0\0\0\0"
HANDSHAKE_TIMEOUT = 7.0  # Erlang's net_setuptime default
READ_CHUNK = 1 << 16  # bytes a connection's reader takes from its stream at a time, at most
_FRAME_LEN = struct.Struct(">I").unpack_from
_KNOWN_CONTROLS = 4


class LocalIdentity(Protocol):
    """The local node as its handshakes and ticks present it."""

    @property
    def name(self) -> str: ...
    @property
    def cookie(self) -> bytes: ...
    @property
    def flags(self) -> int: ...
    @property
    def creation(self) -> int: ...
    @property
    def net_ticktime(self) -> float: ...
    @property
    def stall_timeout(self) -> float: ...


class ConnectionOwner(LocalIdentity, Protocol):
    """What a connection needs from its node."""

    def _accept_status(self, peer: str) -> str: ...
    def _on_frame(self, conn: Connection, control: Term, payload: Term | None) -> None: ...
    def _on_connection_lost(self, conn: Connection, reason: str) -> None: ...
    def _probe(self, conn: Connection) -> None: ...
    def _on_stall(self, conn: Connection, stalled: bool, silence: float) -> None: ...


async def _read_packet(reader: asyncio.StreamReader) -> bytes:
    (n,) = struct.unpack(">H", await reader.readexactly(2))
    return await reader.readexactly(n)


def _write_packets(writer: asyncio.StreamWriter, packets: list[bytes]) -> None:
    for p in packets:
        writer.write(struct.pack(">H", len(p)) + p)


async def dial(
    owner: ConnectionOwner, peer: str, host: str, port: int, version: int = 6
) -> tuple[Connection | None, Initiator]:
    """Connect to ``peer`` and run the initiator handshake.

    Returns (connection, machine); the connection is None when the peer answered ``nok``
    (it is dialling us and its connection will be the one). Raises HandshakeError /
    CookieMismatch / DistError with the peer's name.
    """
    machine = Initiator(
        name=owner.name, peer=peer, cookie=owner.cookie, flags=owner.flags, creation=owner.creation, version=version
    )
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            reader, writer = await asyncio.open_connection(host, port)
    except (OSError, TimeoutError) as e:
        raise DistError(f"cannot reach node {peer} at {host}:{port}: {e or type(e).__name__}") from e
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            _write_packets(writer, machine.start())
            while not machine.done:
                try:
                    packet = await _read_packet(reader)
                except (asyncio.IncompleteReadError, ConnectionError) as e:
                    if machine.expecting_ack():
                        raise CookieMismatch(
                            f"node {peer} closed the connection after our challenge reply: "
                            f"it does not accept our cookie"
                        ) from e
                    raise HandshakeError(f"node {peer} closed the connection during the handshake") from e
                _write_packets(writer, machine.receive(packet))
                if machine.state == "aborted":
                    writer.close()
                    return None, machine
    except TimeoutError as e:
        writer.close()
        raise HandshakeError(f"handshake with node {peer} timed out in state {machine.state}") from e
    except BaseException:
        writer.close()
        raise
    return Connection(owner, peer, machine.peer_flags, machine.peer_creation, reader, writer), machine


async def accept(owner: ConnectionOwner, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Connection:
    """Run the acceptor handshake on an incoming socket; raises HandshakeError/CookieMismatch."""
    machine = Acceptor(name=owner.name, cookie=owner.cookie, flags=owner.flags, creation=owner.creation)
    try:
        async with asyncio.timeout(HANDSHAKE_TIMEOUT):
            while not machine.done:
                try:
                    packet = await _read_packet(reader)
                except (asyncio.IncompleteReadError, ConnectionError) as e:
                    raise HandshakeError(
                        f"node {machine.peer or 'unknown'} closed the connection during the handshake"
                    ) from e
                out = machine.receive(packet)
                if machine.needs_decision:
                    out += machine.decide(owner._accept_status(machine.peer))
                _write_packets(writer, out)
                if machine.state == "aborted":
                    await writer.drain()
                    raise HandshakeError(machine.refusal or f"connection from {machine.peer} not accepted")
    except TimeoutError as e:
        writer.close()
        raise HandshakeError(f"handshake from node {machine.peer or 'unknown'} timed out") from e
    except BaseException:
        writer.close()
        raise
    return Connection(owner, machine.peer, machine.peer_flags, machine.peer_creation, reader, writer)


class Connection:
    """An established connection. ``start()`` runs its reader and ticker tasks."""

    def __init__(
        self,
        owner: ConnectionOwner,
        peer: str,
        flags: int,
        creation: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.owner = owner
        self.peer = peer
        self.flags = flags
        self.creation = creation
        self._reader = reader
        self._writer = writer
        self._last_read = self._last_write = time.monotonic()
        self._tasks: list[asyncio.Task[None]] = []
        self.closed = False
        self.stalled = False  # see the module docstring
        # Frames sent during one pass of the event loop go out in one write: one system call
        # instead of one per frame when many requests are in flight (rpcs, casts, replies).
        self._pending: list[bytes | bytearray] = []
        # The encodings of the latest send controls from the peer, and their terms: most frames
        # are sends to the same few processes (the mirror's, the runners' answers), whose
        # control is the same bytes every time and is then not decoded again.
        self._controls: list[tuple[bytes, Term]] = []

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._read_loop(), name=f"dist-read-{self.peer}"),
            asyncio.create_task(self._tick_loop(), name=f"dist-tick-{self.peer}"),
        ]

    def send(self, frame: bytes | bytearray) -> None:
        if self.closed:
            return
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(frame)

    def _flush(self) -> None:
        pending, self._pending = self._pending, []
        if self.closed or not pending:
            return
        self._writer.write(pending[0] if len(pending) == 1 else b"".join(pending))
        self._last_write = time.monotonic()

    def silence(self) -> float:
        """Seconds since the last byte from the peer."""
        return time.monotonic() - self._last_read

    async def drain(self) -> None:
        self._flush()
        if not self.closed:
            with contextlib.suppress(ConnectionError):
                await self._writer.drain()

    def close(self, reason: str = "closed") -> None:
        """Drop the connection; the owner hears about it once through _on_connection_lost."""
        if self.closed:
            return
        self._flush()  # what was sent before the close still goes out, as it would have at once
        self.closed = True
        self._writer.close()
        current = asyncio.current_task()
        for t in self._tasks:
            if t is not current:
                t.cancel()
        self.owner._on_connection_lost(self, reason)

    async def _read_loop(self) -> None:
        reader = self._reader
        reason = "connection_closed"
        frame_len = _FRAME_LEN
        rest = b""  # the start of a frame whose end has not arrived yet
        try:
            while True:
                # Whatever has arrived, up to a chunk, parsed here: one wake-up of this task for
                # all the frames a read brings, not two per frame (length, then body).
                chunk = await reader.read(READ_CHUNK)
                if not chunk:
                    break
                self._heard()
                data = rest + chunk if rest else chunk
                pos, end = 0, len(data)
                while end - pos >= 4:
                    (n,) = frame_len(data, pos)
                    if n == 0:
                        self.send(TICK)  # echo: a hidden node must answer Erlang's ticks
                        pos += 4
                        continue
                    if end - pos - 4 < n:
                        break
                    self._handle(data[pos + 4 : pos + 4 + n])
                    pos += 4 + n
                rest = data[pos:] if pos < end else b""
                if len(rest) >= 4:
                    # A frame longer than what came: its remainder in one read (a large
                    # message is not copied again at every chunk).
                    (n,) = frame_len(rest, 0)
                    frame = rest[4:] + await reader.readexactly(n + 4 - len(rest))
                    self._heard()
                    rest = b""
                    self._handle(frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            reason = "stopped"
            raise
        except Exception:
            log.exception("dist connection to %s crashed", self.peer)
            reason = "crashed"
        finally:
            self.close(reason)

    def _heard(self) -> None:
        now = time.monotonic()
        if self.stalled:
            self.stalled = False
            self.owner._on_stall(self, False, now - self._last_read)
        self._last_read = now

    def _handle(self, data: bytes) -> None:
        if data[0] != 112:
            log.error("node %s sent a frame of type %d (not pass-through); dropped", self.peer, data[0])
            return
        try:
            for raw, known in self._controls:
                if data.startswith(raw, 1):
                    # A term's encoding is never the start of another's: the same bytes, the same term.
                    control, pos = known, 1 + len(raw)
                    break
            else:
                control, pos = decode_from(data, 1)
                if plain_send(control) and data[2] != 80:  # 80: compressed, not kept
                    self._controls = [(data[1:pos], control), *self._controls[: _KNOWN_CONTROLS - 1]]
            payload = None
            if pos < len(data):
                payload, pos = decode_from(data, pos)
        except DecodeError as e:
            log.error("node %s sent an undecodable frame (%s); dropped", self.peer, e)
            return
        try:
            self.owner._on_frame(self, control, payload)
        except Exception:
            log.exception("handling a frame from %s failed: %r", self.peer, control)

    async def _tick_loop(self) -> None:
        ticktime = self.owner.net_ticktime
        stall = self.owner.stall_timeout
        # Erlang wants something from us every ticktime/4; stalls are checked 4 times per stall_timeout.
        interval = min(ticktime / 4, stall / 4) if stall > 0 else ticktime / 4
        probed = 0.0
        while not self.closed:
            await asyncio.sleep(interval)
            now = time.monotonic()
            silence = now - self._last_read
            if silence > ticktime:
                log.warning("node %s not responding for %.0f s: dropping the connection", self.peer, ticktime)
                self.close("net_tick_timeout")
                return
            if stall > 0 and silence >= stall / 2 and now - probed >= stall / 2:
                probed = now
                self.owner._probe(self)
            if stall > 0 and silence >= stall and not self.stalled:
                self.stalled = True
                self.owner._on_stall(self, True, silence)
            if now - self._last_write >= ticktime / 4 - interval / 2:
                self.send(TICK)
