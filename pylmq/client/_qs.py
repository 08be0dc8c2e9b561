"""Clients of queue_server's JSON protocol (docs/queue-server.md), over TCP or UDP.

:class:`AsyncQsClient` (asyncio) and :class:`QsClient` (blocking) send one request object per
call with a ``seq`` of their own and match each answer by it. A code other than 0 raises
:class:`~pylmq.errors.QsRefused` (its ``answer`` holds the whole object); no answer in
``request_timeout`` raises :class:`~pylmq.errors.Unreachable`.

Over UDP a request or its answer may be lost. Only requests that change nothing (monitor,
list, leader) are sent again on a timeout (``udp_resends`` times): a produce sent again could
be queued twice, a consume would take a second message, so neither ever is.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
from dataclasses import dataclass
from typing import Any, Literal

from pylmq.client._closing import AsyncClosing, Closing
from pylmq.errors import ProtocolError, QsRefused, Unreachable
from pylmq.wire.ports import DEFAULT_QS_PORT
from pylmq.wire.qs import (
    ACTION_CONFIRM,
    ACTION_CONSUME,
    ACTION_LEADER,
    ACTION_LIST,
    ACTION_LIST_LOCAL,
    ACTION_MONITOR,
    ACTION_MONITOR_LOCAL,
    ACTION_PRODUCE,
    DEFAULT_UDP_MAX,
    UDP_MAX_LIMIT,
    Framer,
    FramingError,
    encode_request,
)

__all__ = ["AsyncQsClient", "QsClient", "QsMessage", "Transport"]

Transport = Literal["tcp", "udp"]
_SAFE_TO_RESEND = frozenset((ACTION_MONITOR, ACTION_MONITOR_LOCAL, ACTION_LIST, ACTION_LIST_LOCAL, ACTION_LEADER))
_MAX_ANSWER = 64 << 20  # bytes of one TCP answer the client holds at most


@dataclass(frozen=True, slots=True)
class QsMessage:
    """A consumed message: its ``msg_id`` (to confirm), ``data`` (text, or base64 when
    ``encoding`` is "base64"), the delivery's ``uuid`` (to ack over HTTP or RPC), and the
    whole answer."""

    queue: str
    msg_id: int
    data: str
    uuid: str | None
    encoding: str | None
    answer: dict[str, Any]

    def body(self) -> bytes:
        """The message's bytes, whichever way they came."""
        if self.encoding == "base64":
            import base64

            return base64.b64decode(self.data)
        return self.data.encode("utf-8")


def _produce(
    queue: str, data: str, delay: float | None, ttl: float | None, retry: int, priority: int
) -> dict[str, Any]:
    obj: dict[str, Any] = {"action": ACTION_PRODUCE, "queue": queue, "data": data, "retry": retry}
    if delay is not None:
        obj["delay"] = delay
    if ttl is not None:
        obj["ttl"] = ttl
    if priority:
        obj["priority"] = priority
    return obj


def _checked(answer: dict[str, Any]) -> dict[str, Any]:
    code = answer.get("code")
    if code != 0:
        raise QsRefused(str(answer.get("reason", f"code {code}")), answer)
    return answer


def _message(queue: str, answer: dict[str, Any]) -> QsMessage | None:
    _checked(answer)
    if "msg_id" not in answer:
        return None
    mid, data = answer["msg_id"], answer.get("data")
    if type(mid) is not int or type(data) is not str:
        raise ProtocolError(f"a consume answer without an integer msg_id and text data: {answer!r}")
    return QsMessage(queue, mid, data, answer.get("uuid"), answer.get("data_encoding"), answer)


