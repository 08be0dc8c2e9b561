"""One queue's table: an ordered set of message records keyed by id, with a uuid index.

This is LMQ's ``lmq_lib`` (LMQ-FACTS section 1) for a table held in this process: enqueue with
accumulation, dequeue with redelivery by deadline and retry discard, done/retain/release/put_back.
It is the single implementation of those rules for every local store; the durable store only
adds a :class:`Journal` that records each mutation.

Complexity: the order is a binary heap with lazy deletion, the index a dict by uuid. Every
operation is O(log n) amortised in queue depth; nothing scans the queue (LMQ's ``rfind`` does,
for every ack).

Memory (issue #5: a million queued 100-byte messages in 300 MB): :class:`Message` is the value
the table hands out, but a deep queue of them costs about 500 bytes a message (the object, its id
tuple, float, uuid bytes, content tuple, index entry). So normal messages are kept as *compact
records*: one ``bytes`` each, ``ts`` (big-endian double) | uuid (16) | state | retry | metadata
ref | body, about 60 bytes over the body's own size. ``ts`` is positive, so the bytes of
``(ts, uuid)`` sort as the id does, and the heap compares records in C:

- an available record is its own heap entry, live while the index maps its uuid to that very
  object; a processing record's entry is its 24-byte ``(ts, uuid)`` prefix (live while a
  processing record with that prefix is indexed), so an acked delivery leaves 64 stale bytes in
  the heap until it is popped, not the whole body;
- the index is keyed by an int of 60 bits of the uuid (a 32-byte object, against 64 for the
  uuid bytes); the table draws its own uuids so that these keys are unique, and a record whose
  key is taken (a uuid from elsewhere) goes to ``_other``, keyed by the whole uuid;
- metadata is a one-byte reference into the table's list of distinct metadata (the same few
  content types on nearly every message);
- nothing in a compact record is tracked by the cyclic GC, so a deep queue adds no GC work.

What does not fit (compound messages, the accumulation record that grows, bodies over
:data:`COMPACT_MAX`, a 256th distinct metadata, retry over 254, a ts that is not positive) stays
a :class:`Message` in ``_other``, ordered by a second heap of ids as before; the first record is
the smaller of the two heaps' live tops.
"""

from __future__ import annotations

import heapq
import struct
from collections.abc import Iterator
from typing import Protocol

from pylmq.core.message import (
    Item,
    Message,
    MessageId,
    MessageType,
    Metadata,
    Retry,
    State,
    new_uuid,
)

__all__ = ["COMPACT_MAX", "RECORD_OVERHEAD", "AccumResult", "Journal", "QueueTable", "TableSnapshot"]

AccumResult = str
"""What a push reports: ``"no"`` (not accumulated), ``"new"`` (window opened), ``"yes"``."""

# Fixed per-record overhead counted into `memory` besides bodies and metadata.
RECORD_OVERHEAD = 160

COMPACT_MAX = 4096
"""Largest body kept in a compact record: each delivery copies the body into a new record,
while for a larger body the :class:`Message` around it costs relatively little."""

# ts, uuid, state, retry, metadata ref; the body follows.
_HEAD = struct.Struct(">d16sBBB")
_HEAD_SIZE = _HEAD.size
_ID_SIZE = 24  # ts and uuid: a processing record's heap entry
_TS = struct.Struct(">d")
_U64 = struct.Struct(">Q")
# The index key: the last 8 bytes of the uuid but for the variant bits of a v4 uuid, i.e. 60
# random bits, an int small enough for two 30-bit digits.
_KEY_MASK = (1 << 60) - 1
_AVAILABLE, _PROCESSING = 0, 1
_STATE_OF = (State.AVAILABLE, State.PROCESSING)
_CODE_OF = {State.AVAILABLE: _AVAILABLE, State.PROCESSING: _PROCESSING}
_INFINITY = 255  # retry code of ``None``; 0-254 are themselves


