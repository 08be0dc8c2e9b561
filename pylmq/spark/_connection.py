"""The few node operations the data source needs, over either API, through pylmq.client.

Each Spark task (and the driver-side stream reader) opens its own asyncio client when it
starts work: nothing here is pickled. Requests are pipelined: up to ``opts.pipeline`` are in
flight at once (concurrent keep-alive connections over HTTP, msgid-matched requests on one
connection over MessagePack-RPC).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from functools import partial
from types import TracebackType
from typing import Any, TypeVar

from pylmq.client import (
    AsyncHttpClient,
    AsyncRpcClient,
    ClaimResult,
    Message,
    ReplyResult,
    RpcMessage,
    parse_rpc_addresses,
)
from pylmq.errors import (
    BadRequest,
    LMQError,
    MessageNotFound,
    NotFound,
    NotSupported,
    QueueNotFound,
    UnknownMethod,
)
from pylmq.spark._options import LmqOptions
from pylmq.spark._rows import Push, Row, message_row

__all__ = ["REPLY_CHUNK", "NodeConnection", "Reply", "reply_all", "run_window"]

log = logging.getLogger("pylmq.spark")

log = logging.getLogger("pylmq.spark")

# What a node without pylmq's batch extension answers a batch request: an HTTP 404 for the
# unknown path (Erlang LMQ), or unknown_method over MessagePack-RPC.
_NO_EXTENSION = (NotFound, UnknownMethod)

T = TypeVar("T")
REPLY_CHUNK = 5000
"""Ids per reply_many or claim request: half the node's limit, a body of about 200 kB."""
Reply = str
"""``ack``, ``nack`` or ``ext``."""


