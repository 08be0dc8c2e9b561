"""Batch read and batch/stream write: the parts that run in Spark's executor Python workers.

Reading pulls (many messages per request: pylmq's pull-many) and leaves the messages in
processing: the caller acks them (``consume``/``process``, or ``ack(df)``) after its job
succeeded. A partition hands Spark an Arrow record batch per pull. Without ``maxMessages`` a
read goes on until a pull finds the queue with nothing deliverable (a queue pushed to faster than
it is read keeps the read going: give ``maxMessages`` then).

Writing pushes rows as they come, grouped per queue into push-many requests (a few in flight),
and returns only once every push of the partition was answered, so Spark counts a task as done
only when its rows are in the queue. LMQ has no idempotent push: a task that Spark runs again
pushes its rows again, and a task that failed may have pushed any of its rows (whole batches),
including rows after the one that failed. When a write task fails on the JVM side (an upstream
expression raised), Spark does not wait for its Python writer, which may go on pushing the rows
it already received: pushes of a failed attempt can land after the failure was reported (seen
with pyspark 4.3). Against a node without the batch extension (Erlang LMQ) the first refusal
switches to one request per message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)

from pylmq.errors import BadRequest, MessagesExpired
from pylmq.spark._connection import NodeConnection, reply_all, run_window
from pylmq.spark._keep import Keeper
from pylmq.spark._options import LmqOptions
from pylmq.spark._rows import Push, PushColumns, Row, row_push
from pylmq.spark._shape import ReadShape

__all__ = [
    "REPLYING_PROPERTY",
    "LmqBatchReader",
    "LmqCommit",
    "LmqStreamWriter",
    "LmqWriter",
    "arrow_rows",
    "give_back",
    "pull_many",
    "push_batches",
    "push_rows",
]

log = logging.getLogger("pylmq.spark")


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    # A task group wraps failures; the caller (and Spark's error report) wants the cause.
    first = group.exceptions[0]
    return _first_error(first) if isinstance(first, BaseExceptionGroup) else first


PULL_BATCH = 2000
"""Messages asked for per pull-many request: past a few hundred the request's own cost is noise,
and a batch this size is a few hundred KB for small messages."""
PUSH_BATCH = 5000
"""Rows per push-many request (at most :data:`pylmq.wire.batch.MAX_BATCH`)."""
PUSH_BATCH_BYTES = 8 * 1024 * 1024
"""Body bytes per push-many request: well under the node's request bound (64 MiB)."""
BATCHES_IN_FLIGHT = 4
"""Push-many requests in flight per task (``pipeline`` still bounds it): enough to keep the node
busy while the task builds the next batch."""


async def pull_many(node: NodeConnection, quota: int | None, timeout: float, into: list[Row]) -> None:
    """Append up to ``quota`` (``None``: no bound) messages to ``into`` until a pull finds none
    within ``timeout``: many per request for one queue, else ``pipeline`` pulls at a time.
    ``into`` holds what was taken even when this raises."""
    if quota is not None and quota <= 0:
        return
    while node.batches and (quota is None or quota > 0):
        got = await node.pull_batch(PULL_BATCH if quota is None else min(PULL_BATCH, quota), timeout)
        if got is None:
            break  # the node has no pull-many: one at a time below
        into.extend(got)
        if not got:
            return
        if quota is not None:
            quota -= len(got)
    if quota is not None and quota <= 0:
        return
    claimed = 0
    empty = False

    async def puller() -> None:
        nonlocal claimed, empty
        while not empty and (quota is None or claimed < quota):
            claimed += 1
            try:
                row = await node.pull(timeout)
            except BaseException:
                claimed -= 1
                raise
            if row is None:
                claimed -= 1
                empty = True
                return
            into.append(row)

    try:
        async with asyncio.TaskGroup() as tg:
            for _ in range(node.opts.pipeline if quota is None else min(node.opts.pipeline, quota)):
                tg.create_task(puller())
    except BaseExceptionGroup as group:
        raise _first_error(group) from None


async def give_back(node: NodeConnection, rows: Sequence[Row]) -> None:
    """Nack messages taken by work that failed, so they are redelivered now rather than after
    the queue's timeout; best effort (the timeout brings them back anyway)."""
    if not rows:
        return
    try:
        await reply_all(node, "nack", [(r[0], r[1]) for r in rows])
    except Exception as e:
        log.warning("could not nack %d pulled messages: %s (they come back by the queue's timeout)", len(rows), e)


class CacheLost(BadRequest):
    """An ack/nack of a DataFrame whose cached rows are gone would have pulled new messages."""