class _MetadataTable:
    """The distinct metadata of one table's compact records, by one-byte reference. Only ever
    appended to, so a compaction thread may read it while the loop appends."""

    __slots__ = ("lens", "mds", "refs")

    def __init__(self) -> None:
        self.mds: list[Metadata] = [()]
        self.refs: dict[Metadata, int] = {(): 0}
        self.lens: list[int] = [0]

    def ref(self, md: Metadata) -> int:
        """The reference of this metadata, or -1 when it cannot have one."""
        try:
            ref = self.refs.get(md)
        except TypeError:  # unhashable: not a tuple of byte pairs
            return -1
        if ref is not None:
            return ref
        if len(self.mds) > 255 or type(md) is not tuple:
            return -1
        for pair in md:
            if not (type(pair) is tuple and len(pair) == 2 and type(pair[0]) is bytes and type(pair[1]) is bytes):
                return -1
        ref = len(self.mds)
        self.lens.append(sum(len(k) + len(v) for k, v in md))
        self.mds.append(md)
        self.refs[md] = ref
        return ref


def _key(uuid: bytes) -> int:
    """Index key of a 16-byte uuid."""
    k: int = _U64.unpack_from(uuid, 8)[0]
    return k & _KEY_MASK


def _rec_key(entry: bytes) -> int:
    """Index key of a record's (or heap entry's) uuid."""
    k: int = _U64.unpack_from(entry, 16)[0]
    return k & _KEY_MASK


def _retry_code(retry: Retry) -> int:
    """The record's retry byte, or -1 when the value does not fit."""
    if retry is None:
        return _INFINITY
    return retry if 0 <= retry < _INFINITY else -1


def _decode(rec: bytes, mds: list[Metadata]) -> Message:
    ts, uuid, state, code, ref = _HEAD.unpack_from(rec)
    retry = None if code == _INFINITY else code
    return Message((ts, uuid), _STATE_OF[state], MessageType.NORMAL, retry, (mds[ref], rec[_HEAD_SIZE:]))


def _rec_ts(rec: bytes) -> float:
    ts: float = _TS.unpack_from(rec)[0]
    return ts


class TableSnapshot:
    """A table's records as frozen by :meth:`QueueTable.snapshot`: safe to read in another
    thread while the table goes on changing; yields Messages, in no order."""

    __slots__ = ("_entries", "_mds")

    def __init__(self, entries: list[bytes | Message], mds: list[Metadata]) -> None:
        self._entries = entries
        self._mds = mds

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Message]:
        mds = self._mds
        for e in self._entries:
            yield _decode(e, mds) if type(e) is bytes else e  # type: ignore[misc]


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


Entry = bytes | Message
"""A record as the table holds it: compact bytes or a Message."""