class NodeConnection:
    """A connection to the node(s) of ``opts.urls`` (the first that answers, then the next)."""

    def __init__(self, opts: LmqOptions) -> None:
        self.opts = opts
        self._batch_api = True
        self.reply_api = True
        """Whether the node serves pylmq's reply_many and claim (until it says it does not)."""
        self.queue_size: int | None = None
        """Messages ``opts.queue`` held after the last pull-many over HTTP (``None``: unknown)."""
        self.holder: str | None = None
        """The holder tag pull-many requests carry (a stream reader's), for :meth:`claim_holder`."""
        self.holder_api = True
        """Whether the node takes holder tags (until it refuses one: a pylmq node before them)."""
        self._http: AsyncHttpClient | None = None
        self._rpc: AsyncRpcClient | None = None
        if opts.api == "http":
            self._http = AsyncHttpClient(
                list(opts.urls), request_timeout=opts.request_timeout, max_connections=opts.pipeline + 4
            )
        else:
            (host, port), *rest = parse_rpc_addresses(list(opts.urls))
            self._rpc = AsyncRpcClient(host, port, fallbacks=rest, request_timeout=opts.request_timeout)

    async def __aenter__(self) -> NodeConnection:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
        if self._rpc is not None:
            await self._rpc.close()

    async def pull(self, timeout: float) -> Row | None:
        """One message of ``opts.queue`` (or of any queue matching ``opts.qre``) as a row."""
        if self.batches:
            # A pull-many of one costs what a pull costs, and says how many the queue holds.
            rows = await self.pull_batch(1, timeout)
            if rows is not None:
                return rows[0] if rows else None
        msg: Message | RpcMessage | None
        queue, qre = self.opts.queue, self.opts.qre
        if self._http is not None:
            if queue is not None:
                msg = await self._http.pull(queue, timeout, cf="msgpack")
            else:
                assert qre is not None
                msg = await self._http.pull_any(qre, timeout, cf="msgpack")
        else:
            assert self._rpc is not None
            if queue is not None:
                msg = await self._rpc.pull(queue, timeout)
            else:
                assert qre is not None
                msg = await self._rpc.pull_any(qre, timeout)
        return None if msg is None else message_row(msg)

    @property
    def batches(self) -> bool:
        """Whether pulls and pushes go many per request: for one queue (not ``qre``, whose
        pull-any and fan-out push have no batch form), on a node that has pylmq's batch
        extension (an Erlang LMQ node has not: the first refusal switches to one per request)."""
        return self.opts.qre is None and self._batch_api

    def _no_batch_api(self, what: str, e: LMQError) -> None:
        if self._batch_api:
            log.info("lmq: the node has no %s (%s): going on with one message per request", what, e)
        self._batch_api = False

    async def pull_batch(self, count: int, timeout: float) -> list[Row] | None:
        """Up to ``count`` messages of ``opts.queue`` in one request (pylmq's pull-many);
        waits up to ``timeout`` for the first. Notes the queue's size in :attr:`queue_size`.
        ``None`` when the node has no pull-many (then :attr:`batches` is false)."""
        queue = self.opts.queue
        assert queue is not None
        msgs: list[Message] | list[RpcMessage]
        holder = self.holder if self.holder_api else None
        try:
            if self._http is not None:
                msgs = await self._http.pull_many(queue, count, timeout, holder)
                self.queue_size = getattr(msgs, "queue_size", None)
            else:
                assert self._rpc is not None
                msgs = await self._rpc.pull_many(queue, count, timeout, holder)
        except _NO_EXTENSION as e:
            self._no_batch_api("pull-many", e)
            return None
        except BadRequest as e:
            # An RPC node before holder tags refuses the 4th argument; one over HTTP ignores
            # the query parameter (its claim by holder is refused below instead).
            if holder is None:
                raise
            self._no_holder_api(e)
            return await self.pull_batch(count, timeout)
        return [message_row(m) for m in msgs]

    def _no_holder_api(self, e: LMQError) -> None:
        if self.holder_api:
            log.warning(
                "lmq: the node takes no holder tags (%s): a driver killed in a trigger's pull leaves "
                "its messages to the queue's timeout",
                e,
            )
        self.holder_api = False

    async def claim_holder(self, queue: str) -> list[Row] | None:
        """Take back every message of ``queue`` that pull-many calls with :attr:`holder` were
        given and that is still claimable (pylmq's claim by holder), as rows, oldest delivery
        first; ``None`` when the node cannot (no holder tags, no claim)."""
        if self.holder is None or not self.holder_api or not self.reply_api:
            return None
        client: Any = self._http if self._http is not None else self._rpc
        try:
            result: ClaimResult[Any] | None = await self._ids_request(partial(client.claim, queue, holder=self.holder))
        except BadRequest as e:
            self._no_holder_api(e)
            return None
        if result is None:
            return None
        rows = [message_row(m) for m in result.messages]
        if result.later:
            # Past the answer's 16 MiB: the rest by id (a claim by holder again would take the
            # same first ones again).
            rows += (await self.claim(queue, list(result.later)))[0]
        return rows

    async def push_batch(self, queue: str, pushes: Sequence[Push]) -> None:
        """Push to one queue in one request (pylmq's push-many); one by one where the node
        has no push-many."""
        if self._batch_api:
            try:
                if self._http is not None:
                    await self._http.push_many(queue, [(p.content_type, p.body) for p in pushes])
                else:
                    assert self._rpc is not None
                    await self._rpc.push_many(queue, [p.body for p in pushes])
                return
            except _NO_EXTENSION as e:
                self._no_batch_api("push-many", e)
        await run_window(pushes, self.push, self.opts.pipeline)

    async def reply(self, reply: Reply, queue: str, msg_id: str) -> None:
        client: Any = self._http if self._http is not None else self._rpc
        method: Callable[[str, str], Awaitable[None]] = getattr(client, reply)
        await method(queue, msg_id)

    async def reply_many(self, reply: Reply, queue: str, ids: Sequence[str]) -> tuple[list[str], list[str]]:
        """``reply`` for every id of ``queue``, :data:`REPLY_CHUNK` ids per request (pylmq's
        batch extension; one request per id on a node without it, such as Erlang LMQ);
        ``(answered, not_found)``. A queue that is gone has none of them."""
        ok: list[str] = []
        missing: list[str] = []
        client: Any = self._http if self._http is not None else self._rpc
        for i in range(0, len(ids), REPLY_CHUNK):
            chunk = ids[i : i + REPLY_CHUNK]
            if self.reply_api:
                result: ReplyResult | None = await self._ids_request(partial(client.reply_many, queue, reply, chunk))
                if result is not None:
                    ok += result.ok
                    missing += result.not_found
                    continue
                if self.reply_api:  # the queue is gone: none of them is in processing any more
                    missing += chunk
                    continue
            await self._reply_each(reply, queue, chunk, ok, missing)
        return ok, missing

    async def _reply_each(
        self, reply: Reply, queue: str, ids: Sequence[str], ok: list[str], missing: list[str]
    ) -> None:
        async def one(msg_id: str) -> None:
            try:
                await self.reply(reply, queue, msg_id)
            except (MessageNotFound, NotFound):
                missing.append(msg_id)
            else:
                ok.append(msg_id)

        await run_window(ids, one, self.opts.pipeline)

    def _no_reply_api(self, e: LMQError) -> None:
        self.reply_api = False
        log.warning("lmq: the node serves no reply_many or claim (%s): one request per id from now on", e)

    async def claim(self, queue: str, ids: Sequence[str]) -> tuple[list[Row], list[str]]:
        """Take messages of ``queue`` back by id (pylmq's ``claim``), as rows; ``(rows,
        not_found)``. A node that cannot (Erlang LMQ, or pylmq serving an Erlang cluster's
        tables) gives none back: they return by their timeout instead."""
        rows: list[Row] = []
        missing: list[str] = []
        client: Any = self._http if self._http is not None else self._rpc
        pending = list(ids)
        while pending:
            chunk, pending = pending[:REPLY_CHUNK], pending[REPLY_CHUNK:]
            result: ClaimResult[Any] | None = None
            if self.reply_api:
                result = await self._ids_request(partial(client.claim, queue, chunk))
            if result is None:
                missing += chunk
                continue
            rows += [message_row(m) for m in result.messages]
            missing += result.not_found
            # The node stops an answer at 16 MiB (at least one message): ask for the rest again,
            # first, so that rows keep the order of ids. A node claiming none of them would loop.
            if len(result.later) < len(chunk):
                pending[:0] = result.later
            else:
                missing += result.later
        return rows, missing

    async def _ids_request(self, request: Callable[[], Awaitable[T]]) -> T | None:
        """One reply-many or claim request; None when it did nothing for its ids: the queue is
        gone, the node's store cannot (claim on an Erlang cluster's tables), or the node has no
        such extension (Erlang LMQ; :attr:`reply_api` turns off)."""
        try:
            return await request()
        except QueueNotFound:
            return None
        except NotSupported as e:
            log.warning("lmq: the node cannot take messages back by id (%s)", e)
            return None
        except (UnknownMethod, NotFound) as e:
            if isinstance(e, MessageNotFound):
                raise
            self._no_reply_api(e)
            return None

    async def push(self, push: Push) -> None:
        fan_out = self.opts.qre is not None
        if self._http is not None:
            if fan_out:
                await self._http.push_all(push.target, push.body, push.content_type)
            else:
                await self._http.push(push.target, push.body, push.content_type)
            return
        assert self._rpc is not None
        if fan_out:
            await self._rpc.push_all(push.target, push.body)
        else:
            await self._rpc.push(push.target, push.body)

    async def queue_timeout(self, queue: str) -> float | None:
        """The queue's redelivery timeout in seconds; ``None`` when the API cannot say
        (MessagePack-RPC has no per-queue property read)."""
        if self._http is None:
            return None
        props = await self._http.get_props(queue)
        value = props.get("timeout")
        return float(value) if isinstance(value, int | float) else None


