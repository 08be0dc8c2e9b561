"""Streaming read: at-least-once over LMQ's pull / ack, with the messages in flight on the driver.

Who holds what
--------------
* **Spark's checkpoint** holds, per micro-batch, an offset ``{"run": R, "seq": N}``: ``R`` names
  one reader instance (a fresh random id each time the query starts), ``N`` counts the messages
  that instance pulled. It holds no message and no LMQ id: LMQ gives a message a new id on every
  delivery, so an id could never be read again anyway.
* **The queue** holds every message until it is acked. A message pulled for a micro-batch is in
  ``processing`` on the node; while it is in flight the reader extends it (``ext``) every third
  of the queue's ``timeout``, so it is not redelivered under a running batch.
* **The reader** (one object in Spark's driver-side Python worker, for the life of the query)
  holds the in-flight messages: pulled in :meth:`latestOffset`, numbered, handed to Spark's tasks
  inside the partitions of :meth:`partitions`.

When a message is acked
-----------------------
Only after Spark recorded the micro-batch that carried it in the checkpoint's commit log, i.e.
after the sink committed it. Spark says so in two ways, and ``ackOn`` picks one:

* ``trigger`` (default): Spark runs one micro-batch at a time and asks for the next offset
  (:meth:`latestOffset`) only after the previous batch is in the commit log, so every message
  handed out before that call is acked then. The last batch is thus acked on the next trigger,
  even when no new message comes. Not for queries with ``asyncProgressTrackingEnabled``, which
  asks for offsets before the commit log is written: use ``commit`` there.
* ``commit``: only in :meth:`commit`, Spark's own callback, which comes one batch late (when the
  *next* batch is planned): the last batch's messages stay in flight (extended) until then.

What is replayed after a failure or restart
-------------------------------------------
A batch that was planned but not committed is re-run by Spark with the same offsets. A new reader
instance has a new ``run`` id, so it returns *no rows* for a batch of an earlier run: those
messages were never acked, and the queue delivers them again, to this run, with new ids (at once
when the failed reader could nack them on :meth:`stop`, else after the queue's ``timeout``).
Every message is therefore processed at least once; duplicates come from (a) a batch that
failed after its sink wrote part of it, (b) a query stopped or crashed after its last batch was
committed but before that batch was acked, (c) a message whose ``timeout`` passed while in flight
(the node unreachable for ext). Each redelivery spends one ``retry``: give the queue a high count
(``retry: "infinity"`` only where no Erlang LMQ node serves the queue), or LMQ drops a message that
runs out.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from pylmq.errors import MessageNotFound, NotFound
from pylmq.spark._batch import give_back, pull_many
from pylmq.spark._node import Node, run_window
from pylmq.spark._options import LmqOptions
from pylmq.spark._rows import Row
from pylmq.spark._shape import ReadShape

__all__ = ["LmqStreamReader"]

log = logging.getLogger("pylmq.spark")

T = TypeVar("T")

DEFAULT_EXTEND_INTERVAL = 10.0
"""Seconds between extensions when the queue's timeout cannot be read (MessagePack-RPC): a
third of LMQ's default timeout of 30 s."""
MIN_EXTEND_INTERVAL = 0.2
STOP_GRACE = 10.0


@dataclass(slots=True)
class InFlight:
    queue: str
    id: str
    row: Row


