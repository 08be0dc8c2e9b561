"""Client drivers of the Python load generator: one small async API over four protocols.

Each driver is one connection (a channel for AMQP) and speaks its protocol directly, with as
little client-side work as possible so that the generator measures the server:

- ``rpc``: LMQ's MessagePack-RPC over a raw asyncio protocol; requests from concurrent callers
  on one connection are pipelined (matched by msgid). ``oldspec`` packs the msgpack of before
  str8/bin (strings and bytes both as raw), the only one the original LMQ's msgpack-erlang 0.2.3
  parses: it closes the connection on a str8 (a 36-character message id) or a bin.
- ``http``: LMQ's HTTP API over a raw keep-alive connection (one request at a time).
- ``amqp``: RabbitMQ through aio-pika: durable queues, persistent messages with publisher
  confirms, consumers with manual ack and a prefetch window.
- ``redis``: a Redis stream per queue with one consumer group: XADD, XREADGROUP, XACK + XDEL,
  in RESP written directly, replies parsed by hiredis (redis-py's own client cost more CPU per
  message than Redis did).
- ``qs-tcp``, ``qs-udp``: queue_server's JSON protocol (produce with a retry interval, consume,
  confirm by msg_id), one request at a time per connection or socket.
- ``sqs``: Amazon SQS's JSON protocol (what current SDKs send) over a raw keep-alive
  connection, with a fixed SigV4 ``Authorization`` header that names the service (moto's
  server routes a request by it; neither it nor pylmq checks signatures by default, so the
  generator spends no CPU on signing); a server that closes the connection after an answer
  (moto's) is dialled again for the next request.
- ``pg``: no LMQ at all: the plain ``FOR UPDATE SKIP LOCKED`` queue on PostgreSQL through asyncpg
  (bench/pg.py's baseline), one connection, autocommit: an INSERT, an UPDATE of the first due
  row chosen by a locking sub-select (its visibility deadline pushed on), a DELETE.
  ``pg-psycopg``: the same statements through psycopg 3 (async, server-side prepared).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
from typing import Any

import msgpack

__all__ = ["DRIVERS", "Driver"]


class Driver:
    async def connect(self) -> None:
        raise NotImplementedError

    async def push(self, queue: str, body: bytes) -> None:
        raise NotImplementedError

    async def pull(self, queue: str, timeout: float) -> Any | None:
        """A handle of the delivered message, or None when nothing came within ``timeout``."""
        raise NotImplementedError

    async def probe_pull(self, queue: str) -> Any | None:
        """One pull that answers at once (workload 5)."""
        return await self.pull(queue, 0)

    async def ack(self, queue: str, handle: Any) -> None:
        raise NotImplementedError

    async def push_many(self, queue: str, bodies: list[bytes]) -> None:
        """One request that pushes every body (SQS's SendMessageBatch)."""
        raise NotImplementedError

    async def pull_many(self, queue: str, count: int) -> list[Any]:
        """One request that takes up to ``count`` messages at once (no wait): their handles."""
        raise NotImplementedError

    async def ack_many(self, queue: str, handles: list[Any]) -> None:
        raise NotImplementedError

    async def delete(self, queue: str) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


# -- MessagePack-RPC -----------------------------------------------------------------------------


class _RpcProtocol(asyncio.Protocol):
    def __init__(self) -> None:
        self.unpacker = msgpack.Unpacker(raw=False, use_list=True)
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        for msg in self.unpacker:
            fut = self.waiting.pop(msg[1], None)
            if fut is not None and not fut.done():
                if msg[2] is not None:
                    fut.set_exception(RuntimeError(f"rpc error: {msg[2]!r}"))
                else:
                    fut.set_result(msg[3])

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionError("connection closed")
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(self.lost)
        self.waiting.clear()


class RpcDriver(Driver):
    def __init__(self, host: str, port: int, *, oldspec: bool = False) -> None:
        self.addr = (host, port)
        self.proto: _RpcProtocol | None = None
        self.msgid = 0
        # use_bin_type=False is also what keeps msgpack-python from packing str8.
        self.packer = msgpack.Packer(use_bin_type=not oldspec)

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, self.proto = await loop.create_connection(_RpcProtocol, *self.addr)

    async def call(self, method: str, params: list[Any]) -> Any:
        proto = self.proto
        assert proto is not None and proto.transport is not None
        if proto.lost is not None:
            raise proto.lost
        self.msgid = (self.msgid + 1) & 0x7FFFFFFF
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        proto.waiting[self.msgid] = fut
        proto.transport.write(self.packer.pack([0, self.msgid, method, params]))
        return await fut

    async def push(self, queue: str, body: bytes) -> None:
        await self.call("push", [queue, body])

    async def pull(self, queue: str, timeout: float) -> Any | None:
        got = await self.call("pull", [queue, timeout])
        return None if got == "empty" else got["id"]

    async def ack(self, queue: str, handle: Any) -> None:
        await self.call("done", [queue, handle])

    async def delete(self, queue: str) -> None:
        await self.call("delete", [queue])

    async def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()


# -- HTTP ------------------------------------------------------------------------------------------


class HttpDriver(Driver):
    def __init__(self, host: str, port: int) -> None:
        self.addr = (host, port)
        self.host_header = f"{host}:{port}"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(*self.addr)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, dict[bytes, bytes]]:
        assert self.reader is not None and self.writer is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host_header}\r\n"
        if body or method == "POST":
            head += f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw[:-4].split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip()
        n = int(headers.get(b"content-length", b"0"))
        if n:
            await self.reader.readexactly(n)
        return status, headers

    async def push(self, queue: str, body: bytes) -> None:
        status, _ = await self.request("POST", f"/messages/{queue}", body)
        if status != 200:
            raise RuntimeError(f"push answered {status}")

    async def pull(self, queue: str, timeout: float) -> Any | None:
        t = int(timeout) if float(timeout).is_integer() else timeout
        status, headers = await self.request("GET", f"/messages/{queue}?t={t}")
        mid = headers.get(b"x-lmq-message-id")
        if mid is None and status not in (200, 204):
            raise RuntimeError(f"pull answered {status}")
        return None if mid is None else mid.decode()

    async def ack(self, queue: str, handle: Any) -> None:
        status, _ = await self.request("POST", f"/messages/{queue}/{handle}?reply=ack")
        if status not in (200, 204):
            raise RuntimeError(f"ack answered {status}")

    async def delete(self, queue: str) -> None:
        await self.request("DELETE", f"/queues/{queue}")

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()


