"""Keeping a batch-read task's messages in processing while the task runs.

A read task pulls its share of messages one after another; on a queue whose ``timeout`` is
shorter than the task, the first messages pulled would be redelivered before the task ends (to
this very read, under new ids) and their ack would find nothing. :class:`Keeper` extends what the
task holds (``ext`` of many ids at once) every third of the queue's timeout while the task pulls,
once more when it ends (so the rows leave the task with a whole timeout ahead of them), and takes
back by id any message whose deadline passed but that nobody pulled since. One that was pulled
again is lost to this read: the task then fails, naming the cause, rather than hand Spark rows
whose ack cannot succeed (and the same message twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import TracebackType

from pylmq.errors import MessagesExpired
from pylmq.spark._connection import NodeConnection
from pylmq.spark._rows import Row

__all__ = ["DEFAULT_KEEP_INTERVAL", "Keeper"]

log = logging.getLogger("pylmq.spark")

DEFAULT_KEEP_INTERVAL = 10.0
"""Seconds between extensions when a queue's timeout cannot be read (MessagePack-RPC): a third
of LMQ's default timeout of 30 s."""
MIN_KEEP_INTERVAL = 0.2


class Keeper:
    """``async with Keeper(node, rows, interval):`` extends the messages in ``rows`` (a list the
    body appends to) until the block ends; raises :class:`MessagesExpired` on a clean exit when
    some were redelivered meanwhile. ``interval`` None: a third of the queue's timeout; 0: only
    the final extension."""

    def __init__(self, node: NodeConnection, rows: list[Row], interval: float | None) -> None:
        self.node = node
        self.rows = rows
        self.interval = interval
        self.lost: set[str] = set()
        self._timeouts: dict[str, float | None] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Keeper:
        if self.interval != 0:
            self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if exc_type is not None:
            return
        await self.extend()
        if self.lost:
            raise MessagesExpired(
                f"lmq read: {len(self.lost)} of {len(self.rows)} messages pulled by this task passed their "
                "queue's timeout and were delivered again before the task ended; raise the queue's timeout "
                "(or read fewer messages per task: maxMessages, numPartitions)"
            )

    def _interval(self) -> float:
        if self.interval is not None:
            return self.interval
        known = [t for t in self._timeouts.values() if t is not None]
        if not known or len(known) < len(self._timeouts):
            known.append(DEFAULT_KEEP_INTERVAL * 3)
        return max(MIN_KEEP_INTERVAL, min(known) / 3)

    async def _learn(self, queues: set[str]) -> None:
        for q in queues - self._timeouts.keys():
            try:
                self._timeouts[q] = await self.node.queue_timeout(q)
            except Exception as e:
                log.warning("lmq read: cannot read the timeout of queue %r: %s", q, e)
                self._timeouts[q] = None

    async def _run(self) -> None:
        if self.node.opts.queue is not None:
            await self._learn({self.node.opts.queue})
        loop = asyncio.get_running_loop()
        last = loop.time()
        seen = 0
        while True:
            # Short ticks: a queue first met in the rows (a qre read) may have a timeout shorter
            # than the interval slept so far.
            await asyncio.sleep(MIN_KEEP_INTERVAL)
            if len(self.rows) > seen:
                await self._learn({row[0] for row in self.rows[seen:]})
                seen = len(self.rows)
            if loop.time() - last < self._interval():
                continue
            last = loop.time()
            try:
                await self.extend()
            except Exception as e:  # the final extension, or the timeout, tells
                log.warning("lmq read: extending %d messages failed: %s", len(self.rows), e)

    async def extend(self) -> None:
        """One ``ext`` of everything held (but what is known lost); what expired is taken back
        when nobody pulled it since, else counted lost."""
        by_queue: dict[str, list[str]] = {}
        for row in list(self.rows):
            if row[1] not in self.lost:
                by_queue.setdefault(row[0], []).append(row[1])
        await self._learn(set(by_queue))
        for queue, ids in by_queue.items():
            _, missing = await self.node.reply_many("ext", queue, ids)
            if missing:
                _, gone = await self.node.claim(queue, missing)
                self.lost.update(gone)