@dataclass(frozen=True, slots=True)
class _Quota:
    index: int
    messages: int | None
    """``None``: until the queue has no message deliverable."""


REPLYING_PROPERTY = "pylmq.spark.replying"
"""A Spark job-local property that :func:`pylmq.spark.ack` / ``nack`` set (to the reply) around
their jobs. Those jobs must read rows already computed (a cache, a checkpoint); a read task that
runs under it means Spark is recomputing lost data (a cache whose blocks went with an executor),
which would pull NEW messages and answer them unprocessed: the task refuses instead."""


def _refuse_under_reply() -> None:
    from pyspark import TaskContext

    context = TaskContext.get()
    reply = context.getLocalProperty(REPLYING_PROPERTY) if context is not None else None
    if reply:
        raise CacheLost(
            f"{reply}(df): the cache lost data: Spark recomputes part of df (its cached blocks are gone, "
            f"e.g. with an executor), which would pull new messages and {reply} them unprocessed; "
            f"refused before pulling{', nothing acked' if reply == 'ack' else ''}. The messages read before "
            "stay in processing and come "
            "back by the queue's timeout: process them again, best inside `with consume(df) as held:`, "
            "whose checkpoint does not recompute"
        )


def _arrow_schema(schema: Any) -> Any:
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


class LmqBatchReader(DataSourceReader):
    """Each partition pulls its share (or, without ``maxMessages``, until the queue has nothing
    deliverable) and hands Spark one Arrow record batch per pull-many, as it goes."""

    def __init__(self, opts: LmqOptions, shape: ReadShape, schema: Any) -> None:
        self.opts = opts
        self.shape = shape
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        total = self.opts.max_messages
        if total is None:
            return [InputPartition(_Quota(i, None)) for i in range(self.opts.num_partitions)]
        n = min(self.opts.num_partitions, total)
        share, extra = divmod(total, n)
        return [InputPartition(_Quota(i, share + (1 if i < extra else 0))) for i in range(n)]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        # The next pull runs (on a loop thread of this task) while Spark takes the batch before:
        # the node pulls while this worker converts and the JVM consumes.
        _refuse_under_reply()
        quota: _Quota = partition.value
        arrow_schema = _arrow_schema(self.schema)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="lmq-read", daemon=True)
        thread.start()
        node = NodeConnection(self.opts)
        taken: list[Row] = []  # everything pulled: given back if the task fails
        handed = 0  # of which Spark got the first ``handed``
        pending: concurrent.futures.Future[list[Row]] | None = None
        # Everything taken stays in processing while the task runs (a read longer than the
        # queue's timeout keeps it), and gets a last extension as the task ends.
        keeper = Keeper(node, taken, self.opts.extend_interval)
        error: Exception | None = None

        def pull(left: int | None) -> concurrent.futures.Future[list[Row]]:
            return asyncio.run_coroutine_threadsafe(_pull_once(node, left, self.opts.timeout), loop)

        try:
            asyncio.run_coroutine_threadsafe(keeper.__aenter__(), loop).result()
            pending = pull(quota.messages)
            while pending is not None:
                rows = pending.result()
                pending = None
                if not rows:
                    break
                taken.extend(rows)
                left = None if quota.messages is None else quota.messages - len(taken)
                if left is None or left > 0:
                    pending = pull(left)
                handed = len(taken)
                yield self.shape.batch(rows, arrow_schema)
        except Exception as e:
            # The task fails: what it took goes back now rather than after the queue's timeout.
            handed, error = 0, e
            raise
        finally:
            try:
                # Also when Spark stops reading early (a limit): what it never got goes back.
                if pending is not None:
                    with contextlib.suppress(Exception):
                        taken.extend(pending.result())
                kept = keeper.__aexit__(type(error) if error else None, error, None)
                try:
                    asyncio.run_coroutine_threadsafe(kept, loop).result()
                except MessagesExpired:
                    handed = 0  # the task fails, naming the cause: all it holds goes back
                    raise
            finally:
                asyncio.run_coroutine_threadsafe(_close(node, taken[handed:]), loop).result()
                loop.call_soon_threadsafe(loop.stop)
                thread.join()
                loop.close()


async def _close(node: NodeConnection, give: Sequence[Row]) -> None:
    try:
        await give_back(node, give)
    finally:
        await node.close()


