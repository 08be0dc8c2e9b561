"""Streaming read: every batch's messages recorded by id in Spark's checkpoint, replayed by id.

Who holds what
--------------
* **The queue** (the node's store, journal-backed on a durable node) holds every message until
  it is acked: it is the only copy. A message pulled for the query is in ``processing``; while
  the reader holds it, it extends it (``ext``, many ids per request) every third of the queue's
  ``timeout``, so it is not redelivered under a running batch.
* **Spark's checkpoint** holds, per micro-batch, the end offset ``{"run": R, "seq": N, "ids":
  {queue: ids}}``: ``R`` names one reader instance (a fresh random id each time the query
  starts), ``N`` counts the messages it pulled, and ``ids`` lists the LMQ ids of the messages
  the batch delivers (packed: base64 of the 16-byte uuids, in pull order; about 21 kB of JSON
  per 1,000 messages), and ``"holder"``: the query's holder tag, drawn by its first run and
  taken over by each restarted run from the offset it starts at. Every pull-many carries it,
  and the node remembers which deliveries went to it. Spark writes ``offsets/N`` durably
  *before* it runs the batch. A message keeps its id while in processing, after its deadline
  passed until someone pulls it, and after a nack, so the id is enough to find it on the node
  again.
* **The reader** (in Spark's driver-side Python worker) holds the messages pulled in
  :meth:`latestOffset` until they are acked, and hands them to Spark's tasks inside the
  partitions of :meth:`partitions`.

When a message is acked
-----------------------
Only after the batch that carried it is in the checkpoint's commit log. ``ackOn`` picks how
Spark says so: ``trigger`` (default) acks in :meth:`latestOffset`, which Spark calls only once
the previous batch is committed (not with ``asyncProgressTrackingEnabled``: use ``commit``
there); ``commit`` acks in :meth:`commit`, which Spark calls one batch late, when it plans the
next batch. Acks and extensions go as ``reply_many`` requests, one per queue and 5,000 ids, and
never run at the same time: the extender never extends a message acked meanwhile.

What a restart sees
-------------------
When the query restarts on its checkpoint (after a failure, ``stop()``, or a ``kill -9`` of the
driver), the new reader acts on the offsets of the earlier run before it pulls anything new:

* **The batch that was planned but not committed** is run again by Spark with the same offsets.
  The reader takes exactly its messages back from the node by id (``claim``: each keeps its id
  and retry and gets a new deadline) and returns them as that batch's rows, in the order they
  were first pulled. So an event-time query sees them again first, before any newer message,
  and its watermark cannot pass them.
* **The last committed batch** (whose acks the crash may have cut short) is acked: its messages
  still on the node are claimed and acked, not processed again.
* **Messages pulled in a trigger whose offset was never written** (the driver died between
  :meth:`latestOffset`'s pull and Spark's write of the offset, or the query stopped or failed
  there: :meth:`stop` leaves them in processing rather than nack them, as a nack would put
  them behind newer messages and drop their holder records): before its first pull, the new
  reader claims by the holder tag everything the node still records as delivered to the
  query; what it does not hold already as a replayed or settled batch's goes first into the
  next batch, ahead of anything newer.

The guarantee
-------------
Every message is processed at least once, and a query that restarts on its checkpoint reprocesses
exactly the messages of its uncommitted batch, as that batch, before anything newer. A message
is processed twice, or comes back after newer ones, only when it left the query's reach:

(a) it belongs to a replayed batch but another consumer pulled it after its deadline passed
    while the query was down (the reader logs how many of a replayed batch were gone: those
    are processed by whoever pulled them, not lost, and not by this batch);
(b) the driver died between pulling a batch's messages in :meth:`latestOffset` and Spark
    writing that batch's offset (278 to 332 ms of each trigger measured with 100 messages a
    trigger on a loaded 2-core host, 46 ms to 4.7 s seen: a kill -9 of a busy query often
    lands in it), and the restart cannot take them back by the holder tag: the node has no
    holder tags (Erlang LMQ, a pylmq node before them, pull-any with ``qre``), the node
    restarted meanwhile (it keeps tags in memory only), the query's very first run died
    before writing any offset (its tag was in none), the node dropped the query's records
    (its book keeps 1,024 tags and 200,000 recorded deliveries a queue, the oldest going
    first), Spark is 4.0 or 4.1 (see below), or another consumer pulled them after their
    timeout. Then at most one trigger's messages (``maxMessagesPerTrigger``) come back
    after the queue's ``timeout`` as new messages (one retry spent), possibly behind newer
    ones, so a watermarked aggregation may drop them as late;
(c) the node could not be reached to extend them for a whole ``timeout`` and another consumer
    pulled them (the reader takes back what nobody pulled; it logs the rest as duplicates).

So per crash or outage at most one batch's worth is affected: in (a) and (b) at most
``maxMessagesPerTrigger`` messages, in (c) at most the messages held, one batch with
``ackOn=trigger``, two with ``ackOn=commit``. None of these is lost: each is processed by the
query later or by the consumer that pulled it.

Spark 4.0 and 4.1 call :meth:`latestOffset` without its ``start``: a restarted reader learns
the query's offsets only from :meth:`partitions`, after its first pull. There, unless the
restart begins with a replay, it pulls under a fresh tag (the trigger a kill cut short is
case (b)), and it does not ack the last committed batch first: those of its messages whose
acks the crash cut short come back after their ``timeout`` and are processed again. So the
``spark`` extra requires pyspark 4.2 or later.

Duplicates within the query's own output come only from a sink that is not idempotent per
batch id: a replayed batch is the same batch again (Spark's ``foreachBatch`` gets the same
``batch_id``). A replay or takeback before the message's deadline costs no retry; one after it
spends one, as the redelivery it replaces would, and so does each redelivery in (a)-(c): give
the queue a high count (``retry: "infinity"`` only where no Erlang LMQ node serves it). Offsets
written by a reader without ids (an earlier pylmq) replay empty; their messages come back by
the queue's timeout.

Timeout: one extension round (a request per 5,000 messages held) must fit well within a third
of the queue's ``timeout``. A durable node on a loaded 2-core machine extends about 100,000 ids
a second this way (one ``ext`` per id: 2,700), so give the queue ``timeout >= 1 + 3 x held /
100,000`` seconds, and at least 3 s.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import threading
import uuid
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition

from pylmq.spark._batch import give_back, pull_many
from pylmq.spark._connection import NodeConnection
from pylmq.spark._options import LmqOptions
from pylmq.spark._rows import Row
from pylmq.spark._shape import ReadShape

__all__ = ["LmqStreamReader", "decode_ids", "encode_ids"]

log = logging.getLogger("pylmq.spark")

T = TypeVar("T")

DEFAULT_EXTEND_INTERVAL = 10.0
"""Seconds between extensions when the queue's timeout cannot be read (MessagePack-RPC): a
third of LMQ's default timeout of 30 s."""
MIN_EXTEND_INTERVAL = 0.2
STOP_GRACE = 10.0