# -- queue_server's JSON protocol --------------------------------------------------------------------

# A produce with a retry interval: an unconfirmed delivery comes back, so the cycle's confirm
# does real work (retry 0 would be at most once, with nothing left to confirm).
_QS_RETRY = 60


class _QsDriver(Driver):
    """queue_server's protocol: produce, consume, confirm; one request at a time per driver."""

    async def call(self, obj: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    async def push(self, queue: str, body: bytes) -> None:
        ans = await self.call({"action": 1, "queue": queue, "data": body.decode(), "retry": _QS_RETRY})
        if ans.get("code") != 0:
            raise RuntimeError(f"produce answered {ans}")

    async def pull(self, queue: str, timeout: float) -> Any | None:
        # queue_server's consume never waits: the generator's consume lanes poll.
        ans = await self.call({"action": 2, "queue": queue})
        if ans.get("code") != 0:
            raise RuntimeError(f"consume answered {ans}")
        return ans.get("msg_id")

    async def ack(self, queue: str, handle: Any) -> None:
        ans = await self.call({"action": 3, "queue": queue, "msg_id": handle})
        if ans.get("confirmed") is not True:
            raise RuntimeError(f"confirm answered {ans}")

    async def delete(self, queue: str) -> None:
        pass  # the protocol has no delete; each run uses fresh queue names


class QsTcpDriver(_QsDriver):
    def __init__(self, host: str, port: int) -> None:
        self.addr = (host, port)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(*self.addr)

    async def call(self, obj: dict[str, Any]) -> dict[str, Any]:
        assert self.reader is not None and self.writer is not None
        self.writer.write(json.dumps(obj).encode())
        answer: dict[str, Any] = json.loads(await self.reader.readline())  # one answer per line
        return answer

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(Exception):
                await self.writer.wait_closed()


class _QsUdpProtocol(asyncio.DatagramProtocol):
    def __init__(self) -> None:
        self.waiting: asyncio.Future[bytes] | None = None

    def datagram_received(self, data: bytes, addr: Any) -> None:
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_result(data)


class QsUdpDriver(_QsDriver):
    TIMEOUT = 5.0  # a lost datagram fails the lane: on loopback nothing should be lost

    def __init__(self, host: str, port: int) -> None:
        self.addr = (host, port)
        self.transport: asyncio.DatagramTransport | None = None
        self.proto: _QsUdpProtocol | None = None

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        self.transport, self.proto = await loop.create_datagram_endpoint(_QsUdpProtocol, remote_addr=self.addr)

    async def call(self, obj: dict[str, Any]) -> dict[str, Any]:
        assert self.transport is not None and self.proto is not None
        fut = self.proto.waiting = asyncio.get_running_loop().create_future()
        self.transport.sendto(json.dumps(obj).encode())
        answer: dict[str, Any] = json.loads(await asyncio.wait_for(fut, self.TIMEOUT))
        return answer

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


# -- Amazon SQS (the JSON protocol) ------------------------------------------------------------------


_SQS_AUTH = (
    "AWS4-HMAC-SHA256 Credential=bench/20260101/us-east-1/sqs/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-target, Signature=" + "0" * 64
)


class SqsDriver(Driver):
    """SQS's actions as JSON requests; each lane's queue is created at its first use."""

    def __init__(self, host: str, port: int) -> None:
        self.addr = (host, port)
        self.host_header = f"{host}:{port}"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.urls: dict[str, str] = {}

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(*self.addr)

    async def call(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        if self.writer is None:
            await self.connect()
        assert self.reader is not None and self.writer is not None
        body = json.dumps(params).encode()
        head = (
            f"POST / HTTP/1.1\r\nHost: {self.host_header}\r\nContent-Type: application/x-amz-json-1.0\r\n"
            f"X-Amz-Target: AmazonSQS.{action}\r\nAuthorization: {_SQS_AUTH}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw[:-4].split(b"\r\n")
        version, status = lines[0].split(b" ", 2)[:2]
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            headers[k.strip().lower()] = v.strip().lower() if k.strip().lower() == b"connection" else v.strip()
        n = headers.get(b"content-length")
        answer = await (self.reader.readexactly(int(n)) if n is not None else self.reader.read())
        if (
            n is None
            or headers.get(b"connection") == b"close"
            or (version == b"HTTP/1.0" and headers.get(b"connection") != b"keep-alive")
        ):
            await self.close()  # the next request dials again
        if status != b"200":
            raise RuntimeError(f"{action} answered {status.decode()}: {answer[:200]!r}")
        got: dict[str, Any] = json.loads(answer) if answer else {}
        return got

    async def _url(self, queue: str) -> str:
        url = self.urls.get(queue)
        if url is None:
            url = self.urls[queue] = (await self.call("CreateQueue", {"QueueName": queue}))["QueueUrl"]
        return url

    async def push(self, queue: str, body: bytes) -> None:
        await self.call("SendMessage", {"QueueUrl": await self._url(queue), "MessageBody": body.decode()})

    async def pull(self, queue: str, timeout: float) -> Any | None:
        msgs = await self.pull_many(queue, 1, int(timeout))
        return msgs[0] if msgs else None

    async def ack(self, queue: str, handle: Any) -> None:
        await self.call("DeleteMessage", {"QueueUrl": await self._url(queue), "ReceiptHandle": handle})

    async def push_many(self, queue: str, bodies: list[bytes]) -> None:
        entries = [{"Id": str(i), "MessageBody": b.decode()} for i, b in enumerate(bodies)]
        got = await self.call("SendMessageBatch", {"QueueUrl": await self._url(queue), "Entries": entries})
        if got.get("Failed"):
            raise RuntimeError(f"SendMessageBatch failed: {got['Failed'][:1]}")

    async def pull_many(self, queue: str, count: int, wait: int = 0) -> list[Any]:
        params = {"QueueUrl": await self._url(queue), "MaxNumberOfMessages": count, "WaitTimeSeconds": wait}
        got = await self.call("ReceiveMessage", params)
        return [m["ReceiptHandle"] for m in got.get("Messages", ())]

    async def ack_many(self, queue: str, handles: list[Any]) -> None:
        entries = [{"Id": str(i), "ReceiptHandle": h} for i, h in enumerate(handles)]
        got = await self.call("DeleteMessageBatch", {"QueueUrl": await self._url(queue), "Entries": entries})
        if got.get("Failed"):
            raise RuntimeError(f"DeleteMessageBatch failed: {got['Failed'][:1]}")

    async def delete(self, queue: str) -> None:
        await self.call("DeleteQueue", {"QueueUrl": await self._url(queue)})
        self.urls.pop(queue, None)

    async def close(self) -> None:
        writer, self.writer, self.reader = self.writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


# -- RabbitMQ (AMQP 0-9-1) ---------------------------------------------------------------------------

_amqp_connections: dict[str, Any] = {}


class AmqpDriver(Driver):
    PREFETCH = 64

    def __init__(self, url: str) -> None:
        self.url = url
        self.channel: Any = None
        self.queues: dict[str, Any] = {}
        self.buffers: dict[str, asyncio.Queue[Any]] = {}

    async def connect(self) -> None:
        import aio_pika

        # One connection per worker process, one channel per driver (RabbitMQ's usual shape).
        conn = _amqp_connections.get(self.url)
        if conn is None:
            conn = await aio_pika.connect(self.url)
            _amqp_connections[self.url] = conn
        self.channel = await conn.channel(publisher_confirms=True)
        await self.channel.set_qos(prefetch_count=self.PREFETCH)

    async def _queue(self, name: str) -> Any:
        q = self.queues.get(name)
        if q is None:
            q = await self.channel.declare_queue(name, durable=True)
            self.queues[name] = q
        return q

    async def push(self, queue: str, body: bytes) -> None:
        import aio_pika

        await self._queue(queue)
        msg = aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT)
        await self.channel.default_exchange.publish(msg, routing_key=queue)

    async def pull(self, queue: str, timeout: float) -> Any | None:
        buf = self.buffers.get(queue)
        if buf is None:
            buf = asyncio.Queue()
            self.buffers[queue] = buf
            q = await self._queue(queue)
            await q.consume(buf.put, no_ack=False)
        # A consumer is pushed messages; "nothing within t" needs some wait even for t=0.
        try:
            return await asyncio.wait_for(buf.get(), max(timeout, 0.5))
        except TimeoutError:
            return None

    async def probe_pull(self, queue: str) -> Any | None:
        q = await self._queue(queue)
        return await q.get(no_ack=False, fail=False)

    async def ack(self, queue: str, handle: Any) -> None:
        await handle.ack()

    async def delete(self, queue: str) -> None:
        await self.channel.queue_delete(queue)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self.channel.close()
        for url in list(_amqp_connections):
            conn = _amqp_connections.pop(url)
            with contextlib.suppress(Exception):
                await conn.close()


# -- Redis streams ---------------------------------------------------------------------------------

_GROUP = b"bench"


def _resp(*args: bytes) -> bytes:
    """One command in RESP (an array of bulk strings)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out += [b"$%d\r\n" % len(a), a, b"\r\n"]
    return b"".join(out)


class _RespProtocol(asyncio.Protocol):
    """Replies in the order the commands went (Redis answers a connection in order); parsed by
    hiredis's C reader."""

    def __init__(self) -> None:
        import hiredis

        self.reader = hiredis.Reader()
        self.error_type: type = hiredis.ReplyError
        self.waiting: collections.deque[asyncio.Future[Any]] = collections.deque()
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        while (reply := self.reader.gets()) is not False:
            fut = self.waiting.popleft()
            if not fut.done():
                fut.set_result(reply)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ConnectionError("connection closed")
        for fut in self.waiting:
            if not fut.done():
                fut.set_exception(self.lost)
        self.waiting.clear()


class RedisDriver(Driver):
    """A stream per queue with one consumer group: XADD, XREADGROUP, XACK + XDEL (pipelined).

    RESP written directly and replies parsed by hiredis: redis-py's asyncio client spends several
    times Redis's own CPU per command, which made every Redis cell measure the client."""

    _seq = 0

    def __init__(self, host: str, port: int) -> None:
        self.addr = (host, port)
        self.proto: _RespProtocol | None = None
        self.groups: set[str] = set()
        RedisDriver._seq += 1
        self.consumer = b"c%d-%d" % (os.getpid(), RedisDriver._seq)

    async def connect(self) -> None:
        loop = asyncio.get_running_loop()
        _, self.proto = await loop.create_connection(_RespProtocol, *self.addr)

    def _send(self, *commands: bytes) -> list[asyncio.Future[Any]]:
        proto = self.proto
        assert proto is not None and proto.transport is not None
        if proto.lost is not None:
            raise proto.lost
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in commands]
        proto.waiting.extend(futs)
        proto.transport.write(b"".join(commands))
        return futs

    async def call(self, *args: bytes) -> Any:
        (fut,) = self._send(_resp(*args))
        reply = await fut
        assert self.proto is not None
        if isinstance(reply, self.proto.error_type):
            raise RuntimeError(f"redis {args[0].decode()}: {reply}")
        return reply

    async def _group(self, queue: str) -> None:
        if queue in self.groups:
            return
        try:
            await self.call(b"XGROUP", b"CREATE", queue.encode(), _GROUP, b"0", b"MKSTREAM")
        except RuntimeError as e:
            if "BUSYGROUP" not in str(e):
                raise
        self.groups.add(queue)

    async def push(self, queue: str, body: bytes) -> None:
        await self._group(queue)
        await self.call(b"XADD", queue.encode(), b"*", b"b", body)

    async def pull(self, queue: str, timeout: float) -> Any | None:
        await self._group(queue)
        block = [b"BLOCK", b"%d" % int(timeout * 1000)] if timeout > 0 else []
        got = await self.call(
            b"XREADGROUP", b"GROUP", _GROUP, self.consumer, b"COUNT", b"1", *block, b"STREAMS", queue.encode(), b">"
        )
        if not got or not got[0][1]:
            return None
        return got[0][1][0][0]

    async def ack(self, queue: str, handle: Any) -> None:
        q = queue.encode()
        for reply in await asyncio.gather(*self._send(_resp(b"XACK", q, _GROUP, handle), _resp(b"XDEL", q, handle))):
            if reply != 1:
                raise RuntimeError(f"redis ack of {handle!r} answered {reply!r}")

    async def delete(self, queue: str) -> None:
        await self.call(b"DEL", queue.encode())
        self.groups.discard(queue)

    async def close(self) -> None:
        if self.proto is not None and self.proto.transport is not None:
            self.proto.transport.close()


# -- the plain SKIP LOCKED queue on PostgreSQL ------------------------------------------------------

PG_TABLE = "bench_queue"
PG_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {PG_TABLE} (
    id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue  text NOT NULL,
    vt     timestamptz NOT NULL DEFAULT now(),  -- visible from: the deadline of a delivery
    body   bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS {PG_TABLE}_due ON {PG_TABLE} (queue, vt);
"""


_PG_PUSH = f"INSERT INTO {PG_TABLE} (queue, body) VALUES ($1, $2)"
_PG_PULL = (
    f"UPDATE {PG_TABLE} SET vt = now() + interval '30 seconds' WHERE id = ("
    f"SELECT id FROM {PG_TABLE} WHERE queue = $1 AND vt <= now() ORDER BY vt, id "
    "LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
)
_PG_ACK = f"DELETE FROM {PG_TABLE} WHERE id = $1"
_PG_DELETE = f"DELETE FROM {PG_TABLE} WHERE queue = $1"


class PgDriver(Driver):
    """What an application writes on PostgreSQL without a broker: one round trip a step."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn: Any = None

    async def connect(self) -> None:
        import asyncpg  # a dependency of pylmq's postgres store; only this driver needs it here

        self.conn = await asyncpg.connect(self.dsn)

    async def push(self, queue: str, body: bytes) -> None:
        await self.conn.execute(_PG_PUSH, queue, body)

    async def pull(self, queue: str, timeout: float) -> Any | None:
        return await self.conn.fetchval(_PG_PULL, queue)

    async def ack(self, queue: str, handle: Any) -> None:
        await self.conn.execute(_PG_ACK, handle)

    async def delete(self, queue: str) -> None:
        await self.conn.execute(_PG_DELETE, queue)

    async def close(self) -> None:
        if self.conn is not None:
            await self.conn.close()


def _psycopg_sql(sql: str) -> str:
    # psycopg's placeholders are %s; each statement above takes its parameters in order.
    return sql.replace("$1", "%s").replace("$2", "%s")


class PsycopgDriver(PgDriver):
    """:class:`PgDriver`'s statements through psycopg 3 (the ``bench`` extra), prepared on the
    server from their first use, as asyncpg does."""

    async def connect(self) -> None:
        import psycopg

        self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, prepare_threshold=0)

    async def _run(self, sql: str, *args: Any) -> Any:
        cur = await self.conn.execute(_psycopg_sql(sql), args)
        return cur

    async def push(self, queue: str, body: bytes) -> None:
        await self._run(_PG_PUSH, queue, body)

    async def pull(self, queue: str, timeout: float) -> Any | None:
        row = await (await self._run(_PG_PULL, queue)).fetchone()
        return None if row is None else row[0]

    async def ack(self, queue: str, handle: Any) -> None:
        await self._run(_PG_ACK, handle)

    async def delete(self, queue: str) -> None:
        await self._run(_PG_DELETE, queue)


def make_driver(kind: str, addr: list[Any] | str, *, rpc_oldspec: bool = False) -> Driver:
    """A driver of ``kind``; ``rpc_oldspec`` makes an ``rpc`` one pack old-spec msgpack."""
    if kind == "rpc":
        return RpcDriver(addr[0], int(addr[1]), oldspec=rpc_oldspec)
    if kind == "http":
        return HttpDriver(addr[0], int(addr[1]))
    if kind == "amqp":
        assert isinstance(addr, str)
        return AmqpDriver(addr)
    if kind == "redis":
        return RedisDriver(addr[0], int(addr[1]))
    if kind == "qs-tcp":
        return QsTcpDriver(addr[0], int(addr[1]))
    if kind == "qs-udp":
        return QsUdpDriver(addr[0], int(addr[1]))
    if kind == "sqs":
        return SqsDriver(addr[0], int(addr[1]))
    if kind in ("pg", "pg-psycopg"):
        assert isinstance(addr, str)
        return PgDriver(addr) if kind == "pg" else PsycopgDriver(addr)
    raise ValueError(f"unknown driver {kind!r}")


DRIVERS = ("rpc", "http", "amqp", "redis", "qs-tcp", "qs-udp", "sqs", "pg", "pg-psycopg")
