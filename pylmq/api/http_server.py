"""pylmq's HTTP/1.1 server: httptools' parser (llhttp, as in uvicorn) under one asyncio protocol.

Why not aiohttp's server: its request and response path alone took more CPU per request than
pylmq's queue work (docs/decisions/own-http-server.md). The API itself (:mod:`pylmq.api.http`)
knows nothing of sockets; this module only frames bytes.

What one connection does:

- httptools calls back with the request line, headers and body chunks; a whole request is
  queued and answered in order (HTTP/1.1 pipelining). Answering starts at once in the protocol
  callback and becomes a task only when it has to wait (:mod:`pylmq.api._eager`), so a
  connection with nothing to do has no task.
- Keep-alive as HTTP/1.1 and 1.0 define it; ``Connection: close`` after the answer otherwise.
- Limits: the request target (:data:`MAX_TARGET`, 414), the header block (:data:`MAX_HEAD`,
  431) and the body (``max_body``, 413, checked on Content-Length before the body is read, and
  as chunks arrive). A request over a limit or not HTTP is answered with a JSON error after the
  answers before it, then the connection closes: what follows cannot be framed. It closes
  gently (FIN, then what still comes is read and dropped for :data:`LINGER` seconds), so that
  a client still sending does not get a reset in place of the answer.
- ``Expect: 100-continue`` is answered ``100 Continue`` when the body is within the limit (417
  for other expectations).
- A client that goes away (end of stream or reset) has its request cancelled: a long poll puts
  back a message it took (the queue manager does that). A delivery whose connection is closed
  by the time it would be written is put back here.
- Reading pauses past :data:`MAX_PIPELINE` queued requests; answering pauses while the
  transport's write buffer is over its high-water mark.
- A connection idle longer than ``keepalive_timeout`` is closed (aiohttp's default, 75 s).
- Slow clients: a request whose head is not whole ``header_timeout`` after its first byte, or
  whose body gets no byte for ``body_timeout``, or less than ``min_receive_rate`` bytes a second
  over a window of ``body_timeout`` (:class:`~pylmq.api._limits.Progress`), is answered 408
  and its connection closed.
- The bytes of bodies not yet whole count against the node's ``max_buffered_bytes``, shared
  with the RPC server (:class:`~pylmq.api._limits.BufferBudget`): a read that would take the
  total past it is answered 503 ``too_much_buffered``, its body dropped at once. A
  Content-Length over the whole budget, which could never fit, is answered 413 at once.
- At ``max_connections`` open connections (:mod:`pylmq.api._limits`) a new one takes the place
  of the connection idle or trickling in a head for longest (``evict_after`` seconds at least);
  with none such it is answered 503 and closed at once.
- A connection lost drops its parser and buffers at once: refcounting frees them, with no
  wait for the cyclic collector.

A graceful stop (:meth:`HttpServer.begin_stop`, :meth:`HttpServer.drain`, :meth:`HttpServer.close`)
stops listening, closes idle connections, lets requests in progress finish (their connections close
after the answer) and cancels what is left after the grace.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from email.utils import formatdate
from http import HTTPStatus
from typing import Protocol, cast

import httptools

from pylmq.api._eager import start_eagerly
from pylmq.api._limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_EVICT_AFTER,
    DEFAULT_HEADER_TIMEOUT,
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
from pylmq.api.http import DEFAULT_MAX_BODY, Request, Response, error_response
from pylmq.core.manager import QueueManager

__all__ = ["MAX_HEAD", "MAX_PIPELINE", "MAX_TARGET", "HttpServer", "Responder"]

log = logging.getLogger("pylmq.http")
access_log = logging.getLogger("pylmq.access")

MAX_TARGET = 8190
"""Longest request target (aiohttp's and nginx's default line limit)."""
MAX_HEAD = 64 * 1024
"""Largest header block (names and values together)."""
MAX_PIPELINE = 32
"""Requests queued on one connection before it is no longer read."""

LINGER = 2.0
"""Seconds a connection closed after a refused request still reads (and drops) what comes."""

_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_CLOSE = b"Connection: close\r\n"
_KEEP_ALIVE_10 = b"Connection: keep-alive\r\n"  # an HTTP/1.0 client that asked for it
_SMALL_BODY = 16 * 1024  # below this, head and body are joined into one write

_status_lines: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _status_lines.get(status)
    if line is None:
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Unknown"
        line = _status_lines[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode()
    return line


class Responder(Protocol):
    """What the server answers requests with: LMQ's HTTP API (:class:`~pylmq.api.http.HttpApi`),
    or another API over HTTP (:class:`~pylmq.api.sqs.SqsApi`)."""

    manager: QueueManager

    async def respond(self, request: Request) -> Response: ...


class _Rejected(Exception):
    """Raised in a parser callback: answer ``response`` and close the connection."""

    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _rejected(status: int, reason: str, detail: str) -> _Rejected:
    return _Rejected(error_response(status, reason, detail))


# A queued item: a request with the connection header its answer carries (None: close after
# it), or an answer already made for a request that could not be read.
_Item = tuple[Request, bytes | None] | tuple[Response, None]


class _Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer) -> None:
        self.server = server
        self.loop = server.loop
        # None once the connection is lost: the parser refers back to this protocol, and that
        # cycle would keep the connection and its buffers alive until the cyclic collector runs
        # (rarely, on a node: pylmq.cli.main freezes it and raises its threshold).
        self.parser: httptools.HttpRequestParser | None = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.idle_since = self.loop.time()
        self.in_message = False  # between a request's first byte and its end
        self.in_body = False  # the request's headers are read, its body is not
        # When the request being read began (its head must be whole by header_timeout after
        # it, however it trickles in), then when its body last moved (body_timeout).
        self.read_since = 0.0
        self.task: asyncio.Task[None] | None = None  # answering queued requests
        self._pending: deque[_Item] = deque()
        self._reading = True
        self._ending = False  # no request after those queued: close once they are answered
        self._expecting = False  # a 100 Continue is owed once the answers before it are out
        self._writable: asyncio.Future[None] | None = None  # set while writing is paused
        self._unsent: Deliveries | None = None  # a delivery still in the paused write buffer
        self._closed_by_us = False  # closed after an answer (its buffer is flushed first)
        # The request being read.
        self._target = b""
        self._headers: dict[bytes, bytes] = {}
        self._head_size = 0
        self._body: list[bytes] = []
        self._body_size = 0
        self.buffered = 0  # bytes of the body being read charged to the server's budget
        self.progress = Progress()  # how fast the body being read comes

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, but have its methods.
        self.transport = cast(asyncio.Transport, transport)
        server = self.server
        if not server.limit.admit_to(server.connections, server.make_room):
            self._ending = True
            self._closed_by_us = True
            detail = "the server has too many connections; try again later"
            self._send(error_response(503, "too_many_connections", detail), None, False)
            return
        self.server.connections.add(self)

    def data_received(self, data: bytes) -> None:
        if self._ending or self.parser is None:
            return  # after a request that could not be read, or an upgrade: not ours to read
        try:
            self.parser.feed_data(data)
        except Exception as e:
            if not self._ending:  # after a last request (Connection: close) nothing is read
                self._parse_failed(e)
        self._charge()

    def _charge(self) -> None:
        """Charge the body still being read to the budget, after a read: a body that came whole
        within the read costs nothing. Past the budget the request is refused with a 503."""
        holds = self._body_size if self._body else 0
        if holds == self.buffered:
            return
        budget = self.server.budget
        if budget.charge(self.buffered, holds, self.server.limit.api):
            self.buffered = holds
            return
        self._drop_body()
        self.in_message = self.in_body = False
        refusal = budget.refusal()
        self._reject(error_response(refusal.http_status, refusal.reason, refusal.detail))

    def _drop_body(self) -> None:
        """Forget the body being read and give its bytes back to the budget."""
        self._body = []
        self.server.budget.release(self.buffered)
        self.buffered = 0

    def _parse_failed(self, e: Exception) -> None:
        if isinstance(e, httptools.HttpParserUpgrade):
            # The request that asked for an upgrade is queued whole; what follows is not HTTP.
            self._end_after_answers()
        elif isinstance(e, httptools.HttpParserCallbackError) and isinstance(e.__context__, _Rejected):
            self._reject(e.__context__.response)
        elif isinstance(e, httptools.HttpParserError) and not isinstance(e, httptools.HttpParserCallbackError):
            detail = e.args[0] if e.args else str(e)
            if isinstance(detail, bytes):
                detail = detail.decode("latin-1")
            self._reject(error_response(400, "bad_request", f"malformed HTTP request: {detail}"))
        else:
            log.error("HTTP request handling failed", exc_info=e.__context__ or e)
            self._reject(error_response(500, "internal_error", "the server failed; see its log"))

    def eof_received(self) -> bool:
        # TCP cannot tell a half-close from a client that left: as a client that left.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.task is not None:
            self.task.cancel()  # a long poll stops waiting and puts back what it took
        self._pending.clear()
        # Free at once what a client that left mid-request sent, not at the next collection.
        self.parser = None
        self._drop_body()
        self._headers = {}
        self._target = b""
        self.in_message = self.in_body = False
        if self._unsent is not None and (exc is not None or not self._closed_by_us):
            # Still in our write buffer when the client left: it never had it all.
            self.server.put_back(self._unsent)
            self._unsent = None
        self._wake_writer()
        self.server.stopped_one()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self.loop.create_future()

    def resume_writing(self) -> None:
        self._wake_writer()

    def _wake_writer(self) -> None:
        if self._writable is not None:
            if not self._writable.done():
                self._writable.set_result(None)
            self._writable = None

    # -- httptools callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.in_message = True
        self.read_since = self.loop.time()
        self._target = b""
        self._headers = {}
        self._head_size = 0
        self._body = []
        self._body_size = 0

    def on_url(self, url: bytes) -> None:
        self._target += url
        if len(self._target) > MAX_TARGET:
            raise _rejected(414, "uri_too_long", f"the request target is over {MAX_TARGET} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value)
        if self._head_size > MAX_HEAD:
            raise _rejected(431, "headers_too_large", f"the request's headers are over {MAX_HEAD} bytes")
        self._headers.setdefault(name.lower(), value)

    def on_headers_complete(self) -> None:
        length = self._headers.get(b"content-length")
        refusal = self.server.refusal
        if (
            refusal is not None
            and self.parser is not None
            and ((length is not None and length != b"0") or b"transfer-encoding" in self._headers)
        ):
            # A body comes: refuse a request lacking the credential before taking any of it.
            method = self.parser.get_method().decode("ascii")
            refused = refusal(method, self._target.decode("utf-8", "surrogateescape"), self._headers)
            if refused is not None:
                raise _Rejected(refused)
        if length is not None and int(length) > self.server.max_body:
            raise self._too_large()
        if length is not None and int(length) > self.server.budget.max_bytes:
            # Could never fit, however long the client waited: not a 503 "try again later".
            if self.server.too_large is not None:
                raise _Rejected(self.server.too_large(self._headers, self.server.budget.max_bytes))
            detail = (
                f"the request body is over the {self.server.budget.max_bytes} bytes the node may hold"
                " of requests being received (max_buffered_bytes)"
            )
            raise _rejected(413, "too_large", detail)
        self.in_body = True
        self.read_since = self.loop.time()
        self.progress.start(self.read_since)
        expect = self._headers.get(b"expect")
        if expect is not None and self.parser is not None and self.parser.get_http_version() == "1.1":
            if expect.lower() != b"100-continue":
                raise _rejected(417, "expectation_failed", f"unknown Expect: {expect.decode('latin-1')}")
            if self.task is None and not self._pending:
                self._write(_CONTINUE)
            else:
                self._expecting = True

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > self.server.max_body:
            self._drop_body()  # not kept while the 413 waits for the answers before it
            raise self._too_large()
        self._body.append(body)
        self.progress.received += len(body)
        self.read_since = self.loop.time()

    def on_message_complete(self) -> None:
        self.in_message = self.in_body = False
        parser = self.parser
        assert parser is not None  # only called from feed_data
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body = []  # the request's now: no longer charged as partly received (_charge)
        target = self._target.decode("utf-8", "surrogateescape")
        request = Request(parser.get_method().decode("ascii"), target, self._headers, body)
        # After an upgrade request the connection would speak something else: answer, close.
        if not parser.should_keep_alive() or parser.should_upgrade():
            self._enqueue((request, None))
            self._end_after_answers()
        else:
            self._enqueue((request, b"" if parser.get_http_version() == "1.1" else _KEEP_ALIVE_10))

    def _too_large(self) -> _Rejected:
        if self.server.too_large is not None:
            return _Rejected(self.server.too_large(self._headers, self.server.max_body))
        detail = f"the request body is over {self.server.max_body} bytes"
        return _rejected(413, "too_large", detail)

    # -- answering ---------------------------------------------------------------------------

    def _enqueue(self, item: _Item) -> None:
        if self.task is None:
            answer = self._answer(item)
            self.task = start_eagerly(self.loop, answer) if self.server.eager() else self.loop.create_task(answer)
            return
        self._pending.append(item)
        if len(self._pending) >= MAX_PIPELINE:
            self._pause_reading()

    def _reject(self, response: Response) -> None:
        access_log.info("- - %d (request not read)", response.status)
        self._enqueue((response, None))
        self._end_after_answers()

    def _end_after_answers(self) -> None:
        self._ending = True
        if self.transport is None or self._closed_by_us:
            return  # the last answer is out already (and the connection closing or lingering)
        if self.task is None and not self._pending:
            self._closed_by_us = True
            self.transport.close()  # everything is answered already
        else:
            self._pause_reading()

    def _pause_reading(self) -> None:
        if self._reading and self.transport is not None:
            self._reading = False
            self.transport.pause_reading()

    async def _answer(self, item: _Item) -> None:
        try:
            while True:
                what, connection = item
                if isinstance(what, Request):
                    response, head_only = await self.server.respond(what), what.method == "HEAD"
                else:
                    response, head_only = what, False
                open_ = self._send(response, connection, head_only, linger=what is response)
                if self._writable is not None:
                    # Over the write buffer's high-water mark: a delivery counts as written
                    # once the buffer drains; a client gone before that gets it put back.
                    self._unsent = response.delivery
                    if not open_:
                        return
                    await self._writable
                    self._unsent = None
                if not open_:
                    return
                if not self._pending:
                    return
                item = self._pending.popleft()
                if not self._reading and not self._ending and len(self._pending) < MAX_PIPELINE // 4:
                    self._reading = True
                    # The client could not send while it was not read: its clock starts again.
                    self.read_since = self.loop.time()
                    self.progress.start(self.read_since)
                    assert self.transport is not None
                    self.transport.resume_reading()
        finally:
            self.task = None
            self.idle_since = self.loop.time()
            if self._expecting and not self._pending:
                self._expecting = False
                self.read_since = self.loop.time()  # the body can only come now
                self.progress.start(self.read_since)
                self._write(_CONTINUE)
            self.server.stopped_one()

    def _send(self, response: Response, connection: bytes | None, head_only: bool, linger: bool = False) -> bool:
        """Write one answer; whether the connection stays open for the next. ``linger``: the
        answer refuses a request not read whole (see :meth:`_linger`)."""
        transport = self.transport
        if transport is None or transport.is_closing():
            if response.delivery is not None:
                self.server.put_back(response.delivery)
            return False
        if connection is None or self.server.stopping or (self._ending and not self._pending):
            connection = _CLOSE
        body = response.body
        head = b"".join(
            (
                _status_line(response.status),
                response.head,
                b"Content-Length: %d\r\n" % len(body),
                self.server.date_and_server(),
                connection,
                b"\r\n",
            )
        )
        if head_only or not body:
            transport.write(head)
        elif len(body) < _SMALL_BODY:
            transport.write(head + body)
        else:
            transport.writelines((head, body))
        if connection is _CLOSE:
            self._closed_by_us = True
            if linger and transport.can_write_eof():
                self._linger(transport)
            else:
                transport.close()
            return False
        return True

    def _linger(self, transport: asyncio.Transport) -> None:
        """Close after refusing a request whose rest may still be coming (413, 408): closed at
        once with unread bytes, the socket would send a reset, which can make the client drop
        our answer unread. Send FIN instead and read (and drop) what still comes until the
        client closes too, for at most :data:`LINGER` seconds; then abort, in case the client
        does not read our answer either (close() would wait for it to)."""
        transport.write_eof()
        self.in_message = self.in_body = False  # nothing more is read: not busy at a stop
        self._drop_body()
        self._reading = True
        transport.resume_reading()
        self.loop.call_later(LINGER, transport.abort)

    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def time_out(self, now: float) -> None:
        """Answer 408 and close if the request being read is late: its head not whole
        ``header_timeout`` after its first byte, or its body still for ``body_timeout`` or
        slower than ``min_receive_rate`` over a window of it.
        A connection not read (answers pending), or a client waiting for its ``100 Continue``,
        is not late by its own fault."""
        if not self.in_message or self._ending or not self._reading or self._expecting:
            return
        server = self.server
        if self.in_body:
            if now - self.read_since > server.body_timeout:
                detail = f"no byte of the request body for {server.body_timeout:g} s"
            elif self.progress.too_slow(now, server.body_timeout, server.min_receive_rate):
                detail = (
                    f"the request body came at less than {server.min_receive_rate} bytes/s"
                    f" over {server.body_timeout:g} s (min_receive_rate)"
                )
            else:
                return
        elif now - self.read_since > server.header_timeout:
            detail = f"the request head was not complete within {server.header_timeout:g} s"
        else:
            return
        self.in_message = self.in_body = False
        self._drop_body()
        self._reject(error_response(408, "request_timeout", detail))

    def close_if_idle(self, idle_before: float | None = None) -> None:
        """Close the connection if it has no request in progress (and, with ``idle_before``,
        has been idle since before that time)."""
        if self.task is not None or self.in_message or self.transport is None:
            return
        if idle_before is None or self.idle_since < idle_before:
            self.transport.close()

    def holds_a_place_since(self, before: float) -> float | None:
        """When this connection last had a request in progress, if that was before ``before``
        and it is now only idle or trickling in a head: it may give its place to a newcomer.
        None if it is reading a body, answering, closing, or was active since."""
        if self.task is not None or self.in_body or self._ending or self.transport is None:
            return None
        since = self.read_since if self.in_message else self.idle_since
        return since if since < before else None

    def give_up_place(self) -> None:
        """Closed to make room for a new connection (see :meth:`HttpServer.make_room`)."""
        self.server.connections.discard(self)
        if self.transport is not None:
            self.transport.abort()

    @property
    def busy(self) -> bool:
        """A request is being read or answered."""
        return self.task is not None or self.in_message


class HttpServer:
    """The HTTP API served on one address (see the module docstring)."""

    def __init__(
        self,
        api: Responder,
        *,
        max_body: int = DEFAULT_MAX_BODY,
        keepalive_timeout: float = 75.0,
        header_timeout: float = DEFAULT_HEADER_TIMEOUT,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        max_connections: int | None = None,
        evict_after: float = DEFAULT_EVICT_AFTER,
        min_receive_rate: int = DEFAULT_MIN_RECEIVE_RATE,
        budget: BufferBudget | None = None,
        eager: Callable[[], bool] = lambda: True,
        name: str = "HTTP",
        too_large: Callable[[Mapping[bytes, bytes], int], Response] | None = None,
    ) -> None:
        """``budget``: shared with the node's RPC server; by default one of its own. ``name``:
        the API in log lines about its limits. ``too_large``: the answer to a body over a limit
        (the request's headers, the limit) in the API's own error shape; by default LMQ's 413."""
        self.api = api
        self.too_large = too_large
        # The API's check of a request's head before its body is read (HttpApi.refusal: the
        # credential); an API without one reads every body.
        self.refusal: Callable[[str, str, Mapping[bytes, bytes]], Response | None] | None = getattr(
            api, "refusal", None
        )
        # Whether a request may now run its first step outside any task (pylmq.api._eager):
        # not while the store calls other nodes, whose waits use asyncio.timeout (needs a task).
        self.eager = eager
        self.respond = api.respond
        self.max_body = max_body
        self.keepalive_timeout = keepalive_timeout
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.min_receive_rate = min_receive_rate
        self.loop = asyncio.get_running_loop()
        self.budget = budget or BufferBudget(default_max_buffered(), log, self.loop.time)
        if max_connections is None:
            max_connections = default_max_connections()
        self.limit = ConnectionLimit(max_connections, name, log, self.loop.time)
        self.connections: set[_Connection] = set()
        self._evictions: Evictions[_Connection] = Evictions(evict_after)
        self.stopping = False
        self._listener: Listener | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._drained: asyncio.Event | None = None
        self._put_backs = PutBacks(api.manager, name.lower())
        self._date_at = -1
        self._date = b""

    async def start(self, host: str, port: int) -> tuple[str, int]:
        """Listen; the address really bound (port 0 picks a free one)."""
        # Not loop.create_server: under uvloop it lets in one new connection per pass of the
        # loop, so a burst of clients waits on a busy node (pylmq.api._listen).
        self._listener = listen(lambda: _Connection(self), host, port, backlog=1024)
        self._sweeper = self.loop.create_task(self._sweep_idle(), name="http-keepalive")
        sockname = self._listener.sockets[0].getsockname()
        return sockname[0], sockname[1]

    def date_and_server(self) -> bytes:
        now = int(time.time())
        if now != self._date_at:
            self._date_at = now
            self._date = b"Date: " + formatdate(now, usegmt=True).encode() + b"\r\nServer: pylmq\r\n"
        return self._date

    def make_room(self) -> None:
        """At the connection limit, close the connection that has held its place longest
        (``evict_after`` seconds at least) while idle or trickling in a request head, so that
        slow or idle sockets filling the limit cannot lock out a client that sends whole
        requests: it waits for none of the read timeouts. A connection reading a body or
        answering a request keeps its place; with none to spare the newcomer gets the 503.
        (:class:`~pylmq.api._limits.Evictions` keeps the cost of finding it bounded.)"""
        self._evictions.make_room(self.connections, self.connections.__contains__, self.loop.time())

    async def _sweep_idle(self) -> None:
        # One sweep for every connection's timeouts: a timer per request would cost every
        # request on the hot path; a timeout is late by at most a period (a quarter of it).
        period = max(0.05, min(self.keepalive_timeout / 4, self.header_timeout / 4, self.body_timeout / 4, 10.0))
        while True:
            await asyncio.sleep(period)
            now = self.loop.time()
            idle_before = now - self.keepalive_timeout
            for conn in list(self.connections):
                conn.close_if_idle(idle_before)
                conn.time_out(now)

    # -- put back ----------------------------------------------------------------------------

    def put_back(self, d: Deliveries) -> None:
        """A delivery that could not be written goes back to its queue, retry intact."""
        self._put_backs.add(d)

    # -- stopping ----------------------------------------------------------------------------

    def begin_stop(self) -> None:
        """Stop listening and close the connections with nothing in progress; every later
        answer closes its connection after it is written."""
        self.stopping = True
        self._drained = asyncio.Event()
        if self._listener is not None:
            self._listener.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in list(self.connections):
            conn.close_if_idle()
        self.stopped_one()

    def stopped_one(self) -> None:
        if self._drained is not None and not any(c.busy for c in self.connections):
            self._drained.set()

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the requests in progress to be answered; whether
        they all were."""
        if self._drained is None:
            raise RuntimeError("drain() before begin_stop()")
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def close(self, grace: float = 2.0) -> None:
        """Cancel what is still running (a message taken for it is put back), close every
        connection and wait for the put-backs."""
        if not self.stopping:
            self.begin_stop()
        tasks = [c.task for c in self.connections if c.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=grace)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        await self._put_backs.wait(grace)