class LmqStreamReader(DataSourceStreamReader):
    def __init__(self, opts: LmqOptions) -> None:
        self.opts = opts
        self.shape: ReadShape | None = None
        """The columns of a user schema; ``None``: every message column."""
        self.run = uuid.uuid4().hex
        self._seq = 0
        self._handed = 0
        """Highest seq given to Spark in a partition (ack never goes past it)."""
        self._latest: dict[str, Any] | None = None
        self._inflight: dict[int, InFlight] = {}
        """seq -> message; touched only on the loop thread, so it needs no lock."""
        self._timeouts: dict[str, float | None] = {}
        self._acked = 0
        self._redelivered = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._node: Node | None = None
        self._extender: asyncio.Task[None] | None = None

    # -- the reader's own event loop (one thread, owned by this reader) --------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"lmq-stream-{self.run[:8]}", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _get_node(self) -> Node:
        if self._node is None:
            self._node = Node(self.opts)
        return self._node

    # -- Spark's calls ---------------------------------------------------------------------------

    def reportLatestOffset(self) -> dict[str, Any]:
        """What Spark shows as the source's ``latestOffset`` in each progress report (and never
        plans with): the offset, and this reader's counts. pyspark's Python sources cannot fill
        the progress's ``metrics``, so the counts travel here:

        * ``backlog``: messages the queue held after the last pull (waiting, or in processing by
          any consumer, this query included), as the node says in a pull-many answer (HTTP;
          absent over MessagePack-RPC);
        * ``inFlight``: messages pulled and not yet acked (or given back);
        * ``acked``: messages acked since the query started;
        * ``redelivered``: messages whose ack or ext found them gone: their timeout passed in
          flight, the queue delivers them again (the duplicates at-least-once allows)."""
        report: dict[str, Any] = dict(self._latest or self.initialOffset())
        if self._node is not None and self._node.queue_size is not None:
            report["backlog"] = self._node.queue_size
        report["inFlight"] = len(self._inflight)
        report["acked"] = self._acked
        report["redelivered"] = self._redelivered
        return report

    def initialOffset(self) -> dict[str, Any]:
        return {"run": self.run, "seq": 0}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """Pull what the queue has (up to ``maxMessagesPerTrigger``) and number it.

        Also called by Spark 4.0/4.1 without arguments; with ``start`` (4.2+) an idle poll
        returns ``start`` unchanged, so no empty batch is planned."""
        if self._latest is None:
            self._latest = start if start is not None else self.initialOffset()
        if self.opts.ack_on == "trigger":
            self._call(self._ack_through(self._handed))
        cap = self.opts.max_messages_per_trigger
        max_rows = getattr(limit, "max_rows", None)
        if isinstance(max_rows, int) and max_rows > 0:
            cap = min(cap, max_rows)
        if self._call(self._pull(cap)):
            self._latest = {"run": self.run, "seq": self._seq}
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        if end.get("run") != self.run:
            if start != end:
                log.info(
                    "lmq stream: batch %s..%s was pulled by an earlier run; it replays empty and "
                    "the queue redelivers its unacked messages",
                    start,
                    end,
                )
            return []
        low = int(start.get("seq", 0)) if start.get("run") == self.run else 0
        high = int(end["seq"])
        rows = self._call(self._hand_out(low, high))
        n = max(1, min(self.opts.num_partitions, len(rows)))
        return [InputPartition(rows[i::n]) for i in range(n) if rows[i::n]]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        # Runs in an executor: the rows travel inside the partition, nothing is pulled here.
        rows: list[Row] = partition.value
        yield from rows if self.shape is None else self.shape.rows(rows)

    def commit(self, end: dict[str, Any]) -> None:
        if end.get("run") == self.run:
            self._call(self._ack_through(int(end["seq"])))

    def stop(self) -> None:
        if self._loop is None:
            return
        try:
            self._call(self._shutdown(), timeout=STOP_GRACE + 5)
        except Exception as e:  # stop must not fail the query's shutdown
            log.warning("lmq stream: stopping the reader: %s", e)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            if self._thread is not None:
                self._thread.join(timeout=5)
            self._loop.close()
            self._loop = None

    # -- on the loop thread ----------------------------------------------------------------------

    async def _pull(self, cap: int) -> int:
        node = self._get_node()
        rows: list[Row] = []
        try:
            first = await node.pull(self.opts.timeout)
            if first is not None:
                rows.append(first)
                await pull_many(node, cap - 1, 0.0, rows)
        except BaseException:
            await give_back(node, rows)
            raise
        for row in rows:
            self._seq += 1
            self._inflight[self._seq] = InFlight(row[0], row[1], row)
        await self._learn_timeouts({row[0] for row in rows})
        return len(rows)

    async def _learn_timeouts(self, queues: set[str]) -> None:
        node = self._get_node()
        for q in queues - self._timeouts.keys():
            try:
                self._timeouts[q] = await node.queue_timeout(q)
            except Exception as e:
                log.warning("lmq stream: cannot read the timeout of queue %r: %s", q, e)
                self._timeouts[q] = None
        if self._extender is None and self._extend_interval() > 0:
            self._extender = asyncio.create_task(self._extend_forever())

    def _extend_interval(self) -> float:
        if self.opts.extend_interval is not None:
            return self.opts.extend_interval
        known = [t for t in self._timeouts.values() if t is not None]
        if len(known) < len(self._timeouts) or not known:
            # A queue whose timeout is unknown counts as having LMQ's default.
            known.append(DEFAULT_EXTEND_INTERVAL * 3)
        return max(MIN_EXTEND_INTERVAL, min(known) / 3)

    async def _extend_forever(self) -> None:
        node = self._get_node()
        while True:
            await asyncio.sleep(self._extend_interval())
            targets = list(self._inflight.items())

            async def one(item: tuple[int, InFlight]) -> None:
                seq, msg = item
                try:
                    await node.reply("ext", msg.queue, msg.id)
                except (MessageNotFound, NotFound):
                    self._redelivered += 1
                    # Already redelivered (its deadline passed): this copy is a duplicate-to-be.
                    log.warning("lmq stream: message %s of %r expired in flight; it is redelivered", msg.id, msg.queue)
                    self._inflight.pop(seq, None)

            try:
                await run_window(targets, one, self.opts.pipeline)
            except Exception as e:
                log.warning("lmq stream: extending %d messages in flight failed: %s", len(targets), e)

    async def _hand_out(self, low: int, high: int) -> list[Row]:
        self._handed = max(self._handed, high)
        return [m.row for seq, m in self._inflight.items() if low < seq <= high]

    async def _ack_through(self, seq: int) -> None:
        limit = min(seq, self._handed)
        targets = [(s, m) for s, m in self._inflight.items() if s <= limit]
        if not targets:
            return
        node = self._get_node()
        missing = 0

        async def one(item: tuple[int, InFlight]) -> None:
            nonlocal missing
            s, msg = item
            try:
                await node.reply("ack", msg.queue, msg.id)
            except (MessageNotFound, NotFound):
                missing += 1
                self._redelivered += 1
            else:
                self._acked += 1
            self._inflight.pop(s, None)

        try:
            await run_window(targets, one, self.opts.pipeline)
        except Exception as e:
            # Kept in flight: the next trigger or commit acks them again.
            log.warning("lmq stream: acking %d messages failed: %s (retried on the next call)", len(targets), e)
        if missing:
            log.warning("lmq stream: %d acked messages had expired and are redelivered (duplicates)", missing)

    async def _shutdown(self) -> None:
        if self._extender is not None:
            self._extender.cancel()
            await asyncio.gather(self._extender, return_exceptions=True)
            self._extender = None
        node = self._node
        if node is None:
            return
        try:
            if self._inflight:
                # Whether the last batch was committed is unknown here: redeliver now rather than
                # after the timeout (at-least-once either way; a nack spends no extra retry).
                rows = [m.row for m in self._inflight.values()]
                self._inflight.clear()
                async with asyncio.timeout(STOP_GRACE):
                    await give_back(node, rows)
        finally:
            await node.close()
            self._node = None
