"""queue_server's protocol on asyncio: one port, TCP and UDP (docs/queue-server.md); the actions
are :mod:`pylmq.api.qs`, the bytes :mod:`pylmq.wire.qs`.

TCP: a connection may pipeline requests; each is answered, in request order, by one JSON
object and a newline. A complete object that is not a valid request is answered -1 and the
connection stays open; a request over ``max_request`` bytes, or a byte other than whitespace
between objects, is answered -1 and the connection closes once the requests before it are
answered (where the next request starts is unknown). At most ``max_inflight`` requests run per
connection: past that the connection is not read until they finish. A connection with no
request running and no byte for ``idle_timeout`` seconds is closed (queue_server: 30 s), and a
request must be whole within ``idle_timeout`` of its first byte. The bytes of requests not yet
whole count against the node's budget (:class:`~pylmq.api._limits.BufferBudget`), and open
connections against ``max_connections``: at the limit a newcomer takes the place of the
connection idle longest (``evict_after`` seconds at least), else it is closed.

UDP: one request per datagram, one answer datagram to its sender. A request or an answer over
``udp_max`` bytes gets -1 "too large, use TCP"; a consume whose answer would not fit puts its
message back first (no retry spent), so nothing is lost. At most ``udp_max_inflight`` requests
run at once; past that a request is answered -1 "busy" at once. A UDP answer may be lost: a
consumed message then comes back after its retry interval, unless it was produced with retry 0
(at most once). UDP answers go to whatever address a datagram claims, so bind it privately.

Every request gets an answer, where queue_server sometimes closes or stays silent.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Final, cast

from pylmq.api._eager import start_eagerly
from pylmq.api._limits import (
    DEFAULT_EVICT_AFTER,
    BufferBudget,
    ConnectionLimit,
    Evictions,
    default_max_buffered,
    default_max_connections,
)
from pylmq.api._putback import PutBacks
from pylmq.api.qs import QsApi, QsResult
from pylmq.core.queue import Delivery
from pylmq.errors import LMQError
from pylmq.wire.qs import (
    CODE_ERROR,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_MAX_REQUEST,
    DEFAULT_UDP_MAX,
    UDP_MAX_LIMIT,
    Framer,
    Invalid,
    QsAction,
    encode_answer,
    parse_request,
)

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_INFLIGHT",
    "DEFAULT_UDP_MAX_INFLIGHT",
    "QsServer",
]

log = logging.getLogger("pylmq.qs")

DEFAULT_MAX_INFLIGHT: Final = 64
DEFAULT_UDP_MAX_INFLIGHT: Final = 1024
TOO_LARGE: Final = "too large, use TCP"
_CLOSE_GRACE: Final = 2.0
_BIND_TRIES: Final = 8  # port 0: the TCP port picked may be taken for UDP; try another


@dataclass(slots=True)
class _Slot:
    """One TCP request's place in the answer order."""

    echo: dict[str, Any]
    answer: bytes | None = None
    delivery: Delivery | None = None


@dataclass(slots=True)
class _Stop:
    """In the backlog: no request can be read past this point; answered -1 with ``reason``."""

    reason: str


