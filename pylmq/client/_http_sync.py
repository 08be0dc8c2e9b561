"""The blocking HTTP client (http.client, one keep-alive connection).

No event loop and no thread: a Spark executor or a script gets plain blocking calls. The
connection is opened on first use and re-opened after a fork or after sitting idle, so a client
made before a fork, or unpickled in another process, just works; it never pickles a socket.
"""

from __future__ import annotations

import http.client
import os
import socket
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pylmq.client import _http_proto as proto
from pylmq.client._closing import Closing
from pylmq.client._http import KEEPALIVE, read_timeout
from pylmq.client._message import ClaimResult, Message, PullFormat, ReplyMany, ReplyResult
from pylmq.client._options import PushOptions
from pylmq.client._urls import DEFAULT_HTTP_URL, HttpBase, parse_http_urls
from pylmq.errors import Unreachable

__all__ = ["HttpClient"]

T = TypeVar("T")

# Methods that may be sent again when a reused keep-alive connection turns out to be closed:
# the server cannot have acted on a request it never read (RFC 9112 9.3.1).
_IDEMPOTENT = frozenset({"GET", "PUT", "DELETE"})


class HttpClient(Closing):
    """LMQ's HTTP API with blocking calls; the same operations as
    :class:`~pylmq.client.AsyncHttpClient`, with the same failover rules.

    Calls from several threads are serialised (one connection); use one client per thread
    for parallel requests. ``token``: as :class:`~pylmq.client.AsyncHttpClient`'s (a pickled
    client carries it: an executor that unpickles it must be trusted with it).
    """

    def __init__(
        self,
        base_url: str | Sequence[str] = DEFAULT_HTTP_URL,
        *,
        request_timeout: float | None = 30.0,
        connect_timeout: float = 5.0,
        token: str | None = None,
    ) -> None:
        self._urls = base_url if isinstance(base_url, str) else list(base_url)
        self.bases: list[HttpBase] = parse_http_urls(base_url)
        self._token = token
        self._auth = proto.bearer_header(token)  # kept out of every repr and message
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self._current = 0
        self._lock = threading.Lock()
        self._conn: http.client.HTTPConnection | None = None
        self._conn_pid = 0
        self._last_used = 0.0

    # Only the configuration travels: the copy connects when first used.
    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_http, (self._urls, self.request_timeout, self.connect_timeout, self._token))

    @property
    def base_url(self) -> str:
        return self.bases[self._current].url

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        # A connection inherited through fork belongs to the parent: forget it, never close it.
        if conn is not None and self._conn_pid == os.getpid():
            conn.close()

    def _connect(self, base: HttpBase) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if base.scheme == "https":
            conn = http.client.HTTPSConnection(base.host, base.port, timeout=self.connect_timeout)
        else:
            conn = http.client.HTTPConnection(base.host, base.port, timeout=self.connect_timeout)
        conn.connect()
        conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn

    def _exchange(
        self, conn: http.client.HTTPConnection, base: HttpBase, req: proto.HttpRequest[Any]
    ) -> proto.HttpResponse:
        conn.sock.settimeout(read_timeout(req.server_wait, self.request_timeout))
        headers = {**req.headers, **self._auth} if self._auth else req.headers
        conn.request(req.method, base.prefix + req.target, body=req.body, headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.will_close:
            self._drop()
        else:
            self._last_used = time.monotonic()
        return proto.HttpResponse(resp.status, {k.lower(): v for k, v in resp.getheaders()}, body)

    def _send(self, req: proto.HttpRequest[T]) -> T:
        with self._lock:
            return req.decode(self._send_locked(req))

    def _send_locked(self, req: proto.HttpRequest[Any]) -> proto.HttpResponse:
        conn = self._conn
        if conn is not None and (self._conn_pid != os.getpid() or time.monotonic() - self._last_used > KEEPALIVE):
            self._drop()
            conn = None
        if conn is not None:
            base = self.bases[self._current]
            try:
                return self._exchange(conn, base, req)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError) as e:
                self._drop()
                if req.method not in _IDEMPOTENT:
                    raise Unreachable(f"{req.method} {base.url}{req.target}: {type(e).__name__}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                raise Unreachable(f"{req.method} {base.url}{req.target}: {type(e).__name__}: {e}") from e
        failures: list[str] = []
        n = len(self.bases)
        for step in range(n):
            index = (self._current + step) % n
            base = self.bases[index]
            try:
                conn = self._connect(base)
            except OSError as e:
                failures.append(f"{base.url}: {e}")
                continue
            self._conn, self._conn_pid, self._current = conn, os.getpid(), index
            try:
                return self._exchange(conn, base, req)
            except (OSError, http.client.HTTPException) as e:
                self._drop()
                raise Unreachable(f"{req.method} {base.url}{req.target}: {type(e).__name__}: {e}") from e
        raise Unreachable("no node could be connected to: " + "; ".join(failures))

    # -- messages ----------------------------------------------------------------------------------

    def push(self, queue: str, body: bytes | str, content_type: str | None = None) -> str:
        """Push one message; the answer is the accum state: ``no``, ``new`` or ``yes``."""
        return self._send(proto.push(queue, body, content_type))

    def push_all(self, regex: str, body: bytes | str, content_type: str | None = None) -> dict[str, str]:
        """Push to every existing queue whose name matches; ``{queue: accum}``."""
        return self._send(proto.push_all(regex, body, content_type))

    def pull(self, queue: str, timeout: float | None = None, cf: PullFormat = "multipart") -> Message | None:
        """Take the next message; ``None`` when none came within ``timeout`` seconds
        (``None``: wait forever, ``0``: answer at once)."""
        return self._send(proto.pull(queue, timeout, cf))

    def pull_any(self, regex: str, timeout: float | None = None, cf: PullFormat = "multipart") -> Message | None:
        return self._send(proto.pull_any(regex, timeout, cf))

    def push_many(self, queue: str, messages: Sequence[bytes | str | tuple[str | None, bytes | str]]) -> int:
        return self._send(proto.push_many(queue, messages))

    def pull_many(
        self, queue: str, count: int, timeout: float | None = None, holder: str | None = None
    ) -> list[Message]:
        return self._send(proto.pull_many(queue, count, timeout, holder))

    def ack(self, queue: str, msg_id: str) -> None:
        self._send(proto.ack(queue, msg_id))

    def nack(self, queue: str, msg_id: str) -> None:
        self._send(proto.nack(queue, msg_id))

    def ext(self, queue: str, msg_id: str) -> None:
        self._send(proto.ext(queue, msg_id))

    def claim(self, queue: str, ids: Sequence[str] = (), *, holder: str | None = None) -> ClaimResult[Message]:
        """See the asyncio client's ``claim``."""
        return self._send(proto.claim(queue, ids, holder))

    def reply_many(self, queue: str, reply: ReplyMany, ids: Sequence[str]) -> ReplyResult:
        """See :meth:`AsyncHttpClient.reply_many <pylmq.client.AsyncHttpClient.reply_many>`."""
        return self._send(proto.reply_many(queue, reply, ids))

    def delete_queue(self, queue: str) -> None:
        self._send(proto.delete_queue(queue))

    # -- pylmq's extensions: push options, peek, dead letters, virtual queues -------------------

    def push_with(
        self, queue: str, body: bytes | str, content_type: str | None = None, options: PushOptions | None = None
    ) -> dict[str, str]:
        """Push with per-message options (:class:`PushOptions`: delay, ttl, retry, interval,
        priority, once); ``{queue: id}``, one entry per queue pushed (a virtual queue pushes to
        each of its queues). :class:`~pylmq.errors.InvalidOptions` names a bad option."""
        return self._send(proto.push_with(queue, body, content_type, options))

    def peek(
        self, queue: str, after: str | None = None, n: int | None = None, body: bool = False, preview: int | None = None
    ) -> list[dict[str, Any]]:
        """Up to ``n`` (default 100, at most 1000) of the queue's records after the id
        ``after``, in order, without delivering them: id, state, retry, attempts, ts, expires,
        priority, size, type, content_type, ``dead`` for a dead letter, the body when asked
        (``preview``: only its first that many bytes, and ``truncated``)."""
        return self._send(proto.peek(queue, after, n, body, preview))

    def purge(self, queue: str) -> int:
        """See :meth:`AsyncHttpClient.purge <pylmq.client.AsyncHttpClient.purge>`."""
        return self._send(proto.purge(queue))

    def requeue(self, dlq: str, n: int | None = None, to: str | None = None) -> int:
        """Move up to ``n`` (default 100) dead letters of ``dlq`` back to their origin queue, or
        to ``to``, as new messages; the count moved."""
        return self._send(proto.requeue(dlq, n, to))

    def virtual_queues(self) -> dict[str, list[str]]:
        """Every virtual queue and the queues it binds."""
        return self._send(proto.virtual_queues())

    def get_virtual(self, name: str) -> list[str]:
        """The queues a virtual queue binds (:class:`~pylmq.errors.NotFound` when none)."""
        return self._send(proto.get_virtual(name))

    def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        """Bind (or rebind) virtual queue ``name`` to ``queues`` (1 to 64 real queues)."""
        self._send(proto.set_virtual(name, queues))

    def delete_virtual(self, name: str) -> None:
        self._send(proto.delete_virtual(name))

    # -- properties ------------------------------------------------------------------------------

    def get_props(self, queue: str) -> dict[str, Any]:
        return self._send(proto.get_props(queue))

    def update_props(self, queue: str, props: Mapping[str, Any]) -> None:
        self._send(proto.update_props(queue, props))

    def reset_props(self, queue: str) -> None:
        self._send(proto.reset_props(queue))

    def get_default_props(self) -> list[tuple[str, dict[str, Any]]]:
        return self._send(proto.get_default_props())

    def set_default_props(self, defaults: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        self._send(proto.set_default_props(defaults))

    def delete_default_props(self) -> None:
        self._send(proto.delete_default_props())

    def stats(self) -> dict[str, Any]:
        return self._send(proto.stats())


def _rebuild_http(
    urls: str | list[str], request_timeout: float | None, connect_timeout: float, token: str | None = None
) -> HttpClient:
    return HttpClient(urls, request_timeout=request_timeout, connect_timeout=connect_timeout, token=token)
