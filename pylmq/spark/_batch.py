"""Batch read and batch/stream write: the parts that run in Spark's executor Python workers.

Reading pulls and leaves the messages in processing: the caller acks them (``ack(df)``) after
its job succeeded. Writing pushes rows as they come, pipelined, and returns only once every
push of the partition was answered, so Spark counts a task as done only when its rows are in
the queue. LMQ has no idempotent push: a task that Spark runs again pushes its rows again.
When a write task fails on the JVM side (an upstream expression raised), Spark does not wait for
its Python writer, which may go on pushing the rows it already received: pushes of a failed
attempt can land after the failure was reported (seen with pyspark 4.3).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)

from pylmq.spark._keep import Keeper
from pylmq.spark._node import Node, reply_all, run_window
from pylmq.spark._options import LmqOptions
from pylmq.spark._rows import Push, PushColumns, Row, row_push

__all__ = [
    "LmqBatchReader",
    "LmqCommit",
    "LmqStreamWriter",
    "LmqWriter",
    "give_back",
    "pull_many",
    "pull_rows",
    "push_rows",
]

log = logging.getLogger("pylmq.spark")


def _first_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    # A task group wraps failures; the caller (and Spark's error report) wants the cause.
    first = group.exceptions[0]
    return _first_error(first) if isinstance(first, BaseExceptionGroup) else first


async def pull_many(node: Node, quota: int, timeout: float, into: list[Row]) -> None:
    """Append up to ``quota`` messages to ``into``, ``pipeline`` pulls at a time, until a pull
    finds none within ``timeout``. ``into`` holds what was taken even when this raises."""
    claimed = 0
    empty = False

    async def puller() -> None:
        nonlocal claimed, empty
        while not empty and claimed < quota:
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

    if quota <= 0:
        return
    try:
        async with asyncio.TaskGroup() as tg:
            for _ in range(min(node.opts.pipeline, quota)):
                tg.create_task(puller())
    except BaseExceptionGroup as group:
        raise _first_error(group) from None


async def give_back(node: Node, rows: Sequence[Row]) -> None:
    """Nack messages taken by work that failed, so they are redelivered now rather than after
    the queue's timeout; best effort (the timeout brings them back anyway)."""
    if not rows:
        return
    try:
        await reply_all(node, "nack", [(r[0], r[1]) for r in rows])
    except Exception as e:
        log.warning("could not nack %d pulled messages: %s (they come back by the queue's timeout)", len(rows), e)


async def pull_rows(opts: LmqOptions, quota: int) -> list[Row]:
    """A batch-read task: up to ``quota`` messages, left in processing for the caller to ack."""
    rows: list[Row] = []
    async with Node(opts) as node:
        try:
            # Extended while the task pulls, so a read longer than the queue's timeout keeps
            # what it took (or fails, saying so).
            async with Keeper(node, rows, opts.extend_interval):
                await pull_many(node, quota, opts.timeout, rows)
        except BaseException:
            await give_back(node, rows)
            raise
    return rows


@dataclass(frozen=True, slots=True)
class _Quota:
    index: int
    messages: int


class LmqBatchReader(DataSourceReader):
    def __init__(self, opts: LmqOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        n = min(self.opts.num_partitions, self.opts.max_messages)
        share, extra = divmod(self.opts.max_messages, n)
        return [InputPartition(_Quota(i, share + (1 if i < extra else 0))) for i in range(n)]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        quota: _Quota = partition.value
        yield from asyncio.run(pull_rows(self.opts, quota.messages))


@dataclass(frozen=True, slots=True)
class LmqCommit(WriterCommitMessage):
    pushed: int


async def push_rows(opts: LmqOptions, cols: PushColumns, rows: Iterable[Sequence[Any]]) -> int:
    """Push every row; returns the count once every push was answered; the first failure is
    raised after the pushes in flight finished."""
    pushed = 0
    target = opts.qre if opts.qre is not None else opts.queue

    async with Node(opts) as node:

        async def one(push: Push) -> None:
            nonlocal pushed
            await node.push(push)
            pushed += 1

        await run_window((row_push(row, cols, target) for row in rows), one, opts.pipeline)
    return pushed


def _total(messages: Sequence[WriterCommitMessage | None]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, LmqCommit)]
    return sum(m.pushed for m in done), len(messages) - len(done)


class LmqWriter(DataSourceWriter):
    def __init__(self, opts: LmqOptions, cols: PushColumns) -> None:
        self.opts = opts
        self.cols = cols

    def write(self, iterator: Iterator[Any]) -> LmqCommit:
        return LmqCommit(asyncio.run(push_rows(self.opts, self.cols, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        pushed, _ = _total(messages)
        log.info("lmq write committed: %d messages pushed to %s", pushed, self.opts.qre or self.opts.queue)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        pushed, failed = _total(messages)
        # A push cannot be taken back: say how many are already in the queues.
        log.warning(
            "lmq write aborted: %d messages from %d finished tasks stay pushed; %d tasks failed",
            pushed,
            len(messages) - failed,
            failed,
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
            "lmq stream write: batch %d aborted; %d messages stay pushed, %d tasks failed "
            "(the batch is written again when the query restarts)",
            batchId,
            pushed,
            failed,
        )