class _TcpConnection(asyncio.Protocol):
    def __init__(self, server: QsServer) -> None:
        self.server = server
        self.loop = asyncio.get_running_loop()
        self.framer = Framer(server.max_request)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        # Nothing more is read (end of stream, a broken stream, the server stopping): what was
        # received is still answered, then the connection closes.
        self.stopped_reading = False
        # Requests in answer order, started or answered and not yet written: at most
        # max_inflight, past which requests wait in the backlog and the connection is not read.
        self.slots: deque[_Slot] = deque()
        self.backlog: deque[bytes | _Stop] = deque()
        self.read_paused = False
        self.write_paused = False
        self.flush_pending = False
        self.last_active = self.loop.time()
        self.frame_since: float | None = None
        self.buffered = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        server = self.server
        if server.closing or not server.limit.admit_to(server.conns, server.make_room):
            self.closed = True
            self.transport.abort()
            return
        server.conns.add(self)

    def data_received(self, data: bytes) -> None:
        if self.stopped_reading or self.closed:
            return
        self.last_active = self.loop.time()
        framer = self.framer
        self.backlog.extend(framer.feed(data))
        if framer.error is not None:
            self._stop(f"bad request: {framer.error}")
        else:
            self._charge()
        self._run_backlog()

    def _charge(self) -> None:
        """Charge the request not yet whole to the node's budget; past it, the stream stops."""
        holds = self.framer.pending
        if holds and self.frame_since is None:
            self.frame_since = self.loop.time()
        elif not holds:
            self.frame_since = None
        if holds == self.buffered:
            return
        budget = self.server.budget
        if budget.charge(self.buffered, holds, "queue_server"):
            self.buffered = holds
            return
        self._stop(budget.refusal().detail)

    def _stop(self, reason: str) -> None:
        """Read nothing more; the requests already whole are answered, then ``reason``."""
        self.stopped_reading = True
        self._release()
        self.backlog.append(_Stop(reason))

    def _release(self) -> None:
        self.server.budget.release(self.buffered)
        self.buffered = 0
        self.frame_since = None

    def _run_backlog(self) -> None:
        limit = self.server.max_inflight
        while self.backlog and len(self.slots) < limit:
            item = self.backlog.popleft()
            if type(item) is _Stop:
                self.slots.append(_Slot({}, encode_answer({}, CODE_ERROR, item.reason, tcp=True)))
                self.backlog.clear()
                self._schedule_flush()
                break
            req = parse_request(item)  # type: ignore[arg-type]
            if isinstance(req, Invalid):
                self.slots.append(_Slot(req.echo, encode_answer(req.echo, CODE_ERROR, req.reason, tcp=True)))
                self._schedule_flush()
                continue
            slot = _Slot(req.echo)
            self.slots.append(slot)
            self.server.launch(self._serve(slot, req.action))
        self._update_reading()
        if self.stopped_reading and not self.backlog and not self.slots:
            self._schedule_flush()  # nothing left to answer: the flush closes

    async def _serve(self, slot: _Slot, action: QsAction) -> None:
        res = await self.server.run(action)
        slot.answer = encode_answer(slot.echo, res.code, res.reason, res.results, tcp=True)
        slot.delivery = res.delivery
        if self.closed:
            self._put_back_unsent()
            return
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if not self.flush_pending and not self.closed:
            self.flush_pending = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        """Write the answers that are ready, in request order (one write for all), start the
        requests waiting for their places, close once a stopped stream is all answered."""
        self.flush_pending = False
        transport = self.transport
        if transport is None or self.closed:
            return
        out: list[bytes] = []
        slots = self.slots
        closing = transport.is_closing()
        while slots and slots[0].answer is not None:
            slot = slots.popleft()
            out.append(slot.answer)  # type: ignore[arg-type]
            if closing and slot.delivery is not None:
                self.server.put_backs.add(slot.delivery)  # its answer cannot go out any more
        if out and not closing:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
            self.last_active = self.loop.time()
        if self.backlog:
            self._run_backlog()
        else:
            self._update_reading()
        if self.stopped_reading and not self.backlog and not slots and not transport.is_closing():
            transport.close()

    def _put_back_unsent(self) -> None:
        for slot in self.slots:
            if slot.delivery is not None:
                self.server.put_backs.add(slot.delivery)
                slot.delivery = None

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return
        pause = (
            self.stopped_reading
            or self.write_paused
            or bool(self.backlog)
            or len(self.slots) >= self.server.max_inflight
        )
        if pause and not self.read_paused:
            transport.pause_reading()
            self.read_paused = True
        elif not pause and self.read_paused:
            transport.resume_reading()
            self.read_paused = False
            if self.frame_since is not None:
                self.frame_since = self.loop.time()  # the client could not send meanwhile

    def pause_writing(self) -> None:
        self.write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._update_reading()

    def eof_received(self) -> bool | None:
        # The client sends nothing more; what it asked is still answered, then the connection
        # closes. A request not yet whole never will be: it is dropped.
        self.stop_reading()
        return True

    def stop_reading(self) -> None:
        if self.closed:
            return
        self.stopped_reading = True
        self._release()
        self._update_reading()
        self._run_backlog()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._release()
        self.backlog.clear()
        self._put_back_unsent()  # answered but never written: the client did not get them
        self.server.conns.discard(self)
        self.server.on_connection_lost()

    # -- timeouts and the connection limit ----------------------------------------------------------

    def time_out(self, now: float) -> None:
        if self.closed or self.transport is None or self.read_paused:
            return  # not read meanwhile: the client could not send the rest
        idle = self.server.idle_timeout
        if self.frame_since is not None and now - self.frame_since >= idle:
            self._stop(f"bad request: a request must be whole within {idle:g} s of its first byte")
            self._run_backlog()
        elif not self.slots and not self.backlog and now - self.last_active >= idle:
            self.transport.close()

    def holds_a_place_since(self, before: float) -> float | None:
        if self.closed or self.slots or self.backlog or self.last_active >= before:
            return None
        return self.last_active

    def give_up_place(self) -> None:
        self.server.conns.discard(self)
        self.closed = True
        self._release()
        if self.transport is not None:
            self.transport.abort()


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: QsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None
        self.running = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        server = self.server
        if len(data) > server.udp_max:
            self._send(_brief(data, TOO_LARGE), addr)
            return
        req = parse_request(data)
        if isinstance(req, Invalid):
            self._send(encode_answer(req.echo, CODE_ERROR, req.reason, tcp=False), addr)
            return
        if self.running >= server.udp_max_inflight or server.closing:
            self._send(encode_answer(req.echo, CODE_ERROR, "busy: try again", tcp=False), addr)
            return
        self.running += 1
        server.launch(self._serve(req.echo, req.action, addr))

    async def _serve(self, echo: dict[str, Any], action: QsAction, addr: Any) -> None:
        try:
            res = await self.server.run(action)
            answer = encode_answer(echo, res.code, res.reason, res.results, tcp=False)
            if len(answer) > self.server.udp_max:
                if res.delivery is not None:
                    # The client would never see it: back to the queue, its retry unspent,
                    # before the answer says so (a consume sent again then finds it).
                    d = res.delivery
                    try:
                        await self.server.api.manager.put_back(d.queue, d.message.uuid)
                    except LMQError as e:  # the queue was deleted meanwhile, say
                        log.warning("qs udp: could not put back a message of %s: %s", d.queue, e.detail)
                answer = _brief(json.dumps(echo).encode(), TOO_LARGE)
            elif self.transport is None or self.transport.is_closing():
                if res.delivery is not None:
                    self.server.put_backs.add(res.delivery)
                return
            self._send(answer, addr)
        finally:
            self.running -= 1

    def _send(self, answer: bytes, addr: Any) -> None:
        if len(answer) > self.server.udp_max:
            # An error answer that echoes a request close to the limit: its small fields only.
            answer = _brief(answer, TOO_LARGE)
        if self.transport is not None and not self.transport.is_closing():
            self.transport.sendto(answer, addr)

    def error_received(self, exc: Exception) -> None:
        # An earlier answer's destination refused it (ICMP): nothing to do, the client is gone.
        log.debug("qs udp: %s", exc)


