"""One queue's table: an ordered set of message records keyed by id, with a uuid index.

This is LMQ's ``lmq_lib`` (LMQ-FACTS section 1) for a table held in this process: enqueue with
accumulation, dequeue with redelivery by deadline and retry discard, done/retain/release/put_back.
It is the single implementation of those rules for every local store; the durable store only
adds a :class:`Journal` that records each mutation.

Complexity: the order is a binary heap of id tuples with lazy deletion (a heap entry is live
only while it ``is`` the current id of the record with that uuid), the index a dict by uuid.
Every operation is O(log n) amortised in queue depth; nothing scans the queue (LMQ's
``rfind`` does, for every ack).
"""

from __future__ import annotations

import heapq
from typing import Protocol

from pylmq.core.message import (
    Item,
    Message,
    MessageId,
    MessageType,
    Retry,
    State,
    new_uuid,
)

__all__ = ["AccumResult", "Journal", "QueueTable"]

AccumResult = str
"""What a push reports: ``"no"`` (not accumulated), ``"new"`` (window opened), ``"yes"``."""

# Fixed per-record overhead counted into `memory` besides bodies and metadata.
RECORD_OVERHEAD = 160


class Journal(Protocol):
    """Receives every mutation of a table, in order (the durable store logs them)."""

    def put(self, queue: str, msg: Message) -> None: ...

    def move(self, queue: str, old_uuid: bytes, msg: Message) -> None:
        """``old_uuid``'s record is replaced by ``msg`` with the same content."""
        ...

    def append(self, queue: str, uuid: bytes, item: Item) -> None: ...

    def delete(self, queue: str, uuid: bytes) -> None: ...


def _inc(retry: Retry) -> Retry:
    return None if retry is None else retry + 1


