"""The asyncio MessagePack-RPC client: many calls in flight on one connection."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from pylmq.client import _rpc_proto as proto
from pylmq.client._closing import AsyncClosing
from pylmq.client._errors import error_from_rpc
from pylmq.client._http import read_timeout
from pylmq.client._message import ClaimResult, ReplyMany, ReplyResult, RpcMessage
from pylmq.client._options import PushOptions
from pylmq.client._urls import DEFAULT_RPC_PORT, parse_rpc_addresses
from pylmq.errors import LMQError, ProtocolError, Unreachable
from pylmq.wire import msgpack_rpc as wire

__all__ = ["AsyncRpcClient"]

T = TypeVar("T")


class _Connection(asyncio.Protocol):
    """One TCP connection: writes requests, matches responses to their calls by msgid."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.transport: asyncio.Transport | None = None
        self.pending: dict[int, asyncio.Future[wire.Response]] = {}
        self.closed = False
        self._decoder = wire.Decoder()
        self._writable = asyncio.Event()
        self._writable.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for event in self._decoder.feed(data):
            if isinstance(event, wire.Response):
                fut = self.pending.pop(event.msgid, None)
                # None: a call given up (timed out or cancelled) whose answer came late.
                if fut is not None and not fut.done():
                    fut.set_result(event)
            elif isinstance(event, wire.Invalid) and event.fatal:
                self._fail(ProtocolError(f"{self._where()}: {event.error.detail}"))
                if self.transport is not None:
                    self.transport.abort()
                return
            # Notifications and malformed frames carry nothing a client waits for.

    def connection_lost(self, exc: Exception | None) -> None:
        why = f"{type(exc).__name__}: {exc}" if exc else "closed by the node"
        self._fail(Unreachable(f"{self._where()}: connection lost ({why})"))

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def _where(self) -> str:
        return f"msgpack-rpc {self.address[0]}:{self.address[1]}"

    def _fail(self, error: LMQError) -> None:
        self.closed = True
        self._writable.set()
        pending, self.pending = self.pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)

    async def send(self, frame: bytes) -> None:
        if not self._writable.is_set():
            await self._writable.wait()
        if self.closed or self.transport is None:
            raise Unreachable(f"{self._where()}: connection closed")
        self.transport.write(frame)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self._fail(Unreachable(f"{self._where()}: client closed"))