def _parse_answer(raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(raw)
    except ValueError as e:
        raise ProtocolError(f"an answer that is not JSON: {raw[:200]!r}") from e
    if type(obj) is not dict:
        raise ProtocolError(f"an answer that is not a JSON object: {raw[:200]!r}")
    return obj


class _QsEndpoint:
    """What both clients share: the server's address, the transport, the timeout and resends
    of a call, and the ``seq`` counter that matches answers to calls."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_QS_PORT,
        *,
        transport: Transport = "tcp",
        request_timeout: float = 10.0,
        udp_resends: int = 2,
    ) -> None:
        if transport not in ("tcp", "udp"):
            raise ValueError(f"transport must be tcp or udp, got {transport!r}")
        self.address = (host, port)
        self.transport: Transport = transport
        self.request_timeout = request_timeout
        self.udp_resends = udp_resends
        self._seq = itertools.count(1)
        self._init_connection()

    def _init_connection(self) -> None:
        """The state of a connection or socket not opened yet, each client's own."""
        raise NotImplementedError

    @property
    def _peer(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    def _tries(self, obj: dict[str, Any]) -> int:
        """How many times a request may go: more than once only over UDP, and only a request
        that changes nothing (see the module's docstring)."""
        return 1 + (self.udp_resends if self.transport == "udp" and obj.get("action") in _SAFE_TO_RESEND else 0)


class AsyncQsClient(_QsEndpoint, AsyncClosing):
    """queue_server's protocol over asyncio; concurrent calls share one connection (TCP) or
    socket (UDP)."""

    def _init_connection(self) -> None:
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._udp: asyncio.DatagramTransport | None = None
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        if self._reader_task is not None:
            self._reader_task.cancel()
            self._reader_task = None
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        self._fail(Unreachable("the client was closed"))

    def _fail(self, error: Exception) -> None:
        waiting, self._waiting = self._waiting, {}
        for fut in waiting.values():
            if not fut.done():
                fut.set_exception(error)

    def _deliver(self, answer: dict[str, Any]) -> None:
        seq = answer.get("seq")
        if type(seq) is int:
            fut = self._waiting.pop(seq, None)  # None: a call that timed out; dropped
        elif self.transport == "tcp" and self._waiting:
            # An answer with no seq (a request the server could not read): TCP answers come
            # in request order, so it is the oldest call's.
            fut = self._waiting.pop(next(iter(self._waiting)))
        else:
            fut = None
        if fut is not None and not fut.done():
            fut.set_result(answer)

    async def _connect(self) -> None:
        async with self._lock:
            if self.transport == "tcp":
                if self._writer is not None and not self._writer.is_closing():
                    return
                try:
                    reader, self._writer = await asyncio.wait_for(
                        asyncio.open_connection(*self.address), self.request_timeout
                    )
                except (OSError, TimeoutError) as e:
                    raise Unreachable(f"cannot connect to {self._peer}: {e}") from e
                self._reader_task = asyncio.get_running_loop().create_task(self._read(reader))
            elif self._udp is None:
                loop = asyncio.get_running_loop()
                client = self

                class _Proto(asyncio.DatagramProtocol):
                    def datagram_received(self, data: bytes, addr: Any) -> None:
                        # Not an answer of this protocol: dropped, the call times out.
                        with contextlib.suppress(ProtocolError):
                            client._deliver(_parse_answer(data))

                self._udp, _ = await loop.create_datagram_endpoint(_Proto, remote_addr=self.address)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        framer = Framer(_MAX_ANSWER)
        try:
            while data := await reader.read(256 * 1024):
                for raw in framer.feed(data):
                    self._deliver(_parse_answer(raw))
                if framer.error is not None:
                    raise framer.error
            self._fail(Unreachable("the server closed the connection"))
        except (OSError, FramingError, ProtocolError) as e:
            self._fail(Unreachable(f"the connection broke: {e}"))
        finally:
            if self._writer is not None:
                self._writer.close()
                self._writer = None

    async def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Send one request object (``seq`` is set here) and return its answer, whatever its code."""
        await self._connect()
        loop = asyncio.get_running_loop()
        tries = self._tries(obj)
        for attempt in range(tries):
            seq = next(self._seq)
            data = encode_request({**obj, "seq": seq})
            fut: asyncio.Future[dict[str, Any]] = loop.create_future()
            self._waiting[seq] = fut
            if self.transport == "tcp":
                assert self._writer is not None
                self._writer.write(data)
            else:
                if len(data) > UDP_MAX_LIMIT:
                    self._waiting.pop(seq, None)
                    raise QsRefused("too large for a datagram, use TCP", {})
                assert self._udp is not None
                self._udp.sendto(data)
            try:
                return await asyncio.wait_for(fut, self.request_timeout)
            except TimeoutError:
                self._waiting.pop(seq, None)
                if attempt == tries - 1:
                    raise Unreachable(f"no answer from {self._peer} in {self.request_timeout:g} s") from None
        raise AssertionError("unreachable")

    async def produce(
        self, queue: str, data: str, *, delay: float | None = None, ttl: float | None = None, retry: int = 0,
        priority: int = 0,
    ) -> dict[str, Any]:  # fmt: skip
        """Queue ``data``; the answer (``msg_id``, and ``msg_ids`` for a virtual queue)."""
        return _checked(await self.request(_produce(queue, data, delay, ttl, retry, priority)))

    async def consume(self, queue: str) -> QsMessage | None:
        return _message(queue, await self.request({"action": ACTION_CONSUME, "queue": queue}))

    async def confirm(self, queue: str, msg_id: int | str) -> bool:
        """Ack a delivery by its msg_id (or uuid); whether one was found to ack."""
        answer = _checked(await self.request({"action": ACTION_CONFIRM, "queue": queue, "msg_id": msg_id}))
        return bool(answer.get("confirmed", True))

    async def monitor(self, queue: str, *, local: bool = False) -> dict[str, Any]:
        action = ACTION_MONITOR_LOCAL if local else ACTION_MONITOR
        return _checked(await self.request({"action": action, "queue": queue}))

    async def list_queues(self, pattern: str = "", *, local: bool = False) -> dict[str, Any]:
        action = ACTION_LIST_LOCAL if local else ACTION_LIST
        return _checked(await self.request({"action": action, "pattern": pattern}))

    async def leader(self) -> dict[str, Any]:
        return _checked(await self.request({"action": ACTION_LEADER}))


class QsClient(_QsEndpoint, Closing):
    """queue_server's protocol with blocking calls, one at a time (calls from several threads
    are serialised); the same methods as :class:`AsyncQsClient`."""

    def _init_connection(self) -> None:
        self._sock: socket.socket | None = None
        self._framer = Framer(_MAX_ANSWER)
        self._answers: list[bytes] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _socket(self) -> socket.socket:
        if self._sock is None:
            try:
                if self.transport == "tcp":
                    sock = socket.create_connection(self.address, timeout=self.request_timeout)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                else:
                    sock = socket.socket(
                        socket.AF_INET6 if ":" in self.address[0] else socket.AF_INET, socket.SOCK_DGRAM
                    )
                    sock.connect(self.address)
            except OSError as e:
                raise Unreachable(f"cannot connect to {self._peer}: {e}") from e
            sock.settimeout(self.request_timeout)
            self._sock = sock
            self._framer = Framer(_MAX_ANSWER)
            self._answers = []
        return self._sock

    def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Send one request object (``seq`` is set here) and return its answer, whatever its code."""
        with self._lock:
            try:
                return self._request(obj)
            except (OSError, FramingError) as e:
                self.close()
                raise Unreachable(f"no answer from {self._peer}: {e}") from e

    def _request(self, obj: dict[str, Any]) -> dict[str, Any]:
        sock = self._socket()
        tries = self._tries(obj)
        for attempt in range(tries):
            seq = next(self._seq)
            data = encode_request({**obj, "seq": seq})
            if self.transport == "tcp":
                sock.sendall(data)
                while True:
                    while not self._answers:
                        chunk = sock.recv(256 * 1024)
                        if not chunk:
                            raise OSError("the server closed the connection")
                        self._answers.extend(self._framer.feed(chunk))
                        if self._framer.error is not None:
                            raise self._framer.error
                    answer = _parse_answer(self._answers.pop(0))
                    # One call at a time: an answer is this call's unless it names an older seq.
                    if type(answer.get("seq")) is not int or answer["seq"] == seq:
                        return answer
            if len(data) > UDP_MAX_LIMIT:
                raise QsRefused("too large for a datagram, use TCP", {})
            sock.send(data)
            try:
                while True:
                    answer = _parse_answer(sock.recv(max(DEFAULT_UDP_MAX, UDP_MAX_LIMIT)))
                    if answer.get("seq") == seq or "seq" not in answer:
                        return answer
            except TimeoutError:
                if attempt == tries - 1:
                    raise
        raise AssertionError("unreachable")

    def produce(
        self, queue: str, data: str, *, delay: float | None = None, ttl: float | None = None, retry: int = 0,
        priority: int = 0,
    ) -> dict[str, Any]:  # fmt: skip
        return _checked(self.request(_produce(queue, data, delay, ttl, retry, priority)))

    def consume(self, queue: str) -> QsMessage | None:
        return _message(queue, self.request({"action": ACTION_CONSUME, "queue": queue}))

    def confirm(self, queue: str, msg_id: int | str) -> bool:
        answer = _checked(self.request({"action": ACTION_CONFIRM, "queue": queue, "msg_id": msg_id}))
        return bool(answer.get("confirmed", True))

    def monitor(self, queue: str, *, local: bool = False) -> dict[str, Any]:
        action = ACTION_MONITOR_LOCAL if local else ACTION_MONITOR
        return _checked(self.request({"action": action, "queue": queue}))

    def list_queues(self, pattern: str = "", *, local: bool = False) -> dict[str, Any]:
        action = ACTION_LIST_LOCAL if local else ACTION_LIST
        return _checked(self.request({"action": action, "pattern": pattern}))

    def leader(self) -> dict[str, Any]:
        return _checked(self.request({"action": ACTION_LEADER}))