def _brief(raw: bytes, reason: str) -> bytes:
    """A -1 answer echoing only the small fields of ``raw``: a request too large to echo, or
    an error answer too large to send (whose own reason is kept)."""
    echo: dict[str, Any] = {}
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        for k in ("seq", "action", "queue"):
            v = obj.get(k)
            if v is not None and (type(v) in (int, float, bool) or (type(v) is str and len(v) <= 256)):
                echo[k] = v
        own = obj.get("reason")
        if obj.get("code", 0) != 0 and type(own) is str and len(own) <= 1024:
            reason = own
    return encode_answer(echo, CODE_ERROR, reason, tcp=False)


class QsServer:
    """Serves queue_server's protocol for one :class:`QsApi`, over TCP and UDP on one port."""

    def __init__(
        self,
        api: QsApi,
        *,
        max_request: int = DEFAULT_MAX_REQUEST,
        udp_max: int = DEFAULT_UDP_MAX,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        udp_max_inflight: int = DEFAULT_UDP_MAX_INFLIGHT,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_connections: int | None = None,
        evict_after: float = DEFAULT_EVICT_AFTER,
        budget: BufferBudget | None = None,
        eager: Callable[[], bool] = lambda: True,
    ) -> None:
        self.api = api
        self.max_request = max(64, max_request)
        self.udp_max = max(64, min(udp_max, UDP_MAX_LIMIT))
        self.max_inflight = max(1, max_inflight)
        self.udp_max_inflight = max(1, udp_max_inflight)
        self.idle_timeout = idle_timeout
        self.limit = ConnectionLimit(
            default_max_connections() if max_connections is None else max_connections,
            "queue_server",
            log,
            time.monotonic,
        )
        self.budget = budget or BufferBudget(default_max_buffered(), log, time.monotonic)
        self.eager = eager
        self.conns: set[_TcpConnection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.put_backs = PutBacks(api.manager, "qs")
        self.closing = False
        self.address: tuple[str, int] | None = None
        self._evictions: Evictions[_TcpConnection] = Evictions(evict_after)
        self._server: asyncio.Server | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self.udp: _Udp | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._all_gone: asyncio.Event | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen on TCP and UDP ``host:port`` (port 0: one free for both); the bound address."""
        loop = asyncio.get_running_loop()
        for attempt in range(_BIND_TRIES):
            server = await loop.create_server(lambda: _TcpConnection(self), host, port, reuse_address=True)
            sockname = server.sockets[0].getsockname()
            try:
                udp, self.udp = await loop.create_datagram_endpoint(lambda: _Udp(self), local_addr=(host, sockname[1]))
            except OSError:
                server.close()
                await server.wait_closed()
                if port != 0 or attempt == _BIND_TRIES - 1:
                    raise
                continue
            break
        self._server, self._udp = server, udp
        self.address = (str(sockname[0]), int(sockname[1]))
        if self.api.address[1] == 0:
            self.api.address = self.address  # action 8 names the port picked
        self._sweeper = loop.create_task(self._sweep(), name="qs-timeouts")
        log.info("queue_server protocol listening on %s:%d (TCP and UDP)", *self.address)
        return self.address

    def launch(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run a request: at once, as a task only if it has to wait (pylmq.api._eager)."""
        loop = asyncio.get_running_loop()
        task = start_eagerly(loop, coro) if self.eager() else loop.create_task(coro)
        if task is not None:
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def run(self, action: QsAction) -> QsResult:
        try:
            return await self.api.handle(action)
        except Exception as e:
            log.exception("qs: %s failed", type(action).__name__)
            return QsResult(CODE_ERROR, f"internal error: {type(e).__name__}")

    def make_room(self) -> None:
        self._evictions.make_room(self.conns, self.conns.__contains__, asyncio.get_running_loop().time())

    def on_connection_lost(self) -> None:
        if self._all_gone is not None and not self.conns:
            self._all_gone.set()

    async def _sweep(self) -> None:
        period = max(0.02, min(self.idle_timeout / 4, 1.0))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for conn in list(self.conns):
                conn.time_out(now)

    async def close(self) -> None:
        """Stop listening; requests running finish and are answered; then connections close."""
        if self._server is None or self.closing:
            return
        self.closing = True
        self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._all_gone = asyncio.Event()
        for conn in list(self.conns):
            conn.stop_reading()
        if self.tasks:
            await asyncio.wait(set(self.tasks), timeout=_CLOSE_GRACE)
        if self._udp is not None:
            self._udp.close()
        for conn in list(self.conns):
            conn._flush()
            if conn.transport is not None and not conn.transport.is_closing():
                conn.transport.close()
        if self.conns:
            try:
                await asyncio.wait_for(self._all_gone.wait(), _CLOSE_GRACE)
            except TimeoutError:
                for conn in list(self.conns):
                    if conn.transport is not None:
                        conn.transport.abort()
        await self._server.wait_closed()
        await self.put_backs.wait(_CLOSE_GRACE)
        log.info("queue_server protocol stopped")
