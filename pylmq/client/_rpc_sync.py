"""The blocking MessagePack-RPC client: one socket, one call at a time.

Like :class:`~pylmq.client.HttpClient` it runs no event loop and no thread, connects on first
use, reconnects after a fork and pickles as its configuration only.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from pylmq.client import _rpc_proto as proto
from pylmq.client._closing import Closing
from pylmq.client._errors import error_from_rpc
from pylmq.client._http import read_timeout
from pylmq.client._message import ClaimResult, ReplyMany, ReplyResult, RpcMessage
from pylmq.client._options import PushOptions
from pylmq.client._urls import DEFAULT_RPC_PORT, parse_rpc_addresses
from pylmq.errors import ProtocolError, Unreachable
from pylmq.wire import msgpack_rpc as wire

__all__ = ["RpcClient"]

T = TypeVar("T")

_RECV = 256 * 1024


class RpcClient(Closing):
    """LMQ's MessagePack-RPC API with blocking calls; the same methods as
    :class:`~pylmq.client.AsyncRpcClient`. Calls from several threads are serialised."""

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
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._sock_pid = 0
        self._decoder = wire.Decoder()
        self._msgids = itertools.count()

    def __reduce__(self) -> tuple[Any, ...]:
        host, port = self.addresses[0]
        return (_rebuild_rpc, (host, port, self.addresses[1:], self.request_timeout, self.connect_timeout))

    @property
    def address(self) -> tuple[str, int]:
        return self.addresses[self._current]

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None and self._sock_pid == os.getpid():
            sock.close()

    def _connect(self) -> socket.socket:
        failures: list[str] = []
        n = len(self.addresses)
        for step in range(n):
            index = (self._current + step) % n
            host, port = self.addresses[index]
            try:
                sock = socket.create_connection((host, port), timeout=self.connect_timeout)
            except OSError as e:
                failures.append(f"{host}:{port}: {type(e).__name__}: {e}")
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock, self._sock_pid, self._current = sock, os.getpid(), index
            self._decoder = wire.Decoder()
            return sock
        raise Unreachable("no node could be connected to: " + "; ".join(failures))

    def _call(self, call: proto.RpcCall[T]) -> T:
        with self._lock:
            response = self._exchange(call)
        if response.error is not None:
            raise error_from_rpc(response.error)
        return call.decode(response.result)

    def _exchange(self, call: proto.RpcCall[Any]) -> wire.Response:
        if self._sock is not None and self._sock_pid != os.getpid():
            self._drop()
        sock = self._sock or self._connect()
        msgid = next(self._msgids) & wire.MAX_MSGID
        host, port = self.addresses[self._current]
        try:
            sock.settimeout(read_timeout(call.server_wait, self.request_timeout))
            sock.sendall(wire.encode_request(msgid, call.method, call.params))
            while True:
                data = sock.recv(_RECV)
                if not data:
                    raise ConnectionResetError("closed by the node")
                for event in self._decoder.feed(data):
                    if isinstance(event, wire.Response) and event.msgid == msgid:
                        return event
                    if isinstance(event, wire.Invalid) and event.fatal:
                        raise ProtocolError(f"msgpack-rpc {host}:{port}: {event.error.detail}")
        except (OSError, ProtocolError) as e:
            # The stream is no longer in step with our calls: never reuse it.
            self._drop()
            if isinstance(e, ProtocolError):
                raise
            raise Unreachable(f"msgpack-rpc {host}:{port}: {call.method}: {type(e).__name__}: {e}") from e

    # -- messages ----------------------------------------------------------------------------------

    def push(self, queue: str, content: Any) -> str:
        return self._call(proto.push(queue, content))

    def push_all(self, regex: str, content: Any) -> str:
        return self._call(proto.push_all(regex, content))

    def pull(self, queue: str, timeout: float | None = None) -> RpcMessage | None:
        return self._call(proto.pull(queue, timeout))

    def pull_any(self, regex: str, timeout: float | None = None) -> RpcMessage | None:
        return self._call(proto.pull_any(regex, timeout))

    def push_many(self, queue: str, contents: Sequence[Any]) -> int:
        return self._call(proto.push_many(queue, contents))

    def pull_many(
        self, queue: str, count: int, timeout: float | None = None, holder: str | None = None
    ) -> list[RpcMessage]:
        return self._call(proto.pull_many(queue, count, timeout, holder))

    def done(self, queue: str, msg_id: str) -> None:
        self._call(proto.done(queue, msg_id))

    def retain(self, queue: str, msg_id: str) -> None:
        self._call(proto.retain(queue, msg_id))

    def release(self, queue: str, msg_id: str) -> None:
        self._call(proto.release(queue, msg_id))

    ack = done
    ext = retain
    nack = release

    def claim(self, queue: str, ids: Sequence[str] = (), *, holder: str | None = None) -> ClaimResult[RpcMessage]:
        """See the asyncio client's ``claim``."""
        return self._call(proto.claim(queue, ids, holder))

    def reply_many(self, queue: str, reply: ReplyMany, ids: Sequence[str]) -> ReplyResult:
        """See :meth:`AsyncRpcClient.reply_many <pylmq.client.AsyncRpcClient.reply_many>`."""
        return self._call(proto.reply_many(queue, reply, ids))

    def delete(self, queue: str) -> None:
        self._call(proto.delete(queue))

    # -- pylmq's extensions: push options, peek, dead letters, virtual queues -------------------

    def push_with(self, queue: str, content: Any, options: PushOptions | None = None) -> dict[str, str]:
        """Push with per-message options (:class:`PushOptions`: delay, ttl, retry, interval,
        priority, once); ``{queue: id}``, one entry per queue pushed (a virtual queue pushes to
        each of its queues). :class:`~pylmq.errors.InvalidOptions` names a bad option."""
        return self._call(proto.push_with(queue, content, options))

    def peek(
        self, queue: str, after: str | None = None, n: int | None = None, body: bool = False
    ) -> list[dict[str, Any]]:
        """Up to ``n`` (default 100, at most 1000) of the queue's records after the id
        ``after``, in order, without delivering them: id, state, retry, attempts, ts, expires,
        priority, size, type, content_type, ``dead`` for a dead letter, the body when asked."""
        return self._call(proto.peek(queue, after, n, body))

    def requeue(self, dlq: str, n: int | None = None, to: str | None = None) -> int:
        """Move up to ``n`` (default 100) dead letters of ``dlq`` back to their origin queue, or
        to ``to``, as new messages; the count moved."""
        return self._call(proto.requeue(dlq, n, to))

    def virtual_queues(self) -> dict[str, list[str]]:
        """Every virtual queue and the queues it binds."""
        return self._call(proto.virtual_queues())

    def get_virtual(self, name: str) -> list[str]:
        """The queues a virtual queue binds (:class:`~pylmq.errors.NotFound` when none)."""
        return self._call(proto.get_virtual(name))

    def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        """Bind (or rebind) virtual queue ``name`` to ``queues`` (1 to 64 real queues)."""
        self._call(proto.set_virtual(name, queues))

    def delete_virtual(self, name: str) -> None:
        self._call(proto.delete_virtual(name))

    # -- properties (keys pack, retry, timeout; seconds) --------------------------------------------

    def update_props(self, queue: str, props: Mapping[str, Any] | None = None) -> None:
        self._call(proto.update_props(queue, props))

    def set_default_props(self, defaults: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
        self._call(proto.set_default_props(defaults))

    def get_default_props(self) -> list[tuple[str, dict[str, Any]]]:
        return self._call(proto.get_default_props())


def _rebuild_rpc(
    host: str,
    port: int,
    fallbacks: list[tuple[str, int]],
    request_timeout: float | None,
    connect_timeout: float,
) -> RpcClient:
    return RpcClient(host, port, fallbacks=fallbacks, request_timeout=request_timeout, connect_timeout=connect_timeout)