class QueueTable:
    __slots__ = ("_accum", "_by_uuid", "_heap", "_journal", "bytes", "name")

    def __init__(self, name: str, journal: Journal | None = None) -> None:
        self.name = name
        self._journal = journal
        self._by_uuid: dict[bytes, Message] = {}
        self._heap: list[MessageId] = []
        self._accum: Message | None = None
        self.bytes = 0

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._by_uuid)

    def get(self, uuid: bytes) -> Message | None:
        return self._by_uuid.get(uuid)

    def first(self) -> Message | None:
        heap, by_uuid = self._heap, self._by_uuid
        while heap:
            top = heap[0]
            msg = by_uuid.get(top[1])
            if msg is not None and msg.id is top:
                return msg
            heapq.heappop(heap)
        return None

    def waittime(self, now: float) -> float | None:
        """Seconds until the first record is deliverable (0 if now); ``None`` if empty."""
        msg = self.first()
        if msg is None:
            return None
        return max(0.0, msg.id[0] - now)

    def messages(self) -> list[Message]:
        """All records in id order (for snapshots, status and tests; O(n log n))."""
        return sorted(self._by_uuid.values(), key=lambda m: m.id)

    def snapshot(self) -> list[Message]:
        """All records in no order, as a list another thread may read while this table goes on
        changing (the durable store's compaction). Records are replaced, never changed in place,
        except the item list of the open accumulation record, which is therefore copied. O(n)."""
        acc = self._accum
        if acc is None or self._by_uuid.get(acc.id[1]) is not acc or not isinstance(acc.content, list):
            return list(self._by_uuid.values())
        by_uuid = dict(self._by_uuid)
        by_uuid[acc.id[1]] = Message(acc.id, acc.state, acc.type, acc.retry, list(acc.content))
        return list(by_uuid.values())

    # -- raw mutations (no journal): used by the operations below and by recovery ----------------

    def _insert(self, msg: Message) -> None:
        old = self._by_uuid.get(msg.id[1])
        if old is not None:
            self.bytes -= old.nbytes() + RECORD_OVERHEAD
        self._by_uuid[msg.id[1]] = msg
        self.bytes += msg.nbytes() + RECORD_OVERHEAD
        heapq.heappush(self._heap, msg.id)
        if len(self._heap) > 2 * len(self._by_uuid) + 1024:
            self._compact_heap()

    def _remove(self, uuid: bytes) -> Message | None:
        msg = self._by_uuid.pop(uuid, None)
        if msg is not None:
            self.bytes -= msg.nbytes() + RECORD_OVERHEAD
            if self._accum is msg:
                self._accum = None
        return msg

    def _compact_heap(self) -> None:
        # Stale entries (re-keyed or deleted records) pile up under ext/nack-heavy traffic;
        # rebuilding when they outnumber live ones keeps the heap O(n) and pushes O(log n).
        self._heap = [m.id for m in self._by_uuid.values()]
        heapq.heapify(self._heap)

    def restore(self, msg: Message) -> None:
        """Recovery: insert a record as it was (no journal)."""
        self._insert(msg)
        if msg.state is State.ACCUM and (self._accum is None or msg.id > self._accum.id):
            self._accum = msg

    def restore_move(self, old_uuid: bytes, msg: Message) -> None:
        old = self._remove(old_uuid)
        if old is not None:
            self._insert(Message(msg.id, msg.state, msg.type, msg.retry, old.content))

    def restore_append(self, uuid: bytes, item: Item) -> None:
        msg = self._by_uuid.get(uuid)
        if msg is not None and isinstance(msg.content, list):
            msg.content.append(item)
            self.bytes += len(item[1]) + sum(len(k) + len(v) for k, v in item[0])

    def restore_delete(self, uuid: bytes) -> None:
        self._remove(uuid)

    def clear(self) -> None:
        self._by_uuid.clear()
        self._heap.clear()
        self._accum = None
        self.bytes = 0

    # -- lmq_lib operations ----------------------------------------------------------------------

    def enqueue(self, item: Item, retry: Retry, accum: float, now: float) -> AccumResult:
        """Push one item. ``retry`` is the queue's retry property (deliveries = retry + 1)."""
        if accum <= 0:
            msg = Message((now, new_uuid()), State.AVAILABLE, MessageType.NORMAL, _inc(retry), item)
            self._insert(msg)
            if self._journal is not None:
                self._journal.put(self.name, msg)
            return "no"
        cur = self._accum
        if cur is not None and cur.state is State.ACCUM and cur.id[0] >= now and self._by_uuid.get(cur.id[1]) is cur:
            assert isinstance(cur.content, list)
            cur.content.append(item)
            self.bytes += len(item[1]) + sum(len(k) + len(v) for k, v in item[0])
            if self._journal is not None:
                self._journal.append(self.name, cur.id[1], item)
            return "yes"
        msg = Message((now + accum, new_uuid()), State.ACCUM, MessageType.COMPOUND, _inc(retry), [item])
        self._insert(msg)
        self._accum = msg
        if self._journal is not None:
            self._journal.put(self.name, msg)
        return "new"

    def dequeue(self, timeout: float, now: float) -> tuple[Message, float] | None:
        """Take the first deliverable record: a fresh id ``(now + timeout, new uuid)``, state
        processing, retry - 1. Records whose retry is spent are discarded on the way.
        Returns the delivered record and its retention (seconds it waited)."""
        while True:
            msg = self.first()
            if msg is None or msg.id[0] > now:
                return None
            old_uuid = msg.id[1]
            if msg.retry is not None and msg.retry <= 0:
                self._remove(old_uuid)
                if self._journal is not None:
                    self._journal.delete(self.name, old_uuid)
                continue
            self._remove(old_uuid)
            retry = None if msg.retry is None else msg.retry - 1
            new = Message((now + timeout, new_uuid()), State.PROCESSING, msg.type, retry, msg.content)
            self._insert(new)
            if self._journal is not None:
                self._journal.move(self.name, old_uuid, new)
            return new, now - msg.id[0]

    def _processing(self, uuid: bytes, now: float) -> Message | None:
        msg = self._by_uuid.get(uuid)
        if msg is None or msg.state is not State.PROCESSING or msg.id[0] < now:
            return None
        return msg

    def done(self, uuid: bytes, now: float) -> bool:
        if self._processing(uuid, now) is None:
            return False
        self._remove(uuid)
        if self._journal is not None:
            self._journal.delete(self.name, uuid)
        return True

    def _rekey(self, old: Message, ts: float, state: State, retry: Retry) -> None:
        uuid = old.id[1]
        self._remove(uuid)
        new = Message((ts, uuid), state, old.type, retry, old.content)
        self._insert(new)
        if self._journal is not None:
            self._journal.move(self.name, uuid, new)

    def retain(self, uuid: bytes, timeout: float, now: float) -> bool:
        msg = self._processing(uuid, now)
        if msg is None:
            return False
        self._rekey(msg, now + timeout, State.PROCESSING, msg.retry)
        return True

    def release(self, uuid: bytes, now: float) -> bool:
        """nack: available again now; the retry spent by the delivery stays spent."""
        msg = self._processing(uuid, now)
        if msg is None:
            return False
        self._rekey(msg, now, State.AVAILABLE, msg.retry)
        return True

    def put_back(self, uuid: bytes, now: float) -> bool:
        """The receiver is gone: available again and the lost delivery costs no retry."""
        msg = self._processing(uuid, now)
        if msg is None:
            return False
        self._rekey(msg, now, State.AVAILABLE, _inc(msg.retry))
        return True