BatchKey = tuple[str, int]
"""A batch by its end offset: ``(run, seq)``."""


def encode_ids(ids: Sequence[str]) -> str | list[str]:
    """Message ids for an offset: base64 of their 16-byte uuids (LMQ hands out UUID text), or
    the texts themselves when one is not a UUID."""
    try:
        return base64.b64encode(b"".join(uuid.UUID(i).bytes for i in ids)).decode("ascii")
    except ValueError:
        return list(ids)


def decode_ids(value: Any) -> list[str]:
    """Inverse of :func:`encode_ids`; an offset that is not ours gives no ids."""
    if isinstance(value, list):
        return [i for i in value if isinstance(i, str)]
    if not isinstance(value, str):
        return []
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError:
        return []
    return [str(uuid.UUID(bytes=raw[i : i + 16])) for i in range(0, len(raw) - 15, 16)]


def offset_ids(offset: dict[str, Any]) -> dict[str, list[str]]:
    ids = offset.get("ids")
    if not isinstance(ids, dict):
        return {}
    return {q: decode_ids(v) for q, v in ids.items() if isinstance(q, str)}


def _key(offset: dict[str, Any]) -> BatchKey:
    return str(offset.get("run")), int(offset.get("seq", 0))


@dataclass(slots=True)
class InFlight:
    queue: str
    id: str
    row: Row