async def run_window(items: Iterable[T], op: Callable[[T], Awaitable[None]], window: int) -> None:
    """``op`` on every item with at most ``window`` in flight; the first failure stops the
    feeding, lets what is in flight finish, and is raised."""
    sem = asyncio.Semaphore(window)
    tasks: set[asyncio.Task[None]] = set()
    failure: list[BaseException] = []

    async def one(item: T) -> None:
        try:
            await op(item)
        except BaseException as e:
            failure.append(e)
        finally:
            sem.release()

    it: Iterator[T] = iter(items)
    try:
        for item in it:
            await sem.acquire()
            if failure:
                sem.release()
                break
            task = asyncio.create_task(one(item))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
    finally:
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
    if failure:
        raise failure[0]


async def reply_all(node: NodeConnection, reply: Reply, targets: Iterable[tuple[str, str]]) -> tuple[int, int]:
    """Send ``reply`` for every ``(queue, id)``, many ids a request; ``(done, not_found)``. A
    message that is not found was redelivered (its deadline passed) or answered already: not an
    error for at-least-once, the caller counts it. Any other failure is raised."""
    by_queue: dict[str, list[str]] = {}
    for queue, msg_id in targets:
        by_queue.setdefault(queue, []).append(msg_id)
    done = missing = 0
    for queue, ids in by_queue.items():
        ok, gone = await node.reply_many(reply, queue, ids)
        done += len(ok)
        missing += len(gone)
    return done, missing