async def _pull_once(node: NodeConnection, quota: int | None, timeout: float) -> list[Row]:
    """One round of pulling: a pull-many (one queue), or up to a batch of single pulls (``qre``)."""
    rows: list[Row] = []
    if node.batches:
        got = await node.pull_batch(PULL_BATCH if quota is None else min(PULL_BATCH, quota), timeout)
        if got is not None:
            return got
    try:
        await pull_many(node, PULL_BATCH if quota is None else min(PULL_BATCH, quota), timeout, rows)
    except BaseException:
        await give_back(node, rows)
        raise
    return rows


@dataclass(frozen=True, slots=True)
class LmqCommit(WriterCommitMessage):
    pushed: int


async def push_rows(opts: LmqOptions, cols: PushColumns, rows: Iterable[Sequence[Any]]) -> int:
    """Push every row; returns the count once every push was answered; the first failure is
    raised after the pushes in flight finished. To one queue (or per a ``queue`` column) rows go
    many per request; a fan-out (``qre``) pushes row by row."""
    pushed = 0
    target = opts.qre if opts.qre is not None else opts.queue
    pushes = (row_push(row, cols, target) for row in rows)

    async with NodeConnection(opts) as node:

        async def one(push: Push) -> None:
            nonlocal pushed
            await node.push(push)
            pushed += 1

        async def many(batch: tuple[str, list[Push]]) -> None:
            nonlocal pushed
            await node.push_batch(*batch)
            pushed += len(batch[1])

        if node.batches:
            await run_window(push_batches(pushes), many, min(opts.pipeline, BATCHES_IN_FLIGHT))
        else:
            await run_window(pushes, one, opts.pipeline)
    return pushed


def push_batches(
    pushes: Iterable[Push], rows: int = PUSH_BATCH, size: int = PUSH_BATCH_BYTES
) -> Iterator[tuple[str, list[Push]]]:
    """Group pushes by queue into ``(queue, pushes)`` batches of at most ``rows`` pushes and
    about ``size`` body bytes, each queue's pushes in their order. At most ``rows`` pushes wait
    in all: past that the fullest queue's batch goes."""
    pending: dict[str, list[Push]] = {}
    sizes: dict[str, int] = {}
    waiting = 0
    for p in pushes:
        batch = pending.setdefault(p.target, [])
        batch.append(p)
        sizes[p.target] = sizes.get(p.target, 0) + len(p.body)
        waiting += 1
        if len(batch) >= rows or sizes[p.target] >= size:
            waiting -= len(batch)
            yield p.target, pending.pop(p.target)
            del sizes[p.target]
        elif waiting >= rows:
            fullest = max(pending, key=lambda q: len(pending[q]))
            waiting -= len(pending[fullest])
            yield fullest, pending.pop(fullest)
            del sizes[fullest]
    yield from pending.items()


def arrow_rows(batches: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
    """The rows of Arrow record batches as tuples, a column at a time out of Arrow."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


def _total(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, LmqCommit)]
    return sum(m.pushed for m in done), len(messages) - len(done)


def _failed_pushes(failed: int) -> str:
    # A failed task reports nothing back, yet it may have pushed whole batches before (and, on
    # the JVM side, after) its failure: say so rather than count those pushes as none.
    if not failed:
        return ""
    return f", and the {failed} failed tasks may have pushed any of their rows too (not counted)"


class LmqWriter(DataSourceArrowWriter):
    """Spark hands the rows over as Arrow record batches: no Row object per row."""

    def __init__(self, opts: LmqOptions, cols: PushColumns) -> None:
        self.opts = opts
        self.cols = cols

    def write(self, iterator: Iterator[Any]) -> LmqCommit:
        return LmqCommit(asyncio.run(push_rows(self.opts, self.cols, arrow_rows(iterator))))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pushed, _ = _total(messages)
        log.info("lmq write committed: %d messages pushed to %s", pushed, self.opts.qre or self.opts.queue)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pushed, failed = _total(messages)
        # A push cannot be taken back: say how many are already in the queues.
        log.warning(
            "lmq write aborted: %d messages pushed by %d finished tasks stay in the queue%s",
            pushed,
            len(messages) - failed,
            _failed_pushes(failed),
        )


class LmqStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: LmqOptions, cols: PushColumns) -> None:
        self.opts = opts
        self.cols = cols

    def write(self, iterator: Iterator[Any]) -> LmqCommit:
        return LmqCommit(asyncio.run(push_rows(self.opts, self.cols, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pushed, _ = _total(messages)
        log.info("lmq stream write: batch %d committed, %d messages pushed", batchId, pushed)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pushed, failed = _total(messages)
        log.warning(
            "lmq stream write: batch %d aborted; %d messages pushed by finished tasks stay in the queue%s "
            "(the batch is written again when the query restarts)",
            batchId,
            pushed,
            _failed_pushes(failed),
        )