def _by_queue(msgs: Iterable[InFlight]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in msgs:
        out.setdefault(m.queue, []).append(m.id)
    return out


class LmqStreamReader(DataSourceStreamReader):
    def __init__(self, opts: LmqOptions) -> None:
        self.opts = opts
        self.shape: ReadShape | None = None
        """The columns of a user schema; ``None``: every message column."""
        self.run = uuid.uuid4().hex
        self.holder = uuid.uuid4().hex
        """The holder tag of the query's pulls: this run's own until an offset brings the one
        the query started with (see :meth:`_restart_holder`)."""
        self._holder_fixed = False
        self._tag_written = False
        """Whether Spark wrote an offset carrying :attr:`holder`: only then can a restart claim
        by it what this reader leaves in processing."""
        self._adopted = False
        self._seq = 0
        self._latest: dict[str, Any] | None = None
        # Touched only on the loop thread, so no lock guards them; the asyncio lock below keeps
        # acks and extensions apart.
        self._held: dict[str, InFlight] = {}
        """Every message the reader holds, by id: pulled, handed to a batch or taken back."""
        self._pulled: dict[int, str] = {}
        """This run's messages in no batch yet: seq -> id."""
        self._batches: dict[BatchKey, list[str]] = {}
        """Ids of the messages of each batch handed out (or taken back for one), until acked."""
        self._settled: set[BatchKey] = set()
        """Batches of earlier runs whose messages this run acked."""
        self._timeouts: dict[str, float | None] = {}
        self._acked = 0
        self._redelivered = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._node: NodeConnection | None = None
        self._extender: asyncio.Task[None] | None = None
        self._replying: asyncio.Lock | None = None

    # -- the reader's own event loop (one thread, owned by this reader) --------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name=f"lmq-stream-{self.run[:8]}", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def _get_node(self) -> NodeConnection:
        if self._node is None:
            self._node = NodeConnection(self.opts)
        return self._node

    def _lock(self) -> asyncio.Lock:
        if self._replying is None:
            self._replying = asyncio.Lock()
        return self._replying

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
        # The ids of the batch are for replays, and thousands long: not for a progress report.
        report: dict[str, Any] = {k: v for k, v in (self._latest or self.initialOffset()).items() if k != "ids"}
        if self._node is not None and self._node.queue_size is not None:
            report["backlog"] = self._node.queue_size
        report["inFlight"] = len(self._held)
        report["acked"] = self._acked
        report["redelivered"] = self._redelivered
        return report

    def initialOffset(self) -> dict[str, Any]:
        return {"run": self.run, "seq": 0, "ids": {}, "holder": self.holder}

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        """Pull what the queue has (up to ``maxMessagesPerTrigger``), number it, and record
        its ids in the offset.

        Also called by Spark 4.0/4.1 without arguments; with ``start`` (4.2+) an idle poll
        returns ``start`` unchanged, so no empty batch is planned. Spark calls this only once
        ``start``'s batch is committed: a batch of an earlier run is acked here, before any
        pull, so none of its messages can be pulled again as new."""
        if self._latest is None:
            self._latest = start if start is not None else self.initialOffset()
        if start is not None:
            self._restart_holder(start)
            self._note_written(start)
        if start is not None and start.get("run") != self.run:
            self._call(self._settle(start) if self.opts.ack_on == "trigger" else self._hold(start))
        if self.opts.ack_on == "trigger":
            self._call(self._ack_batches(list(self._batches)))
        cap = self.opts.max_messages_per_trigger
        max_rows = getattr(limit, "max_rows", None)
        if isinstance(max_rows, int) and max_rows > 0:
            cap = min(cap, max_rows)
        adopted = 0
        if not self._adopted:
            # Before anything new: what an earlier run pulled under the query's holder tag
            # and no offset names (exception (b)) goes first into the next batch.
            adopted = self._call(self._adopt_orphans())
        if (self._call(self._pull(cap - adopted)) if cap > adopted else 0) or adopted:
            self._latest = self._offset()
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        self._restart_holder(end)
        self._note_written(end)
        if _key(start) == _key(end):
            # A batch with no range (Spark runs one when only the watermark moved): no rows,
            # whatever the end offset's ids say (they belong to the batch that ended there).
            return []
        if end.get("run") != self.run:
            rows = self._call(self._replay(start, end))
        else:
            low = int(start.get("seq", 0)) if start.get("run") == self.run else 0
            rows = self._call(self._hand_out(low, _key(end)))
        n = max(1, min(self.opts.num_partitions, len(rows)))
        return [InputPartition(rows[i::n]) for i in range(n) if rows[i::n]]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        # Runs in an executor: the rows travel inside the partition, nothing is pulled here.
        rows: list[Row] = partition.value
        yield from rows if self.shape is None else self.shape.rows(rows)

    def commit(self, end: dict[str, Any]) -> None:
        if end.get("run") == self.run:
            seq = int(end.get("seq", 0))
            done = [k for k in self._batches if k[0] != self.run or k[1] <= seq]
            self._call(self._ack_batches(done))
        else:
            self._call(self._settle(end))

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

    def _restart_holder(self, offset: dict[str, Any]) -> None:
        """Take the query's holder tag from the first offset Spark gives this reader, before
        it pulls anything: a restarted reader then pulls and claims under the tag its
        predecessors used (also one that died before writing any offset of its own, as it
        started from this same offset)."""
        if self._holder_fixed:
            return
        self._holder_fixed = True
        tag = offset.get("holder")
        if isinstance(tag, str) and tag:
            self.holder = tag

    def _note_written(self, offset: dict[str, Any]) -> None:
        """``offset`` came from Spark's checkpoint (not this run's initial offset): if it carries
        the tag this reader pulls under, a restart will claim by that tag."""
        if offset.get("holder") == self.holder and (offset.get("run") != self.run or int(offset.get("seq", 0)) > 0):
            self._tag_written = True

    # -- on the loop thread ----------------------------------------------------------------------

    def _offset(self) -> dict[str, Any]:
        """This run's latest offset: the ids of every message pulled and in no batch yet (the
        batch Spark plans next carries exactly those), and the query's holder tag."""
        msgs = [self._held[i] for i in self._pulled.values() if i in self._held]
        ids = {q: encode_ids(ids) for q, ids in _by_queue(msgs).items()}
        return {"run": self.run, "seq": self._seq, "ids": ids, "holder": self.holder}

    async def _adopt_orphans(self) -> int:
        """Once, before the first pull: claim by holder tag what earlier runs of the query
        pulled and still hold; those this reader does not hold already (as a replayed or
        settled batch's) are orphans, pulled in a trigger whose offset was never written.
        They become this run's first pulled messages. The count adopted."""
        self._adopted = True
        self._holder_fixed = True  # pulls from now on carry this tag
        node = self._get_node()
        node.holder = self.holder
        queue = self.opts.queue
        if queue is None or not node.batches:
            return 0  # pull-any and one-at-a-time pulls carry no tag
        async with self._lock():
            rows = await node.claim_holder(queue)
        orphans = [r for r in rows or () if r[1] not in self._held]
        for row in orphans:
            self._seq += 1
            self._held[row[1]] = InFlight(row[0], row[1], row)
            self._pulled[self._seq] = row[1]
        if orphans:
            await self._learn_timeouts({queue})
            log.warning(
                "lmq stream: %d messages pulled by an earlier run in a trigger that wrote no offset "
                "(the driver died in it) are taken back and go first into the next batch",
                len(orphans),
            )
        return len(orphans)

    async def _pull(self, cap: int) -> int:
        node = self._get_node()
        node.holder = self.holder
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
            self._held[row[1]] = InFlight(row[0], row[1], row)
            self._pulled[self._seq] = row[1]
        await self._learn_timeouts({row[0] for row in rows})
        return len(rows)

    async def _hand_out(self, low: int, key: BatchKey) -> list[Row]:
        ids = self._batches.get(key)
        if ids is None:
            seqs = [s for s in self._pulled if low < s <= key[1]]
            ids = self._batches[key] = [self._pulled.pop(s) for s in seqs]
        return [self._held[i].row for i in ids if i in self._held]

    async def _replay(self, start: dict[str, Any], end: dict[str, Any]) -> list[Row]:
        """The rows of a batch an earlier run planned: its messages, taken back by id."""
        key = _key(end)
        if key not in self._batches:
            if start.get("run") not in (None, self.run) and _key(start) != key:
                # Spark re-runs a batch only once the one before it is committed.
                await self._settle(start)
            ids = offset_ids(end)
            if not ids and start != end and "ids" not in end:
                log.warning(
                    "lmq stream: batch %s..%s has no message ids (an offset of an earlier pylmq): it "
                    "replays empty and the queue redelivers its messages after their timeout",
                    start,
                    end,
                )
            self._batches[key] = await self._take_back(ids, f"replaying batch {key[1]} of run {key[0][:8]}")
        return [self._held[i].row for i in self._batches[key] if i in self._held]

    async def _hold(self, offset: dict[str, Any]) -> None:
        """Take an earlier run's batch back (held and extended), so that no pull takes its
        messages as new, until it is known to be committed (``ackOn=commit``)."""
        key = _key(offset)
        if key not in self._settled and key not in self._batches:
            self._batches[key] = await self._take_back(offset_ids(offset), "holding a batch until its commit")

    async def _settle(self, offset: dict[str, Any]) -> None:
        """Ack the messages of an earlier run's committed batch that are still on the node
        (the crash or stop may have come between its commit and its acks)."""
        key = _key(offset)
        if key in self._settled:
            return
        await self._hold(offset)
        self._settled.add(key)
        await self._ack_batches([key])

    async def _take_back(self, ids: dict[str, list[str]], why: str) -> list[str]:
        """Claim these messages into the reader's hold; the ids of those the node gave back."""
        node = self._get_node()
        taken: list[str] = []
        gone = 0
        async with self._lock():
            for queue, qids in ids.items():
                rows, missing = await node.claim(queue, qids)
                gone += len(missing)
                for row in rows:
                    self._held[row[1]] = InFlight(row[0], row[1], row)
                    taken.append(row[1])
        if ids:
            await self._learn_timeouts(set(ids))
            log.info("lmq stream: %s: %d messages taken back by id, %d gone", why, len(taken), gone)
            if gone and why.startswith("replaying"):
                log.warning(
                    "lmq stream: %s: %d of its messages are no longer on the node under their ids (acked, "
                    "or pulled by another consumer after their timeout): they are not in this batch",
                    why,
                    gone,
                )
        return taken

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
        while True:
            await asyncio.sleep(self._extend_interval())
            try:
                await self._extend()
            except Exception as e:
                log.warning("lmq stream: extending %d messages in flight failed: %s", len(self._held), e)

    async def _extend(self) -> None:
        # Under the lock: no ack runs meanwhile, so every id sent is still held when its answer
        # comes, and a not found is a real expiry.
        async with self._lock():
            node = self._get_node()
            for queue, ids in _by_queue(list(self._held.values())).items():
                _, missing = await node.reply_many("ext", queue, ids)
                if missing:
                    await self._recover(queue, missing)

    async def _recover(self, queue: str, ids: list[str]) -> None:
        """Messages whose deadline passed while held: take back those nobody pulled since (same
        id, nothing lost); the others were redelivered and will be processed twice."""
        rows, gone = await self._get_node().claim(queue, ids)
        for row in rows:
            self._held[row[1]] = InFlight(row[0], row[1], row)
        for i in gone:
            self._held.pop(i, None)
        self._redelivered += len(gone)
        if gone:
            log.warning(
                "lmq stream: %d messages of %r expired in flight and were redelivered (duplicates); "
                "raise the queue's timeout",
                len(gone),
                queue,
            )

    async def _ack_batches(self, keys: list[BatchKey]) -> None:
        msgs = [self._held[i] for k in keys for i in self._batches.get(k, ()) if i in self._held]
        if not msgs:
            for k in keys:
                self._batches.pop(k, None)
            return
        node = self._get_node()
        try:
            async with self._lock():
                for queue, ids in _by_queue(msgs).items():
                    acked, missing = await node.reply_many("ack", queue, ids)
                    if missing:
                        await self._recover(queue, missing)
                        again = [i for i in missing if i in self._held]
                        if again:
                            acked += (await node.reply_many("ack", queue, again))[0]
                    self._acked += len(acked)
                    for i in ids:
                        self._held.pop(i, None)
        except Exception as e:
            # Kept: the next trigger or commit acks them again.
            log.warning("lmq stream: acking %d messages failed: %s (retried on the next call)", len(msgs), e)
            return
        for k in keys:
            self._batches.pop(k, None)

    async def _shutdown(self) -> None:
        if self._extender is not None:
            self._extender.cancel()
            await asyncio.gather(self._extender, return_exceptions=True)
            self._extender = None
        node = self._node
        if node is None:
            return
        try:
            # Those of batches stay in processing: a restart takes them back by id (and before
            # their timeout, nobody else can take them). So do messages in no batch when a
            # restart can claim them by the holder tag: a nack would sort them at the time of the
            # nack, behind newer messages, and drop their holder records. Else they go back now.
            rows = [self._held[i].row for i in self._pulled.values() if i in self._held]
            self._pulled.clear()
            self._held.clear()
            if rows and self._tag_written and node.holder_api and node.batches:
                log.info(
                    "lmq stream: %d messages pulled for a batch Spark did not plan stay in processing: a "
                    "restart takes them back first by the holder tag, or the queue redelivers them after "
                    "its timeout",
                    len(rows),
                )
            elif rows:
                async with asyncio.timeout(STOP_GRACE):
                    await give_back(node, rows)
        finally:
            await node.close()
            self._node = None