class QueueTable:
    __slots__ = ("_accum", "_heap", "_index", "_journal", "_md", "_other", "_side", "bytes", "name")

    def __init__(self, name: str, journal: Journal | None = None) -> None:
        self.name = name
        self._journal = journal
        # Compact records by the key of their uuid (see the module's docstring).
        self._index: dict[int, bytes] = {}
        # By whole uuid: Messages, and compact records whose index key was taken.
        self._other: dict[bytes, Entry] = {}
        # Compact records in id order: available records themselves, processing ones' ids.
        self._heap: list[bytes] = []
        # Ids of the Messages in _other, in order.
        self._side: list[MessageId] = []
        self._md = _MetadataTable()
        self._accum: Message | None = None
        self.bytes = 0

    # -- finding records ---------------------------------------------------------------------------

    def _find(self, uuid: bytes) -> Entry | None:
        if len(uuid) == 16:
            rec = self._index.get(_key(uuid))
            if rec is not None and rec[8:24] == uuid:
                return rec
        other = self._other
        return other.get(uuid) if other else None

    def _compact_top(self) -> bytes | None:
        """The first live compact record; stale heap entries on top are dropped."""
        heap, index, other = self._heap, self._index, self._other
        while heap:
            e = heap[0]
            rec = index.get(_rec_key(e))
            if rec is e:
                return rec
            if len(e) == _ID_SIZE:
                if other and (rec is None or not rec.startswith(e)):
                    o = other.get(e[8:24])
                    rec = o if type(o) is bytes else None
                if rec is not None and rec[24] == _PROCESSING and rec.startswith(e):
                    return rec
            elif other and other.get(e[8:24]) is e:
                return e
            heapq.heappop(heap)
        return None

    def _side_top(self) -> Message | None:
        side, other = self._side, self._other
        while side:
            top = side[0]
            msg = other.get(top[1])
            if type(msg) is Message and msg.id is top:
                return msg
            heapq.heappop(side)
        return None

    def _first(self) -> Entry | None:
        rec = self._compact_top()
        if not self._side:
            return rec
        msg = self._side_top()
        if msg is None or rec is None:
            return rec if msg is None else msg
        return rec if (_rec_ts(rec), rec[8:24]) < msg.id else msg

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._index) + len(self._other)

    def get(self, uuid: bytes) -> Message | None:
        e = self._find(uuid)
        return _decode(e, self._md.mds) if type(e) is bytes else e  # type: ignore[return-value]

    def first(self) -> Message | None:
        e = self._first()
        return _decode(e, self._md.mds) if type(e) is bytes else e  # type: ignore[return-value]

    def waittime(self, now: float) -> float | None:
        """Seconds until the first record is deliverable (0 if now); ``None`` if empty."""
        e = self._first()
        if e is None:
            return None
        ts = _rec_ts(e) if type(e) is bytes else e.id[0]  # type: ignore[union-attr]
        return max(0.0, ts - now)

    def _entries(self) -> list[Entry]:
        entries: list[Entry] = list(self._index.values())
        entries += self._other.values()
        return entries

    def messages(self) -> list[Message]:
        """All records in id order (for status and tests; O(n log n))."""
        return sorted(TableSnapshot(self._entries(), self._md.mds), key=lambda m: m.id)

    def snapshot(self) -> TableSnapshot:
        """All records, to be read in another thread while this table goes on changing (the
        durable store's compaction). Compact records and Messages are replaced, never changed
        in place, except the item list of the open accumulation record, which is therefore
        copied. O(n) references on the caller's thread; decoding happens in the reader's."""
        entries = self._entries()
        acc = self._accum
        if acc is not None and self._other.get(acc.id[1]) is acc and isinstance(acc.content, list):
            i = next(i for i in range(len(self._index), len(entries)) if entries[i] is acc)
            entries[i] = Message(acc.id, acc.state, acc.type, acc.retry, list(acc.content))
        return TableSnapshot(entries, self._md.mds)

    # -- raw mutations (no journal): used by the operations below and by recovery ----------------

    def _encode(self, msg: Message) -> bytes | None:
        """``msg`` as a compact record, or ``None`` when it must stay a Message."""
        ts, uuid = msg.id
        state, content = msg.state, msg.content
        if msg.type is not MessageType.NORMAL or state is State.ACCUM or not isinstance(content, tuple):
            return None
        if not (type(ts) is float and ts > 0.0 and type(uuid) is bytes and len(uuid) == 16):
            return None
        md, body = content
        code, ref = _retry_code(msg.retry), self._md.ref(md)
        if code < 0 or ref < 0 or type(body) is not bytes or len(body) > COMPACT_MAX:
            return None
        return _HEAD.pack(ts, uuid, _CODE_OF[state], code, ref) + body

    def _place(self, rec: bytes) -> None:
        """Add a compact record whose uuid is not in the table."""
        if self._index.setdefault(_rec_key(rec), rec) is not rec:
            self._other[rec[8:24]] = rec
        heapq.heappush(self._heap, rec[:_ID_SIZE] if rec[24] == _PROCESSING else rec)
        self.bytes += len(rec) - _HEAD_SIZE + self._md.lens[rec[26]] + RECORD_OVERHEAD
        if len(self._heap) > 2 * len(self) + 1024:
            self._compact_heaps()

    def _insert(self, msg: Message) -> None:
        """Add a record, replacing the one with its uuid if any."""
        uuid = msg.id[1]
        old = self._find(uuid)
        if old is not None:
            self._drop(uuid, old)
        rec = self._encode(msg)
        if rec is not None:
            self._place(rec)
            return
        self._other[uuid] = msg
        self.bytes += msg.nbytes() + RECORD_OVERHEAD
        heapq.heappush(self._side, msg.id)
        if len(self._side) > 2 * len(self._other) + 1024:
            self._compact_heaps()

    def _drop(self, uuid: bytes, e: Entry) -> None:
        """Remove the record ``e`` found under ``uuid``; its heap entry goes stale."""
        if type(e) is bytes:
            k = _rec_key(e)
            if self._index.get(k) is e:
                del self._index[k]
            else:
                del self._other[uuid]
            self.bytes -= len(e) - _HEAD_SIZE + self._md.lens[e[26]] + RECORD_OVERHEAD
            return
        del self._other[uuid]
        assert isinstance(e, Message)
        self.bytes -= e.nbytes() + RECORD_OVERHEAD
        if self._accum is e:
            self._accum = None

    def _remove(self, uuid: bytes) -> Entry | None:
        e = self._find(uuid)
        if e is not None:
            self._drop(uuid, e)
        return e

    def _compact_heaps(self) -> None:
        # Stale entries (re-keyed or deleted records) pile up under ext/nack-heavy traffic;
        # rebuilding when they outnumber live ones keeps the heaps O(n) and pushes O(log n).
        heap = [r[:_ID_SIZE] if r[24] == _PROCESSING else r for r in self._index.values()]
        side: list[MessageId] = []
        for e in self._other.values():
            if type(e) is bytes:
                heap.append(e[:_ID_SIZE] if e[24] == _PROCESSING else e)
            else:
                side.append(e.id)  # type: ignore[union-attr]
        heapq.heapify(heap)
        heapq.heapify(side)
        self._heap, self._side = heap, side

    def _fresh_uuid(self) -> bytes:
        """A new uuid whose index key no compact record of this table has."""
        index = self._index
        uuid = new_uuid()
        while _key(uuid) in index:
            uuid = new_uuid()
        return uuid

    def _rekey(
        self, uuid: bytes, e: Entry, ts: float, new_uuid_: bytes, state: State, retry_delta: int, want: bool
    ) -> Message | None:
        """Replace record ``e`` by one with a new id, state and retry (+ delta), same content.
        Returns the new record as a Message if ``want`` or a journal is to hear of it."""
        self._drop(uuid, e)
        if type(e) is bytes:
            code = e[25]
            if code != _INFINITY:
                code += retry_delta
            if ts > 0.0 and code < _INFINITY:
                ref, body = e[26], e[_HEAD_SIZE:]
                self._place(_HEAD.pack(ts, new_uuid_, _CODE_OF[state], code, ref) + body)
                if not want and self._journal is None:
                    return None
                retry = None if code == _INFINITY else code
                return Message((ts, new_uuid_), state, MessageType.NORMAL, retry, (self._md.mds[ref], body))
            old = _decode(e, self._md.mds)
        else:
            assert isinstance(e, Message)
            old = e
        retry = old.retry if retry_delta == 0 or old.retry is None else old.retry + retry_delta
        msg = Message((ts, new_uuid_), state, old.type, retry, old.content)
        self._insert(msg)
        return msg

    def restore(self, msg: Message) -> None:
        """Recovery: insert a record as it was (no journal)."""
        self._insert(msg)
        if msg.state is State.ACCUM and (self._accum is None or msg.id > self._accum.id):
            self._accum = msg

    def restore_move(self, old_uuid: bytes, msg: Message) -> None:
        """Recovery: ``old_uuid``'s record takes ``msg``'s id, state and retry; its content stays."""
        old = self._remove(old_uuid)
        if old is None:
            return
        if type(old) is bytes:
            content: Item | list[Item] = (self._md.mds[old[26]], old[_HEAD_SIZE:])
            mtype = MessageType.NORMAL
        else:
            assert isinstance(old, Message)
            content, mtype = old.content, old.type
        self._insert(Message(msg.id, msg.state, mtype, msg.retry, content))

    def restore_append(self, uuid: bytes, item: Item) -> None:
        msg = self._other.get(uuid)
        if isinstance(msg, Message) and isinstance(msg.content, list):
            msg.content.append(item)
            self.bytes += len(item[1]) + sum(len(k) + len(v) for k, v in item[0])

    def restore_delete(self, uuid: bytes) -> None:
        self._remove(uuid)

    def clear(self) -> None:
        self._index.clear()
        self._other.clear()
        self._heap.clear()
        self._side.clear()
        self._md = _MetadataTable()  # a snapshot being written may still read the old one
        self._accum = None
        self.bytes = 0

    # -- lmq_lib operations ----------------------------------------------------------------------

    def enqueue(self, item: Item, retry: Retry, accum: float, now: float) -> AccumResult:
        """Push one item. ``retry`` is the queue's retry property (deliveries = retry + 1)."""
        if accum <= 0:
            retry = _inc(retry)
            body, ref, code = item[1], self._md.ref(item[0]), _retry_code(retry)
            if ref >= 0 and code >= 0 and type(body) is bytes and len(body) <= COMPACT_MAX and now > 0.0:
                uuid = self._fresh_uuid()
                self._place(_HEAD.pack(now, uuid, _AVAILABLE, code, ref) + body)
                if self._journal is not None:
                    self._journal.put(self.name, Message((now, uuid), State.AVAILABLE, MessageType.NORMAL, retry, item))
                return "no"
            msg = Message((now, new_uuid()), State.AVAILABLE, MessageType.NORMAL, retry, item)
            self._insert(msg)
            if self._journal is not None:
                self._journal.put(self.name, msg)
            return "no"
        cur = self._accum
        if cur is not None and cur.state is State.ACCUM and cur.id[0] >= now and self._other.get(cur.id[1]) is cur:
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
            e = self._first()
            if e is None:
                return None
            if type(e) is bytes:
                ts = _rec_ts(e)
                if ts > now:
                    return None
                heapq.heappop(self._heap)  # e's entry: popped now rather than left stale
                old_uuid, code = e[8:24], e[25]
                if code == 0:
                    self._drop(old_uuid, e)
                    if self._journal is not None:
                        self._journal.delete(self.name, old_uuid)
                    continue
                delta = 0 if code == _INFINITY else -1
            else:
                assert isinstance(e, Message)
                ts, old_uuid = e.id
                if ts > now:
                    return None
                if e.retry is not None and e.retry <= 0:
                    self._drop(old_uuid, e)
                    if self._journal is not None:
                        self._journal.delete(self.name, old_uuid)
                    continue
                delta = 0 if e.retry is None else -1
            new = self._rekey(old_uuid, e, now + timeout, self._fresh_uuid(), State.PROCESSING, delta, True)
            assert new is not None
            if self._journal is not None:
                self._journal.move(self.name, old_uuid, new)
            return new, now - ts

    def _processing(self, uuid: bytes, now: float) -> Entry | None:
        e = self._find(uuid)
        if e is None:
            return None
        if type(e) is bytes:
            return e if e[24] == _PROCESSING and _rec_ts(e) >= now else None
        assert isinstance(e, Message)
        return e if e.state is State.PROCESSING and e.id[0] >= now else None

    def done(self, uuid: bytes, now: float) -> bool:
        e = self._processing(uuid, now)
        if e is None:
            return False
        self._drop(uuid, e)
        if self._journal is not None:
            self._journal.delete(self.name, uuid)
        return True

    def _move(self, uuid: bytes, e: Entry, ts: float, state: State, retry_delta: int) -> None:
        new = self._rekey(uuid, e, ts, uuid, state, retry_delta, False)
        if self._journal is not None:
            assert new is not None
            self._journal.move(self.name, uuid, new)

    def retain(self, uuid: bytes, timeout: float, now: float) -> bool:
        e = self._processing(uuid, now)
        if e is None:
            return False
        self._move(uuid, e, now + timeout, State.PROCESSING, 0)
        return True

    def release(self, uuid: bytes, now: float) -> bool:
        """nack: available again now; the retry spent by the delivery stays spent."""
        e = self._processing(uuid, now)
        if e is None:
            return False
        self._move(uuid, e, now, State.AVAILABLE, 0)
        return True

    def put_back(self, uuid: bytes, now: float) -> bool:
        """The receiver is gone: available again and the lost delivery costs no retry."""
        e = self._processing(uuid, now)
        if e is None:
            return False
        self._move(uuid, e, now, State.AVAILABLE, 1)
        return True
