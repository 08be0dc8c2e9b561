"""The MessagePack-RPC server on asyncio: connections, framing, flow control; the methods are
:mod:`pylmq.api.rpc`.

One :class:`asyncio.Protocol` per connection feeds a :class:`~pylmq.wire.msgpack_rpc.Decoder`;
every request runs as its own task, so requests pipelined on one connection are served
concurrently (a long-poll pull does not hold up a push behind it) and each response carries its
request's msgid, in completion order. Responses finished in the same loop iteration go out in one
write.

A frame that is not msgpack or exceeds ``max_message_size`` is answered when its msgid can be
read, then the connection is closed after the requests already running on it finish; so is a
connection whose frame names no msgid.
Notifications (``[2, method, params]``) run the method and drop its result; ``pull`` and
``pull_any`` are not run as notifications (the message would have no one to go to).

A client that goes away loses nothing: its waiting pulls are cancelled (the manager puts back a
message already taken for them) and a delivery whose response could not be written is put back.
TCP cannot tell a half-close from a client that left, so end-of-stream from the client ends its
waiting pulls with ``["connection_closed", ...]`` (as LMQ, whose connection process exits then);
requests already running are still answered before the connection closes. :meth:`RpcServer.close`
answers waiting pulls with ``["shutting_down", ...]``.

Limits: ``max_message_size`` (default 64 MiB) per frame; ``max_inflight`` (default 128)
requests running per connection: past it the requests already decoded wait their turn (in
order) and the connection is not read until half of those running finish, so a client
pipelining thousands of long polls holds a bounded amount of memory and every request is
still answered. ``max_connections`` (see :mod:`pylmq.api._limits`) open connections: at the
limit a newcomer takes the place of the connection stuck longest (``evict_after`` seconds at
least) in a frame not yet whole, coming slower than ``min_receive_rate``, with no request
running; with none such it is closed at once.
A connection idle between frames is fine (clients keep theirs open), a frame begun is not: it
must bring ``min_receive_rate`` bytes a second over each window of ``frame_timeout`` seconds
(so a small frame must be whole within ``frame_timeout`` of its first byte), or the connection
is closed. The bytes of frames not yet whole count against the node's ``max_buffered_bytes``,
shared with the HTTP server (:class:`~pylmq.api._limits.BufferBudget`): a read that would take
the total past it closes its connection and frees its buffer, after answering
``["too_much_buffered", ...]`` when the frame's first bytes name its msgid.

An access line per request goes to the ``pylmq.access`` logger at info:
``rpc PEER METHOD QUEUE OUTCOME MSms``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Final, cast

from pylmq.api._eager import start_eagerly
from pylmq.api._limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_EVICT_AFTER,
    DEFAULT_MIN_RECEIVE_RATE,
    BufferBudget,
    ConnectionLimit,
    Evictions,
    Progress,
    default_max_buffered,
    default_max_connections,
)
from pylmq.api._listen import Listener, listen
from pylmq.api._putback import Deliveries, PutBacks
from pylmq.api.rpc import METHODS, OUTCOME, Handler, arity_error, encode_deliveries, outcome
from pylmq.core.manager import QueueManager
from pylmq.errors import BadMessage, ConnectionClosed, LMQError, RequestTimeout, ShuttingDown, UnknownMethod
from pylmq.log import info_line
from pylmq.wire.msgpack_rpc import (
    DEFAULT_MAX_MESSAGE_SIZE,
    Decoder,
    Event,
    Invalid,
    Notification,
    Request,
    encode_error,
    encode_result_raw,
)

__all__ = ["DEFAULT_MAX_INFLIGHT", "RpcServer"]

log = logging.getLogger("pylmq.rpc")
access_log = logging.getLogger("pylmq.access")

# Requests running at once on one connection before the next wait (backpressure): enough for
# a client's pipelining, few enough that one connection's waiting pulls cost little memory.
DEFAULT_MAX_INFLIGHT: Final = 128
# How long close() waits for the last connections to go once their transports are closed.
_CLOSE_GRACE: Final = 2.0


# -- connections -------------------------------------------------------------------------------------


class _Connection(asyncio.Protocol):
    def __init__(self, server: RpcServer) -> None:
        self.server = server
        self.manager = server.manager
        self.loop = asyncio.get_running_loop()
        self.decoder = Decoder(max_message_size=server.max_message_size, use_list=False)
        self.transport: asyncio.Transport | None = None
        self.peer = "-"
        self.closed = False
        # Set when this side ends the connection: waiting pulls are answered with it.
        self.closing_error: LMQError | None = None
        # Running requests and their (msgid, method); msgid None for a notification.
        self._tasks: dict[asyncio.Task[None], tuple[int | None, str]] = {}
        self._polls: set[asyncio.Task[None]] = set()
        self._out: list[bytes] = []
        self._unsent: list[Deliveries] = []  # deliveries whose replies sit in _out
        self._flush_pending = False
        self._write_paused = False
        self._read_paused = False
        # Requests decoded while max_inflight were running, in order: at most one read's worth,
        # since the connection is not read while any wait here.
        self._backlog: deque[Event] = deque()
        self.buffered = 0  # bytes of the frame not yet whole charged to the server's budget
        self.frame_since: float | None = None  # when that frame's first byte came
        self.progress = Progress()  # how fast it comes

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport instances, but they behave as one.
        self.transport = cast(asyncio.Transport, transport)
        peer = self.transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.peer = f"{peer[0]}:{peer[1]}"
        if not self.server.limit.admit_to(self.server._conns, self.server.make_room):
            # No msgid to answer yet, and RPC has no other way to say why: just close.
            self.closed = True
            self.transport.abort()
            return
        self.server._conns.add(self)
        if self.server._closing:
            self.abort(ShuttingDown("the server is stopping"), quiet=True)

    def data_received(self, data: bytes) -> None:
        if self.closing_error is not None or self.closed:
            return
        events = self.decoder.feed(data)
        self.progress.received += len(data)
        if self._backlog:
            self._backlog.extend(events)
            self._run_backlog()
        else:
            limit = self.server.max_inflight
            for i, ev in enumerate(events):
                if len(self._tasks) >= limit:
                    self._backlog.extend(events[i:])
                    self._update_reading()
                    break
                if not self._handle(ev):
                    break
        self._charge()

    def _charge(self) -> None:
        """Charge the frame not yet whole to the budget, after a read (a frame that came whole
        within the read costs nothing); past the budget the connection is closed."""
        holds = self.decoder.pending if self.closing_error is None and not self.closed else 0
        if holds and self.frame_since is None:
            self.frame_since = self.loop.time()
            self.progress.start(self.frame_since)
            self.progress.received = holds
        elif not holds:
            self.frame_since = None
        if holds == self.buffered:
            return
        budget = self.server.budget
        if budget.charge(self.buffered, holds, "MessagePack-RPC"):
            self.buffered = holds
            return
        msgid = self.decoder.pending_msgid
        self._drop_frame()
        error = budget.refusal()
        if msgid is not None:
            self._send(encode_error(msgid, error))
        self.abort(error)

    def _drop_frame(self) -> None:
        """Forget the frame not yet whole (nothing more is read) and free its budget."""
        self.decoder.discard()
        self.server.budget.release(self.buffered)
        self.buffered = 0
        self.frame_since = None

    def time_out(self, now: float) -> None:
        """Close the connection if its frame not yet whole comes too slowly (see the module
        docstring). Not while it is not read (requests running, or the client not reading
        what it is sent): the client could not send."""
        if self.frame_since is None or self._read_paused or self.closing_error is not None or self.closed:
            return
        server = self.server
        if self.progress.too_slow(now, server.frame_timeout, server.min_receive_rate):
            self._drop_frame()
            self.abort(
                RequestTimeout(
                    f"the frame came at less than {server.min_receive_rate} bytes/s"
                    f" over {server.frame_timeout:g} s (min_receive_rate)"
                )
            )

    def holds_a_place_since(self, before: float) -> float | None:
        """When this connection's frame not yet whole began, if before ``before``, it has no
        request running and the frame is not coming at ``min_receive_rate`` (a large frame
        streaming in is not stuck): it may give its place to a newcomer (see
        :meth:`RpcServer.make_room`)."""
        since = self.frame_since
        if since is None or since >= before or self._tasks or self.closing_error is not None or self.closed:
            return None
        rate = self.server.min_receive_rate
        if rate and self.progress.received >= rate * (self.loop.time() - self.progress.since):
            return None
        return since

    def give_up_place(self) -> None:
        """Closed to make room for a new connection."""
        self.server._conns.discard(self)
        self._drop_frame()
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _handle(self, ev: Event) -> bool:
        """Start or answer one decoded message; False once the connection is ending."""
        t = type(ev)
        if t is Request:
            self._request(ev)  # type: ignore[arg-type]
        elif t is Notification:
            self._notification(ev)  # type: ignore[arg-type]
        elif t is Invalid:
            assert isinstance(ev, Invalid)
            if ev.msgid is not None:
                self._send(encode_error(ev.msgid, ev.error))
            if ev.fatal or ev.msgid is None:
                # Without a msgid the peer cannot be told what went wrong; stop talking.
                self.abort(ev.error)
                return False
        else:
            self.abort(BadMessage("a client must not send responses"))
            return False
        return True

    def _run_backlog(self) -> None:
        backlog, limit = self._backlog, self.server.max_inflight
        while backlog and len(self._tasks) < limit and self.closing_error is None:
            if not self._handle(backlog.popleft()):
                break
        self._update_reading()

    def eof_received(self) -> bool | None:
        # TCP cannot tell a half-close from a client that left, and a waiting pull would hold
        # its message hostage: waiting pulls end (their messages stay queued); the requests
        # already running are still answered, then the connection closes.
        self.abort(ConnectionClosed("the client closed its side of the connection"), quiet=True)
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._drop_frame()
        for t in self._polls:
            t.cancel()
        for d in self._unsent:
            self.server._put_back(d)
        self._unsent.clear()
        self._out.clear()
        self._backlog.clear()
        self.server._conns.discard(self)
        self.server._on_connection_lost()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # -- requests --------------------------------------------------------------------------------

    def _request(self, req: Request) -> None:
        spec = METHODS.get(req.method)
        if spec is None:
            self._send(encode_error(req.msgid, UnknownMethod(f"unknown method {req.method[:100]!r}")))
            return
        handler, lo, hi, waits = spec
        n = len(req.params)
        if n < lo or n > hi:
            self._send(encode_error(req.msgid, arity_error(req.method, lo, hi, n)))
            return
        run = self._run(req.msgid, req.method, handler, req.params)
        if self.server.eager():
            task = start_eagerly(self.loop, run)  # None: answered already
            if task is None:
                return
        else:
            task = self.loop.create_task(run)
        self._track(task, req.msgid, req.method, waits)

    def _notification(self, note: Notification) -> None:
        spec = METHODS.get(note.method)
        if spec is None or spec[3] or not spec[1] <= len(note.params) <= spec[2]:
            log.debug("rpc %s: notification %s%r not run", self.peer, note.method, note.params)
            return
        task = self.loop.create_task(self._run(None, note.method, spec[0], note.params))
        self._track(task, None, note.method, False)

    def _track(self, task: asyncio.Task[None], msgid: int | None, method: str, waits: bool) -> None:
        self._tasks[task] = (msgid, method)
        self.server._tasks.add(task)
        if waits:
            self._polls.add(task)
        task.add_done_callback(self._task_done)
        if len(self._tasks) >= self.server.max_inflight:
            self._update_reading()

    def _task_done(self, task: asyncio.Task[None]) -> None:
        msgid, method = self._tasks.pop(task)
        self._polls.discard(task)
        if task.cancelled() and msgid is not None and self.closing_error is not None:
            # Ended by this side (server stopping, client gone or sending garbage): say so. Done
            # here because a task cancelled before its first step never runs its own handlers.
            self._send(encode_error(msgid, self.closing_error))
            if access_log.isEnabledFor(logging.INFO):
                access_log.info("rpc %s %s - %s", self.peer, method, self.closing_error.reason)
        self.server._tasks.discard(task)
        if self._backlog:
            self._run_backlog()
        elif self._read_paused:
            self._update_reading()
        if self.closing_error is not None and not self._tasks:
            self._close_transport()

    async def _run(self, msgid: int | None, method: str, handler: Handler, params: Sequence[Any]) -> None:
        started = time.perf_counter() if access_log.isEnabledFor(logging.INFO) else 0.0
        try:
            self.manager.check_available()
            reply = await handler(self.manager, params)
        except LMQError as e:
            if msgid is None:
                log.debug("rpc %s: notification %s failed: %s", self.peer, method, e)
            else:
                self._reply_error(msgid, method, params, e, started)
            return
        except Exception as e:
            log.exception("rpc %s: %s failed", self.peer, method)
            if msgid is not None:
                self._reply_error(msgid, method, params, LMQError(f"internal error: {type(e).__name__}"), started)
            return
        if isinstance(reply, bytes):
            if msgid is not None:
                self._send(encode_result_raw(msgid, reply))
            if started:
                self._access(method, params, OUTCOME.get(reply, "ok"), started)
            return
        if msgid is None or self.closed:
            self.server._put_back(reply)
            return
        try:
            data = encode_result_raw(msgid, encode_deliveries(reply))
        except Exception as e:
            log.exception("rpc %s: cannot encode %s", self.peer, outcome(reply))
            self.server._put_back(reply)
            self._reply_error(msgid, method, params, LMQError(f"internal error: {type(e).__name__}"), started)
            return
        self._send(data, reply)
        if started:
            self._access(method, params, outcome(reply), started)

    def _reply_error(self, msgid: int, method: str, params: Sequence[Any], error: LMQError, started: float) -> None:
        self._send(encode_error(msgid, error))
        if started:
            self._access(method, params, error.reason, started)

    def _access(self, method: str, params: Sequence[Any], outcome: str, started: float) -> None:
        target = params[0] if params and type(params[0]) is str else "-"
        ms = (time.perf_counter() - started) * 1000
        info_line(access_log, f"rpc {self.peer} {method} {target} {outcome} {ms:.3f}ms")

    # -- writing ---------------------------------------------------------------------------------

    def _send(self, data: bytes, delivery: Deliveries | None = None) -> None:
        if self.closed:
            if delivery is not None:
                self.server._put_back(delivery)
            return
        self._out.append(data)
        if delivery is not None:
            self._unsent.append(delivery)
        if not self._flush_pending:
            self._flush_pending = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_pending = False
        out = self._out
        if not out:
            return
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            for d in self._unsent:
                self.server._put_back(d)
        else:
            transport.write(out[0] if len(out) == 1 else b"".join(out))
        self._out = []
        self._unsent.clear()

    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            return
        pause = (
            self._write_paused
            or self.closing_error is not None
            or bool(self._backlog)
            or len(self._tasks) >= self.server.max_inflight
        )
        if pause and not self._read_paused:
            transport.pause_reading()
            self._read_paused = True
        elif not pause and self._read_paused and len(self._tasks) < self.server.max_inflight // 2 + 1:
            transport.resume_reading()
            self._read_paused = False
            # The client could not send while it was not read: its clock starts again.
            self.progress.start(self.loop.time())

    # -- ending -----------------------------------------------------------------------------------

    def abort(self, error: LMQError, *, quiet: bool = False) -> None:
        """Stop reading; waiting pulls are answered with ``error``; other running requests
        finish and are answered; then the connection closes."""
        if self.closing_error is not None or self.closed:
            return
        if not quiet:
            log.info("rpc %s: closing connection: %s", self.peer, error.detail)
        self.closing_error = error
        self._drop_frame()  # nothing more is read: what came of a frame is of no use
        self._update_reading()
        # Requests still waiting their turn are not started now: each is told why.
        while self._backlog:
            ev = self._backlog.popleft()
            if type(ev) is Request:
                self._send(encode_error(ev.msgid, error))
        for t in self._polls:
            t.cancel()
        if not self._tasks:
            self._close_transport()

    def _close_transport(self) -> None:
        self._flush()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def cancel_all(self) -> None:
        for t in self._tasks:
            t.cancel()


class RpcServer:
    """Serves the MessagePack-RPC API of one :class:`QueueManager`."""

    def __init__(
        self,
        manager: QueueManager,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_inflight: int = DEFAULT_MAX_INFLIGHT,
        max_connections: int | None = None,
        shutdown_timeout: float = 10.0,
        frame_timeout: float = DEFAULT_BODY_TIMEOUT,
        min_receive_rate: int = DEFAULT_MIN_RECEIVE_RATE,
        evict_after: float = DEFAULT_EVICT_AFTER,
        budget: BufferBudget | None = None,
        eager: Callable[[], bool] = lambda: True,
    ) -> None:
        """``budget``: shared with the node's HTTP server; by default one of its own."""
        self.manager = manager
        # Whether a request may now run its first step outside any task (pylmq.api._eager):
        # not while the store calls other nodes, whose waits use asyncio.timeout (needs a task).
        self.eager = eager
        self.max_message_size = max_message_size
        self.max_inflight = max(1, max_inflight)
        if max_connections is None:
            max_connections = default_max_connections()
        self.limit = ConnectionLimit(max_connections, "MessagePack-RPC", log, time.monotonic)
        self.budget = budget or BufferBudget(default_max_buffered(), log, time.monotonic)
        self.frame_timeout = frame_timeout
        self.min_receive_rate = min_receive_rate
        self._evictions: Evictions[_Connection] = Evictions(evict_after)
        self._sweeper: asyncio.Task[None] | None = None
        self.shutdown_timeout = shutdown_timeout
        self.address: tuple[str, int] | None = None
        self._server: Listener | None = None
        self._conns: set[_Connection] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._put_backs = PutBacks(manager, "rpc")
        self._closing = False
        self._all_gone: asyncio.Event | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; returns the bound address (useful with port 0)."""
        loop = asyncio.get_running_loop()
        # Not loop.create_server: under uvloop it lets in one new connection per pass of the
        # loop, so a burst of clients waits on a busy node (pylmq.api._listen).
        self._server = listen(lambda: _Connection(self), host, port)
        self._sweeper = loop.create_task(self._sweep(), name="rpc-frame-timeouts")
        sockname = self._server.sockets[0].getsockname()
        self.address = (str(sockname[0]), int(sockname[1]))
        log.info("MessagePack-RPC listening on %s:%d", *self.address)
        return self.address

    async def close(self) -> None:
        """Stop accepting; waiting pulls are answered ``shutting_down``; other running requests
        get up to ``shutdown_timeout`` seconds to finish; then every connection is closed."""
        if self._server is None or self._closing:
            return
        self._closing = True
        self._server.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        self._all_gone = asyncio.Event()
        for conn in list(self._conns):
            conn.abort(ShuttingDown("the server is stopping"), quiet=True)
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self.shutdown_timeout)
            if pending:
                log.warning("rpc: %d requests still running at shutdown: cancelled", len(pending))
                for conn in list(self._conns):
                    conn.cancel_all()
                for t in pending:
                    t.cancel()
                await asyncio.wait(pending, timeout=_CLOSE_GRACE)
        for conn in list(self._conns):
            conn._close_transport()
        if self._conns:
            try:
                await asyncio.wait_for(self._all_gone.wait(), _CLOSE_GRACE)
            except TimeoutError:
                for conn in list(self._conns):
                    if conn.transport is not None:
                        conn.transport.abort()
        await self._put_backs.wait(_CLOSE_GRACE)
        log.info("MessagePack-RPC stopped")

    def make_room(self) -> None:
        """At the connection limit, close the connection stuck longest in a frame not yet whole
        with no request running, so that slow sockets filling the limit cannot lock out a
        client that sends whole frames. Idle connections keep their places: RPC clients keep
        theirs open between requests."""
        self._evictions.make_room(self._conns, self._conns.__contains__, asyncio.get_running_loop().time())

    async def _sweep(self) -> None:
        # One sweep for every connection: a timer per frame would cost every request.
        period = max(0.05, min(self.frame_timeout / 4, 10.0))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for conn in list(self._conns):
                conn.time_out(now)

    def _on_connection_lost(self) -> None:
        if self._all_gone is not None and not self._conns:
            self._all_gone.set()

    def _put_back(self, d: Deliveries) -> None:
        """The client never got ``d``: make it available again, its retry intact."""
        self._put_backs.add(d)