class AsyncRpcClient(AsyncClosing):
    """LMQ's MessagePack-RPC API over one pipelined connection.

    Calls may be made concurrently from many tasks: each is written at once and its answer is
    matched by msgid, so a long pull does not hold up the others. The connection is made on the
    first call; when it cannot be made, ``fallbacks`` (further ``(host, port)`` pairs) are tried
    in turn. A connection lost with calls in flight fails those calls with
    :class:`~pylmq.errors.Unreachable` (they may or may not have been carried out); the next call
    connects again.

    A pull given up by the caller (cancelled, or over ``request_timeout``) may still take a
    message on the node; it is redelivered after the queue's timeout, as with any unanswered
    delivery.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = DEFAULT_RPC_PORT,
        *,
        fallbacks: Sequence[str | tuple[str, int]] = (),
        request_timeout: float | None = 30.0,
        connect_timeout: float = 5.0,
    ) -> None:
        self.addresses: list[tuple[str, int]] = parse_rpc_addresses([(host, port), *fallbacks])
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self._current = 0
        self._conn: _Connection | None = None
        self._connecting: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._msgids = itertools.count()

    @property
    def address(self) -> tuple[str, int]:
        """The node address in use (the one last connected to)."""
        return self.addresses[self._current]

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    async def _connection(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # Used from another event loop (asyncio.run per batch): what belonged to the old
            # loop cannot be used, nor closed, from this one.
            self._loop, self._conn, self._connecting = loop, None, None
        conn = self._conn
        if conn is not None and not conn.closed:
            return conn
        if self._connecting is None:
            self._connecting = asyncio.Lock()
        async with self._connecting:
            conn = self._conn
            if conn is not None and not conn.closed:
                return conn
            failures: list[str] = []
            n = len(self.addresses)
            for step in range(n):
                index = (self._current + step) % n
                host, port = address = self.addresses[index]
                try:
                    async with asyncio.timeout(self.connect_timeout):
                        _, conn = await loop.create_connection(partial(_Connection, address), host, port)
                except (OSError, TimeoutError) as e:
                    failures.append(f"{host}:{port}: {type(e).__name__}: {e}")
                    continue
                self._conn, self._current = conn, index
                return conn
            raise Unreachable("no node could be connected to: " + "; ".join(failures))

    def _next_msgid(self, pending: Mapping[int, Any]) -> int:
        while True:
            msgid = next(self._msgids) & wire.MAX_MSGID
            if msgid not in pending:
                return msgid

    async def _call(self, call: proto.RpcCall[T]) -> T:
        conn = await self._connection()
        msgid = self._next_msgid(conn.pending)
        fut: asyncio.Future[wire.Response] = asyncio.get_running_loop().create_future()
        conn.pending[msgid] = fut
        try:
            await conn.send(wire.encode_request(msgid, call.method, call.params))
            limit = read_timeout(call.server_wait, self.request_timeout)
            try:
                async with asyncio.timeout(limit):
                    response = await fut
            except TimeoutError:
                raise Unreachable(
                    f"{conn.address[0]}:{conn.address[1]}: no answer to {call.method} within {limit} s"
                ) from None
        finally:
            conn.pending.pop(msgid, None)
        if response.error is not None:
            raise error_from_rpc(response.error)
        return call.decode(response.result)

    # -- messages ----------------------------------------------------------------------------------

    async def push(self, queue: str, content: Any) -> str:
        """Push a value (stored as msgpack); ``"ok"``, ``"packing started"`` or ``"packed"``."""
        return await self._call(proto.push(queue, content))

    async def push_all(self, regex: str, content: Any) -> str:
        """Push to every existing queue whose name matches."""
        return await self._call(proto.push_all(regex, content))

    async def pull(self, queue: str, timeout: float | None = None) -> RpcMessage | None:
        """The next message, or ``None`` if none came within ``timeout`` s (``None``: wait)."""
        return await self._call(proto.pull(queue, timeout))

    async def pull_any(self, regex: str, timeout: float | None = None) -> RpcMessage | None:
        return await self._call(proto.pull_any(regex, timeout))

    async def push_many(self, queue: str, contents: Sequence[Any]) -> int:
        """Push many values to one queue in one call (pylmq's extension, not in Erlang LMQ);
        at most 10,000. The count pushed."""
        return await self._call(proto.push_many(queue, contents))

    async def pull_many(
        self, queue: str, count: int, timeout: float | None = None, holder: str | None = None
    ) -> list[RpcMessage]:
        """Take up to ``count`` messages in one call (pylmq's extension); ``[]`` when none came
        within ``timeout`` s."""
        return await self._call(proto.pull_many(queue, count, timeout, holder))

    async def done(self, queue: str, msg_id: str) -> None:
        """Ack. :class:`~pylmq.errors.MessageNotFound` for an unknown, expired or redelivered id."""
        await self._call(proto.done(queue, msg_id))

    async def retain(self, queue: str, msg_id: str) -> None:
        """Ext: the deadline moves to now + the queue's timeout."""
        await self._call(proto.retain(queue, msg_id))

    async def release(self, queue: str, msg_id: str) -> None:
        """Nack: available again now; the spent retry stays spent."""
        await self._call(proto.release(queue, msg_id))

    ack = done
    ext = retain
    nack = release

    async def claim(self, queue: str, ids: Sequence[str] = (), *, holder: str | None = None) -> ClaimResult[RpcMessage]:
        """Take messages back by the id of their last delivery (a pylmq extension), e.g. after
        a restart lost track of them: each still in processing under that id, or available
        again under it (nacked, or past its deadline and not pulled since), comes back with the
        same id and a new deadline; one not held spends a retry, as a redelivery would. Ids past
        the answer's 16 MiB come back in ``later``. At most 10,000 ids.

        With ``holder`` instead of ids: every message still claimable that a
        ``pull_many(..., holder=)`` with that tag was given (the node remembers tags in
        memory only)."""
        return await self._call(proto.claim(queue, ids, holder))

    async def reply_many(self, queue: str, reply: ReplyMany, ids: Sequence[str]) -> ReplyResult:
        """``reply`` (``ack``, ``nack`` or ``ext``) for every id in one call and one group commit
        on the node (a pylmq extension: Erlang LMQ answers unknown_method). Ids that name no
        message in processing come back in ``not_found``; at most 10,000 ids."""
        return await self._call(proto.reply_many(queue, reply, ids))

    async def delete(self, queue: str) -> None:
        await self._call(proto.delete(queue))

    # -- pylmq's extensions: push options, peek, dead letters, virtual queues -------------------

    async def push_with(self, queue: str, content: Any, options: PushOptions | None = None) -> dict[str, str]:
        """Push with per-message options (:class:`PushOptions`: delay, ttl, retry, interval,
        priority, once); ``{queue: id}``, one entry per queue pushed (a virtual queue pushes to
        each of its queues). :class:`~pylmq.errors.InvalidOptions` names a bad option."""
        return await self._call(proto.push_with(queue, content, options))

    async def peek(
        self, queue: str, after: str | None = None, n: int | None = None, body: bool = False
    ) -> list[dict[str, Any]]:
        """Up to ``n`` (default 100, at most 1000) of the queue's records after the id
        ``after``, in order, without delivering them: id, state, retry, attempts, ts, expires,
        priority, size, type, content_type, ``dead`` for a dead letter, the body when asked."""
        return await self._call(proto.peek(queue, after, n, body))

    async def requeue(self, dlq: str, n: int | None = None, to: str | None = None) -> int:
        """Move up to ``n`` (default 100) dead letters of ``dlq`` back to their origin queue, or
        to ``to``, as new messages; the count moved."""
        return await self._call(proto.requeue(dlq, n, to))

    async def virtual_queues(self) -> dict[str, list[str]]:
        """Every virtual queue and the queues it binds."""
        return await self._call(proto.virtual_queues())

    async def get_virtual(self, name: str) -> list[str]:
        """The queues a virtual queue binds (:class:`~pylmq.errors.NotFound` when none)."""
        return await self._call(proto.get_virtual(name))

    async def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        """Bind (or rebind) virtual queue ``name`` to ``queues`` (1 to 64 real queues)."""
        await self._call(proto.set_virtual(name, queues))

    async def delete_virtual(self, name: str) -> None:
        await self._call(proto.delete_virtual(name))

    # -- properties (keys pack, retry, timeout; seconds) --------------------------------------------

    async def update_props(self, queue: str, props: Mapping[str, Any] | None = None) -> None:
        """Merge ``props`` into the queue's own properties; without ``props``, reset them."""
        await self._call(proto.update_props(queue, props))

    async def set_default_props(self, defaults: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        await self._call(proto.set_default_props(defaults))

    async def get_default_props(self) -> list[tuple[str, dict[str, Any]]]:
        return await self._call(proto.get_default_props())
