"""The asyncio HTTP client (aiohttp, one pooled keep-alive session)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

import aiohttp
from yarl import URL

from pylmq.client import _http_proto as proto
from pylmq.client._closing import AsyncClosing
from pylmq.client._message import ClaimResult, Message, PullFormat, ReplyMany, ReplyResult
from pylmq.client._options import PushOptions
from pylmq.client._urls import DEFAULT_HTTP_URL, HttpBase, parse_http_urls
from pylmq.errors import Unreachable

__all__ = ["KEEPALIVE", "AsyncHttpClient"]

T = TypeVar("T")

KEEPALIVE = 4.0
"""Seconds an idle connection is kept: below the server's own idle limit (Erlang LMQ's cowboy
closes after 5 s), so a request is never sent on a connection the server is closing."""

_CONNECT_FAILURES = (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)


def read_timeout(server_wait: float | None, request_timeout: float | None) -> float | None:
    if server_wait is None or request_timeout is None:
        return None
    return server_wait + request_timeout


class AsyncHttpClient(AsyncClosing):
    """LMQ's HTTP API over one pooled aiohttp session.

    ``base_url`` is one node URL, a comma-separated string or a list of them: when a node
    cannot be connected to, the next is tried, and the client stays with the one that
    answered. A request that reached a node and then failed is not sent again elsewhere (it
    may have been carried out), it raises :class:`~pylmq.errors.Unreachable`.

    ``request_timeout`` bounds how long to wait for an answer beyond what the server may
    legitimately take (a pull's ``timeout``); ``None`` waits forever. A ``session`` passed in is
    used and left open; otherwise the client makes its own and closes it in :meth:`close`.

    ``token``: the credential of a node with ``http_auth``, sent as ``Authorization: Bearer``
    with every request (to every node of ``base_url``); a node without it ignores the header.
    """

    def __init__(
        self,
        base_url: str | Sequence[str] = DEFAULT_HTTP_URL,
        *,
        session: aiohttp.ClientSession | None = None,
        request_timeout: float | None = 30.0,
        connect_timeout: float = 5.0,
        max_connections: int = 100,
        token: str | None = None,
    ) -> None:
        self.bases: list[HttpBase] = parse_http_urls(base_url)
        self._auth = proto.bearer_header(token)  # kept out of every repr and message
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.max_connections = max_connections
        self._session = session
        self._own_session = session is None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._current = 0

    @property
    def base_url(self) -> str:
        """The node URL in use (the one that last answered)."""
        return self.bases[self._current].url

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _get_session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._own_session and self._loop is not loop:
            # Used from another event loop: the old session cannot serve (or close) here.
            self._session, self._loop = None, loop
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self.max_connections, keepalive_timeout=KEEPALIVE)
            self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False)
            self._own_session = True
        return self._session

    async def _send(self, req: proto.HttpRequest[T]) -> T:
        session = self._get_session()
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.connect_timeout,
            sock_read=read_timeout(req.server_wait, self.request_timeout),
        )
        # Without a content-type the server must store none (LMQ's default applies on pull).
        skip = ("Content-Type",) if "Content-Type" not in req.headers else ()
        headers = {**req.headers, **self._auth} if self._auth else req.headers
        failures: list[str] = []
        n = len(self.bases)
        for step in range(n):
            index = (self._current + step) % n
            base = self.bases[index]
            url = URL(base.url + req.target, encoded=True)
            try:
                async with session.request(
                    req.method, url, data=req.body, headers=headers, timeout=timeout, skip_auto_headers=skip
                ) as resp:
                    body = await resp.read()
                    response = proto.HttpResponse(resp.status, {k.lower(): v for k, v in resp.headers.items()}, body)
            except _CONNECT_FAILURES as e:
                failures.append(f"{base.url}: {e}")
                continue
            except (aiohttp.ClientError, TimeoutError) as e:
                raise Unreachable(f"{req.method} {base.url}{req.target}: {type(e).__name__}: {e}") from e
            self._current = index
            return req.decode(response)
        raise Unreachable("no node could be connected to: " + "; ".join(failures))

    # -- messages ----------------------------------------------------------------------------------

    async def push(self, queue: str, body: bytes | str, content_type: str | None = None) -> str:
        """Push one message; the answer is the accum state: ``no``, ``new`` or ``yes``."""
        return await self._send(proto.push(queue, body, content_type))

    async def push_all(self, regex: str, body: bytes | str, content_type: str | None = None) -> dict[str, str]:
        """Push to every existing queue whose name matches; ``{queue: accum}``."""
        return await self._send(proto.push_all(regex, body, content_type))

    async def pull(self, queue: str, timeout: float | None = None, cf: PullFormat = "multipart") -> Message | None:
        """Take the next message; ``None`` when none came within ``timeout`` seconds
        (``None``: wait forever, ``0``: answer at once)."""
        return await self._send(proto.pull(queue, timeout, cf))

    async def pull_any(self, regex: str, timeout: float | None = None, cf: PullFormat = "multipart") -> Message | None:
        """Take the next message of any queue whose name matches, including queues created
        while waiting."""
        return await self._send(proto.pull_any(regex, timeout, cf))

    async def push_many(self, queue: str, messages: Sequence[bytes | str | tuple[str | None, bytes | str]]) -> int:
        """Push many messages to one queue in one request (pylmq's extension, not in Erlang
        LMQ): each a body or ``(content_type, body)``; at most 10,000. The count pushed."""
        return await self._send(proto.push_many(queue, messages))

    async def pull_many(
        self, queue: str, count: int, timeout: float | None = None, holder: str | None = None
    ) -> list[Message]:
        """Take up to ``count`` messages in one request (pylmq's extension): waits up to
        ``timeout`` for the first, then takes what is there; ``[]`` when none came. A
        ``holder`` tag (1-64 printable ASCII) lets :meth:`claim` take them back by it."""
        return await self._send(proto.pull_many(queue, count, timeout, holder))

    async def ack(self, queue: str, msg_id: str) -> None:
        """Done: delete the message. :class:`~pylmq.errors.MessageNotFound` when the id is
        unknown, expired or was redelivered."""
        await self._send(proto.ack(queue, msg_id))

    async def nack(self, queue: str, msg_id: str) -> None:
        """Release: make the message available again now (the spent retry stays spent)."""
        await self._send(proto.nack(queue, msg_id))

    async def ext(self, queue: str, msg_id: str) -> None:
        """Retain: extend the deadline by the queue's timeout."""
        await self._send(proto.ext(queue, msg_id))

    async def claim(self, queue: str, ids: Sequence[str] = (), *, holder: str | None = None) -> ClaimResult[Message]:
        """Take messages back by the id of their last delivery (a pylmq extension), e.g. after
        a restart lost track of them: each still in processing under that id, or available
        again under it (nacked, or past its deadline and not pulled since), comes back with the
        same id and a new deadline; one not held spends a retry, as a redelivery would. Ids past
        the answer's 16 MiB come back in ``later``. At most 10,000 ids.

        With ``holder`` instead of ids: every message still claimable that a
        ``pull_many(..., holder=)`` with that tag was given (the node remembers tags in
        memory only)."""
        return await self._send(proto.claim(queue, ids, holder))

    async def reply_many(self, queue: str, reply: ReplyMany, ids: Sequence[str]) -> ReplyResult:
        """``reply`` (``ack``, ``nack`` or ``ext``) for every id in one request and one group
        commit on the node (a pylmq extension: Erlang LMQ answers 404). Ids that name no message
        in processing come back in ``not_found``; at most 10,000 ids."""
        return await self._send(proto.reply_many(queue, reply, ids))

    async def delete_queue(self, queue: str) -> None:
        await self._send(proto.delete_queue(queue))

    # -- pylmq's extensions: push options, peek, dead letters, virtual queues -------------------

    async def push_with(
        self, queue: str, body: bytes | str, content_type: str | None = None, options: PushOptions | None = None
    ) -> dict[str, str]:
        """Push with per-message options (:class:`PushOptions`: delay, ttl, retry, interval,
        priority, once); ``{queue: id}``, one entry per queue pushed (a virtual queue pushes to
        each of its queues). :class:`~pylmq.errors.InvalidOptions` names a bad option."""
        return await self._send(proto.push_with(queue, body, content_type, options))

    async def peek(
        self, queue: str, after: str | None = None, n: int | None = None, body: bool = False, preview: int | None = None
    ) -> list[dict[str, Any]]:
        """Up to ``n`` (default 100, at most 1000) of the queue's records after the id
        ``after``, in order, without delivering them: id, state, retry, attempts, ts, expires,
        priority, size, type, content_type, ``dead`` for a dead letter, the body when asked
        (``preview``: only its first that many bytes, and ``truncated``)."""
        return await self._send(proto.peek(queue, after, n, body, preview))

    async def purge(self, queue: str) -> int:
        """Drop every message of the queue, in flight or not; the queue and its own props stay.
        How many went. :class:`~pylmq.errors.QueueNotFound` for an unknown queue."""
        return await self._send(proto.purge(queue))

    async def requeue(self, dlq: str, n: int | None = None, to: str | None = None) -> int:
        """Move up to ``n`` (default 100) dead letters of ``dlq`` back to their origin queue, or
        to ``to``, as new messages; the count moved."""
        return await self._send(proto.requeue(dlq, n, to))

    async def virtual_queues(self) -> dict[str, list[str]]:
        """Every virtual queue and the queues it binds."""
        return await self._send(proto.virtual_queues())

    async def get_virtual(self, name: str) -> list[str]:
        """The queues a virtual queue binds (:class:`~pylmq.errors.NotFound` when none)."""
        return await self._send(proto.get_virtual(name))

    async def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        """Bind (or rebind) virtual queue ``name`` to ``queues`` (1 to 64 real queues)."""
        await self._send(proto.set_virtual(name, queues))

    async def delete_virtual(self, name: str) -> None:
        await self._send(proto.delete_virtual(name))

    # -- properties ------------------------------------------------------------------------------

    async def get_props(self, queue: str) -> dict[str, Any]:
        """Effective properties: ``{"accum": s, "retry": n | "infinity", "timeout": s}``."""
        return await self._send(proto.get_props(queue))

    async def update_props(self, queue: str, props: Mapping[str, Any]) -> None:
        """Merge ``props`` into the queue's own properties."""
        await self._send(proto.update_props(queue, props))

    async def reset_props(self, queue: str) -> None:
        """Drop the queue's own properties (defaults apply again)."""
        await self._send(proto.reset_props(queue))

    async def get_default_props(self) -> list[tuple[str, dict[str, Any]]]:
        return await self._send(proto.get_default_props())

    async def set_default_props(self, defaults: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        """Replace the default list ``[(regex, props), ...]``; the first match applies."""
        await self._send(proto.set_default_props(defaults))

    async def delete_default_props(self) -> None:
        await self._send(proto.delete_default_props())

    async def stats(self) -> dict[str, Any]:
        return await self._send(proto.stats())
