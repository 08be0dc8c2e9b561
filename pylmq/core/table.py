"""One queue's table: an ordered set of message records keyed by id, with a uuid index.

This is LMQ's ``lmq_lib`` (docs/lmq-contract.md#message-states-and-redelivery) for a table held in
this process: enqueue with accumulation, dequeue with redelivery by deadline and retry discard,
done/retain/release/put_back.
It is the single implementation of those rules for every local store; the durable store only
adds a :class:`Journal` that records each mutation.

Complexity: every operation is O(log n) amortised in queue depth, most O(1); nothing scans the
queue (LMQ's ``rfind`` does, for every ack). Orders drop removed records lazily, when they come
first.

Memory (docs/decisions/compact-queue-records.md): :class:`StoredMessage` is the value the table hands
out, but a deep queue of them costs about 500 bytes a message (the object, its id tuple, float,
uuid bytes, content tuple, index entry) and the cyclic GC walks each. So normal messages are
kept as *compact records*: one ``bytes`` each, ``ts`` (big-endian double) | uuid (16) | state | retry | metadata
ref | body, 60 bytes over the body's own size. ``ts`` is positive, so the bytes of ``(ts,
uuid)`` sort as the id does and orders compare records in C:

- available records are kept only in their order (:class:`_Order`, mostly tuples of records in
  push order): about 170 bytes a 100-byte message. Nothing looks one up by uuid while serving
  (ack, ext and nack need a processing record) but a claim, and a claim can only name one that
  was delivered and is available again under its uuid (nacked, put back): those few are indexed
  by uuid. Recovery looks records up through a lookup it builds;
- processing records are indexed by an int of 53 bits of their uuid, its
  :func:`~pylmq.core.message.msg_key` (a 32-byte object, against 64 for the uuid bytes; the table
  draws uuids whose keys are free, a foreign uuid whose key is taken goes to ``_other`` by its
  whole uuid), and ordered by their 24-byte ``(ts, uuid)``
  prefixes, deadlines, apart from the backlog: an acked one is dropped as soon as it comes first;
- metadata is a one-byte reference into the table's list of distinct metadata (the same few
  content types on nearly every message);
- the cyclic GC does not look into bytes, ints, or tuples and dicts of them: a deep queue adds
  nothing to a full collection.

What does not fit (compound messages, the accumulation record that grows, bodies over
:data:`COMPACT_MAX`, a 256th distinct metadata, retry over 254, a ts that is not positive, and
every record with a :class:`~pylmq.core.message.MessageExt`) stays a :class:`StoredMessage` in
``_other``, ordered by a heap of ids as before. The first record is the first of the three orders'.

Per-message options (docs/message-options.md). A record's ts is when it becomes due, so a delay
is only a later ts; such a push goes straight to the heap of its order (:meth:`_Order.push_late`)
rather than to the run, which would send every later push to the heap while it stays. Records
with a priority above 0 are kept apart, in one heap of ids per priority level (``_plevels``);
dequeue takes the first record of the highest level whose first record is due before anything
else. Levels whose first record was not due wait in ``_pwait`` (by when it is due) rather than
in ``_plist``, the levels looked at: no record moves between heaps, so a dequeue never does work
in proportion to the records that became due, nor looks at levels with nothing due. The key of
a processing record in ``_other`` is kept in ``_okeys``, so that :meth:`QueueTable.find_delivery`
(queue_server's integer ``msg_id``) is exact and fresh uuids avoid those keys too. Of the records
of a message group only the group's head is in ``_side``; the others wait in the group's heap by
push order (``_held``), so one record of a group is delivered at a time, in order.
"""

from __future__ import annotations

import bisect
import heapq
import struct
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import NamedTuple, Protocol

from pylmq.core.message import (
    MSG_KEY_BITS,
    DeadLetter,
    DeadReason,
    Inherit,
    Item,
    MessageExt,
    MessageId,
    Metadata,
    PushOptions,
    Retry,
    State,
    StoredMessage,
    StoredMessageType,
    new_uuid,
)
from pylmq.errors import MessageNotFound

__all__ = [
    "COMPACT_MAX",
    "PEEK_MAX",
    "RECORD_OVERHEAD",
    "AccumResult",
    "Journal",
    "LaterCount",
    "QueueCounts",
    "QueueTable",
    "TableSnapshot",
    "dead_letter_of",
    "dead_letter_record",
    "page",
    "requeued_record",
]

AccumResult = str
"""What a push reports: ``"no"`` (not accumulated), ``"new"`` (window opened), ``"yes"``."""

# Fixed per-record overhead counted into `memory` besides bodies and metadata.
RECORD_OVERHEAD = 160

COMPACT_MAX = 4096
"""Largest body kept in a compact record: each delivery copies the body into a new record,
while for a larger body the :class:`StoredMessage` around it costs relatively little."""

# ts, uuid, state, retry, metadata ref; the body follows.
_HEAD = struct.Struct(">d16sBBB")
_HEAD_SIZE = _HEAD.size
_ID_SIZE = 24  # ts and uuid: a processing record's entry in its order
_TS = struct.Struct(">d")
_U64 = struct.Struct(">Q")
# The index key: the last 53 bits of the uuid (msg_key: random in a v4 uuid), an int small enough
# for two 30-bit digits and for a JSON number every client parses exactly.
_KEY_MASK = (1 << MSG_KEY_BITS) - 1
_AVAILABLE, _PROCESSING = 0, 1
# Enum members bound once: reading State.X costs a class attribute lookup, hashing one a
# Python-level __hash__, each about as much as a dict operation on the hot paths.
_S_AVAILABLE, _S_PROCESSING, _S_ACCUM = State.AVAILABLE, State.PROCESSING, State.ACCUM
_NORMAL, _COMPOUND = StoredMessageType.NORMAL, StoredMessageType.COMPOUND
_STATE_OF = (_S_AVAILABLE, _S_PROCESSING)
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
    """Index key of a record's (or its id's) uuid."""
    k: int = _U64.unpack_from(entry, 16)[0]
    return k & _KEY_MASK


def _retry_code(retry: Retry) -> int:
    """The record's retry byte, or -1 when the value does not fit."""
    if retry is None:
        return _INFINITY
    return retry if type(retry) is int and 0 <= retry < _INFINITY else -1


def _decode(rec: bytes, mds: list[Metadata]) -> StoredMessage:
    ts, uuid, state, code, ref = _HEAD.unpack_from(rec)
    retry = None if code == _INFINITY else code
    return StoredMessage((ts, uuid), _STATE_OF[state], _NORMAL, retry, (mds[ref], rec[_HEAD_SIZE:]))


def _rec_ts(rec: bytes) -> float:
    ts: float = _TS.unpack_from(rec)[0]
    return ts


class TableSnapshot:
    """A table's records as frozen by :meth:`QueueTable.snapshot`: safe to read in another
    thread while the table goes on changing; yields Messages, in no order."""

    __slots__ = ("_entries", "_mds")

    def __init__(self, entries: list[bytes | StoredMessage], mds: list[Metadata]) -> None:
        self._entries = entries
        self._mds = mds

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[StoredMessage]:
        # _decode, inlined: this runs over every record of the store, in the compaction thread.
        mds, unpack, states, normal = self._mds, _HEAD.unpack_from, _STATE_OF, _NORMAL
        for e in self._entries:
            if type(e) is bytes:
                ts, uuid, state, code, ref = unpack(e)
                retry = None if code == _INFINITY else code
                yield StoredMessage((ts, uuid), states[state], normal, retry, (mds[ref], e[_HEAD_SIZE:]))
            else:
                yield e  # type: ignore[misc]


class Journal(Protocol):
    """Receives every mutation of a table, in order (the durable store logs them)."""

    def put(self, queue: str, msg: StoredMessage) -> None: ...

    def move(self, queue: str, old_uuid: bytes, msg: StoredMessage) -> None:
        """``old_uuid``'s record is replaced by ``msg`` with the same content."""
        ...

    def append(self, queue: str, uuid: bytes, item: Item) -> None: ...

    def delete(self, queue: str, uuid: bytes) -> None: ...

    def transfer(self, from_queue: str, uuid: bytes, to_queue: str, msg: StoredMessage) -> None:
        """``uuid``'s record left ``from_queue`` and became ``msg`` in ``to_queue`` (a dead
        letter, or one requeued to its origin), with the same content: one atomic change."""
        ...


class QueueCounts(NamedTuple):
    """A queue's records by what a receiver sees of them now (SQS's ApproximateNumberOf*)."""

    visible: int
    """Due and not in processing: the next pulls can take them."""
    in_flight: int
    """In processing: delivered and neither acked nor redelivered yet (one whose deadline
    passed counts here until a pull redelivers it, as its state is processing until then)."""
    delayed: int
    """Not in processing and due later: delayed pushes, an accumulation window still open."""


class LaterCount:
    """How many of a table's records, not in processing, are due after now, in O(log n)
    amortised per record that is ever due later, O(1) for the others and no scan.

    A record due later is not found by its position (it may sit in any of a table's orders),
    so the count keeps the ts of every record added while due later than :attr:`clock` (the
    latest time the table was told), and the ts of those removed while still due later; both
    heaps drop what is no longer later than the clock. The count is the difference. Exact with
    a clock that does not go back, because a record removed while due later than the clock was
    due later than it when it came. A table whose records came in without a time (recovery)
    starts untracked (``later`` None) and is walked once at the next :meth:`count`.
    """

    __slots__ = ("clock", "later", "left")

    def __init__(self) -> None:
        self.clock = 0.0
        self.later: list[float] | None = []
        self.left: list[float] = []

    def tick(self, now: float) -> None:
        if now > self.clock:
            self.clock = now

    def add(self, ts: float) -> None:
        """A record not in processing came in, due at ``ts``."""
        later = self.later
        if later is not None and ts > self.clock:
            if later and later[0] <= self.clock:
                self._prune()
            heapq.heappush(later, ts)

    def remove(self, ts: float) -> None:
        """A record not in processing, due at ``ts``, left (delivered, claimed, dropped)."""
        if self.later and ts > self.clock:
            heapq.heappush(self.left, ts)

    def untrack(self) -> None:
        self.later, self.left = None, []

    def reset(self) -> None:
        self.later, self.left = [], []

    def _prune(self) -> None:
        later, left, clock = self.later, self.left, self.clock
        assert later is not None
        while later and later[0] <= clock:
            heapq.heappop(later)
        while left and left[0] <= clock:
            heapq.heappop(left)

    def count(self, now: float, due: Callable[[], Iterable[float]]) -> int:
        """Records due after ``now``; ``due`` gives the ts of every record not in processing
        (walked only when the count is untracked)."""
        self.tick(now)
        clock = self.clock
        if self.later is None:
            later = [ts for ts in due() if ts > clock]
            heapq.heapify(later)
            self.later, self.left = later, []
        else:
            self._prune()
        return len(self.later) - len(self.left)


def _inc(retry: Retry) -> Retry:
    return None if retry is None else retry + 1


Entry = bytes | StoredMessage
"""A record as the table holds it: compact bytes or a StoredMessage."""

_CHUNK = 256


class _Order:
    """Byte strings in ascending order, first one out.

    Those that come in order (nearly all: ids grow with the clock) form a run, taken from the
    front in O(1), where a heap's sift-down would touch log n entries spread over memory; the
    others go to a heap, ``rest``. The run is kept as tuples of :data:`_CHUNK` entries plus the
    list being filled: the cyclic GC stops looking into a tuple of untracked objects, while a
    deque or list of a million would be walked through on every full collection.
    """

    __slots__ = ("_chunk", "_chunks", "_head", "_n", "_tail", "rest")

    def __init__(self, entries: list[bytes] | None = None, chunk: int = _CHUNK) -> None:
        self._chunk = chunk
        self._chunks: deque[tuple[bytes, ...]] = deque()
        self._tail: list[bytes] = []
        self._head = 0  # entries of the run's first container already taken
        self._n = 0  # entries in the run
        self.rest: list[bytes] = entries or []
        heapq.heapify(self.rest)

    @classmethod
    def of_sorted(cls, entries: list[bytes]) -> _Order:
        order = cls()
        for e in entries:
            order.push(e)
        return order

    def __len__(self) -> int:
        return self._n + len(self.rest)

    def entries(self) -> list[bytes]:
        """The entries in no particular order (chunks copied whole: a million take milliseconds)."""
        out: list[bytes] = []
        head = self._head
        for chunk in self._chunks:
            out += chunk[head:] if head else chunk
            head = 0
        out += self._tail[head:]
        out += self.rest
        return out

    def push(self, e: bytes) -> None:
        tail = self._tail
        if self._n and e < (tail[-1] if tail else self._chunks[-1][-1]):
            heapq.heappush(self.rest, e)
            return
        tail.append(e)
        self._n += 1
        if len(tail) >= self._chunk:
            self._chunks.append(tuple(tail))
            tail.clear()

    def push_late(self, e: bytes) -> None:
        """Add an entry known to come after those pushed since (a delayed record): to the heap,
        so that the run goes on taking the pushes due before it."""
        heapq.heappush(self.rest, e)

    def first(self) -> bytes | None:
        run = (self._chunks[0] if self._chunks else self._tail)[self._head] if self._n else None
        rest = self.rest
        if rest and (run is None or rest[0] < run):
            return rest[0]
        return run

    def pop_first(self) -> None:
        chunks, rest = self._chunks, self.rest
        if rest:
            run = (chunks[0] if chunks else self._tail)[self._head] if self._n else None
            if run is None or rest[0] < run:
                heapq.heappop(rest)
                return
        self._n -= 1
        self._head += 1
        if chunks:
            if self._head == len(chunks[0]):
                chunks.popleft()
                self._head = 0
        elif self._head == len(self._tail):
            self._tail.clear()
            self._head = 0

    def clear(self) -> None:
        self._chunks.clear()
        self._tail.clear()
        self._head = self._n = 0
        self.rest.clear()


class QueueTable:
    __slots__ = (
        "_accum",
        "_again",
        "_avail",
        "_gone",
        "_heads",
        "_held",
        "_index",
        "_journal",
        "_later",
        "_lookup",
        "_md",
        "_navail",
        "_nproc",
        "_okeys",
        "_other",
        "_pcount",
        "_plevels",
        "_plist",
        "_proc",
        "_pwait",
        "_restored",
        "_seq",
        "_side",
        "bytes",
        "name",
    )

    def __init__(self, name: str, journal: Journal | None = None) -> None:
        self.name = name
        self._journal = journal
        # Processing compact records by the key of their uuid (see the module's docstring).
        self._index: dict[int, bytes] = {}
        # By whole uuid: Messages, and processing compact records whose index key was taken.
        self._other: dict[bytes, Entry] = {}
        # Available compact records in id order (the entries are the records), in no index:
        # nothing looks one up by uuid but recovery (ack, ext and nack need a processing one).
        self._avail = _Order()
        self._navail = 0
        # id() of available records removed other than from the front (recovery), until they
        # come first: they are still in _avail, so their ids are not reused meanwhile.
        self._gone: set[int] = set()
        # Available records by uuid, built when recovery first looks one up; see recovered().
        self._lookup: dict[bytes, bytes] | None = None
        # Available compact records under a uuid that was delivered (nacked, put back): the
        # only available ones a claim can name, indexed so that a claim never scans the queue.
        self._again: dict[bytes, bytes] = {}
        # The latest ts of an available compact record restored as it was (recovery cannot
        # tell a nacked one from a fresh one): while one may remain, a claim of an id found
        # nowhere else looks through the available records; None once none can remain.
        self._restored: float | None = None
        # Ids of processing compact records, in order. Apart from _avail because their ids are
        # deadlines: acked ones come first here, and are dropped, about as soon as they are
        # acked, while in _avail they would wait behind the whole backlog.
        self._proc = _Order()
        # Ids of the Messages in _other, in order (but those with a priority).
        self._side: list[MessageId] = []
        # Index keys of the processing records in _other (two or more uuids under a key: a
        # list), so that find_delivery is exact and fresh uuids keep clear of them.
        self._okeys: dict[int, bytes | list[bytes]] = {}
        # Records with a priority above 0: a heap of ids per priority; the priorities whose
        # first record may be due, in ascending order; the others by when it is (entries may
        # be stale: checked when they come up); the entries of the level heaps.
        self._plevels: dict[int, list[MessageId]] = {}
        self._plist: list[int] = []
        self._pwait: list[tuple[float, int]] = []
        self._pcount = 0
        # Message groups (docs/message-options.md#message-groups): the uuid of each group's head,
        # the one record of the group in the orders (in _side); the group's other records wait in
        # a heap of (seq, id) (entries may be stale: checked when they come up). _seq is the
        # next push's place in the table's push order.
        self._heads: dict[str, bytes] = {}
        self._held: dict[str, list[tuple[int, MessageId]]] = {}
        self._seq = 0
        self._md = _MetadataTable()
        self._accum: StoredMessage | None = None
        self.bytes = 0
        # For counts(): records in processing, and those due later (see LaterCount).
        self._nproc = 0
        self._later = LaterCount()

    # -- finding records ---------------------------------------------------------------------------

    def _find(self, uuid: bytes, available: bool = False) -> Entry | None:
        """The record with this uuid; an available compact one only if ``available`` (this
        builds the lookup of them if there is none: O(n), for recovery)."""
        if len(uuid) == 16:
            rec = self._index.get(_key(uuid))
            if rec is not None and rec[8:24] == uuid:
                return rec
        other = self._other
        if other and (e := other.get(uuid)) is not None:
            return e
        lookup = self._lookup
        if lookup is None:
            if not available:
                return None
            lookup = self._lookup = {r[8:24]: r for r in self._available_records()}
        return lookup.get(uuid)

    def _available_records(self) -> list[bytes]:
        recs = self._avail.entries()
        gone = self._gone
        return [r for r in recs if id(r) not in gone] if gone else recs

    def _available_top(self) -> bytes | None:
        """The first live available compact record; removed ones before it are dropped."""
        order, gone = self._avail, self._gone
        while (rec := order.first()) is not None:
            if not (gone and id(rec) in gone):
                return rec
            gone.discard(id(rec))
            order.pop_first()
        return None

    def _processing_top(self) -> bytes | None:
        """The first live processing compact record; stale entries before it are dropped."""
        order, index, other = self._proc, self._index, self._other
        while (e := order.first()) is not None:
            rec = index.get(_rec_key(e))
            if other and (rec is None or not rec.startswith(e)):
                o = other.get(e[8:24])
                rec = o if type(o) is bytes else None
            # The prefix check also makes an entry stale once its record has another deadline.
            if rec is not None and rec[24] == _PROCESSING and rec.startswith(e):
                return rec
            order.pop_first()
        return None

    def _side_top(self) -> StoredMessage | None:
        side, other = self._side, self._other
        while side:
            top = side[0]
            msg = other.get(top[1])
            if type(msg) is StoredMessage and msg.id is top:
                group = msg.ext.group if msg.ext is not None else None
                if group is None or self._heads.get(group) == top[1]:
                    return msg
            heapq.heappop(side)  # stale, or a group's record that waits behind its head
        return None

    def _level_top(self, priority: int) -> StoredMessage | None:
        """The first record of a priority level (its stale entries dropped; the level too
        once empty)."""
        heap, other = self._plevels[priority], self._other
        while heap:
            top = heap[0]
            msg = other.get(top[1])
            if type(msg) is StoredMessage and msg.id is top:
                return msg
            heapq.heappop(heap)
            self._pcount -= 1
        del self._plevels[priority]
        plist = self._plist
        i = bisect.bisect_left(plist, priority)
        if i < len(plist) and plist[i] == priority:
            del plist[i]
        return None

    def _ptime_top(self) -> StoredMessage | None:
        """The record with a priority that comes first in id order."""
        best: StoredMessage | None = None
        for priority in list(self._plevels):  # _level_top may remove a level
            msg = self._level_top(priority)
            if msg is not None and (best is None or msg.id < best.id):
                best = msg
        return best

    def _ready(self, now: float) -> StoredMessage | None:
        """The due record of the highest priority (FIFO within a level), if any: the first
        record of the highest level whose first record is due (a level's records are in id
        order, and an id's time is when it becomes due). A level whose first record is not
        due waits in ``_pwait`` until it is, so each level is looked at once per change of its
        first record: amortised O(log n) with at most 256 levels."""
        plist, levels, wait = self._plist, self._plevels, self._pwait
        while wait and wait[0][0] <= now:
            priority = heapq.heappop(wait)[1]
            if priority in levels:
                i = bisect.bisect_left(plist, priority)
                if i == len(plist) or plist[i] != priority:
                    plist.insert(i, priority)
        for i in range(len(plist) - 1, -1, -1):  # _level_top may remove level i only
            priority = plist[i]
            msg = self._level_top(priority)
            if msg is None:
                continue
            if msg.id[0] <= now:
                return msg
            del plist[i]
            heapq.heappush(wait, (msg.id[0], priority))
        return None

    def _first(self) -> Entry | None:
        rec = self._available_top()
        # The live processing top is at or after the first entry: only look for it when that
        # could come first. Records and ids compare as ids: distinct uuids differ within 24 bytes.
        e = self._proc.first()
        if e is not None and (rec is None or e < rec):
            p = self._processing_top()
            if p is not None and (rec is None or p < rec):
                rec = p
        if not self._side and not self._plevels:
            return rec
        best: Entry | None = rec
        for msg in (self._side_top(), self._ptime_top() if self._plevels else None):
            if msg is None:
                continue
            if best is None:
                best = msg
            elif type(best) is bytes:
                if msg.id < (_rec_ts(best), best[8:24]):
                    best = msg
            elif msg.id < best.id:  # type: ignore[union-attr]
                best = msg
        return best

    # -- reading -----------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._index) + len(self._other) + self._navail

    def get(self, uuid: bytes) -> StoredMessage | None:
        """The record with this uuid. For recovery: finding an available record by uuid needs
        a lookup that is built on first use and kept until :meth:`recovered`."""
        e = self._find(uuid, True)
        return _decode(e, self._md.mds) if type(e) is bytes else e  # type: ignore[return-value]

    def first(self) -> StoredMessage | None:
        e = self._first()
        return _decode(e, self._md.mds) if type(e) is bytes else e  # type: ignore[return-value]

    def waittime(self, now: float) -> float | None:
        """Seconds until the first record is deliverable (0 if now); ``None`` if empty."""
        if self._plevels and self._ready(now) is not None:
            return 0.0
        e = self._first()
        if e is None:
            return None
        ts = _rec_ts(e) if type(e) is bytes else e.id[0]  # type: ignore[union-attr]
        return max(0.0, ts - now)

    def counts(self, now: float) -> QueueCounts:
        """The records by what a receiver sees of them at ``now``; O(1) but for what
        :meth:`LaterCount.count` prunes (a walk of the queue only after recovery)."""
        delayed = self._later.count(now, self._due_times)
        return QueueCounts(len(self) - self._nproc - delayed, self._nproc, delayed)

    def _due_times(self) -> Iterator[float]:
        """The ts of every record not in processing."""
        for e in self._entries():
            if type(e) is bytes:
                if e[24] != _PROCESSING:
                    yield _rec_ts(e)
            elif e.state is not _S_PROCESSING:  # type: ignore[union-attr]
                yield e.id[0]  # type: ignore[union-attr]

    def _entries(self) -> list[Entry]:
        """Every record: available ones, then those in ``_other``, then processing ones. One
        pass over the records (a deep queue's do not fit in any cache)."""
        entries: list[Entry] = self._available_records()  # type: ignore[assignment]
        entries += self._other.values()
        entries += self._index.values()
        return entries

    def messages(self) -> list[StoredMessage]:
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
            start = len(entries) - len(self._index) - len(self._other)
            i = next(i for i in range(start, len(entries)) if entries[i] is acc)
            entries[i] = StoredMessage(acc.id, acc.state, acc.type, acc.retry, list(acc.content))
        return TableSnapshot(entries, self._md.mds)

    # -- raw mutations (no journal): used by the operations below and by recovery ----------------

    def _encode(self, msg: StoredMessage) -> bytes | None:
        """``msg`` as a compact record, or ``None`` when it must stay a StoredMessage."""
        state = msg.state
        code = _AVAILABLE if state is _S_AVAILABLE else _PROCESSING if state is _S_PROCESSING else -1
        content = msg.content
        if code < 0 or msg.type is not _NORMAL or type(content) is not tuple or msg.ext is not None:
            return None
        ts, uuid = msg.id
        md, body = content
        if not (type(ts) is float and ts > 0.0 and type(uuid) is bytes and len(uuid) == 16):
            return None
        if type(body) is not bytes or len(body) > COMPACT_MAX:
            return None
        rc, ref = _retry_code(msg.retry), self._md.ref(md)
        if rc < 0 or ref < 0:
            return None
        return _HEAD.pack(ts, uuid, code, rc, ref) + body

    def _place(self, rec: bytes, key: int, late: bool = False) -> None:
        """Add a compact record whose uuid is not in the table; ``key``, its index key, is only
        read for a processing record; ``late``: an available record due after the ones that
        will be pushed next (a delay)."""
        self.bytes += len(rec) - _HEAD_SIZE + self._md.lens[rec[26]] + RECORD_OVERHEAD
        if rec[24] == _PROCESSING:
            self._nproc += 1
            index, other = self._index, self._other
            if index.setdefault(key, rec) is not rec:
                other[rec[8:24]] = rec
                self._okey_add(rec[8:24])
            self._proc.push(rec[:_ID_SIZE])
            if len(self._proc) > 2 * (len(index) + len(other)) + 1024:
                self._rebuild_processing()
        else:
            if late:
                self._avail.push_late(rec)
            else:
                self._avail.push(rec)
            self._navail += 1
            if self._lookup is not None:
                self._lookup[rec[8:24]] = rec
            if len(self._avail) > 2 * self._navail + 1024:
                self._avail = _Order.of_sorted(sorted(self._available_records()))
                self._gone.clear()

    def _insert(self, msg: StoredMessage) -> Entry:
        """Add a record whose uuid is not in the table; the record as placed."""
        uuid = msg.id[1]
        rec = self._encode(msg)
        if rec is not None:
            if rec[24] != _PROCESSING:
                self._later.add(msg.id[0])
            self._place(rec, _key(uuid))
            return rec
        self._other[uuid] = msg
        self.bytes += msg.nbytes() + RECORD_OVERHEAD
        if msg.state is _S_PROCESSING:
            self._nproc += 1
            self._okey_add(uuid)
        else:
            self._later.add(msg.id[0])
        ext = msg.ext
        if ext is not None and ext.group is not None:
            self._group_insert(msg, ext.group, ext.seq)
            return msg
        if ext is not None and ext.priority > 0:
            priority = ext.priority
            level = self._plevels.get(priority)
            if level is None:
                level = self._plevels[priority] = []
                bisect.insort(self._plist, priority)
            else:
                plist = self._plist
                i = bisect.bisect_left(plist, priority)
                if i == len(plist) or plist[i] != priority:
                    # The level waits for its first record, and this one may be due before
                    # it: look at the level again by then.
                    heapq.heappush(self._pwait, (msg.id[0], priority))
            heapq.heappush(level, msg.id)
            self._pcount += 1
            if self._pcount + len(self._pwait) > 2 * len(self._other) + 1024:
                self._rebuild_processing()
            return msg
        heapq.heappush(self._side, msg.id)
        if len(self._side) > 2 * len(self._other) + 1024:
            self._rebuild_processing()
        return msg

    def _group_insert(self, msg: StoredMessage, group: str, seq: int) -> None:
        """``msg`` (in ``_other`` already) joins its group: it becomes the head if the group has
        none, or if it comes before the head (a record made visible again keeps its place);
        else it waits. The head is so the group's first record, in processing or not: when
        several are in processing (taken together by :meth:`dequeue_in_group`), only the first
        is redelivered when its deadline passes, and the next waits until it leaves. O(log n)."""
        if seq >= self._seq:
            self._seq = seq + 1
        heads, uuid = self._heads, msg.id[1]
        cur = heads.get(group)
        head = None if cur is None else self._other.get(cur)
        if type(head) is StoredMessage and head.ext is not None:
            if seq > head.ext.seq:
                heapq.heappush(self._held.setdefault(group, []), (seq, msg.id))
                return
            # The head waits again; its entry in _side goes stale (_side_top checks the head).
            heapq.heappush(self._held.setdefault(group, []), (head.ext.seq, head.id))
        heads[group] = uuid
        heapq.heappush(self._side, msg.id)
        if len(self._side) > 2 * len(self._other) + 1024:
            self._rebuild_processing()

    def _group_left(self, group: str, uuid: bytes) -> None:
        """The record ``uuid`` of ``group`` left the table: if it was the head, the group's next
        record (by seq) becomes the head. O(log n) amortised (stale entries are dropped)."""
        heads = self._heads
        if heads.get(group) != uuid:
            return
        del heads[group]
        held = self._held.get(group)
        while held:
            _, mid = heapq.heappop(held)
            m = self._other.get(mid[1])
            if type(m) is StoredMessage and m.id is mid:
                heads[group] = mid[1]
                heapq.heappush(self._side, mid)
                break
        if not held:
            self._held.pop(group, None)

    def _okey_add(self, uuid: bytes) -> None:
        if len(uuid) != 16:
            return
        k, okeys = _key(uuid), self._okeys
        cur = okeys.get(k)
        if cur is None:
            okeys[k] = uuid
        elif type(cur) is list:
            cur.append(uuid)
        else:
            okeys[k] = [cur, uuid]  # type: ignore[list-item]

    def _okey_del(self, uuid: bytes) -> None:
        if len(uuid) != 16:
            return
        k, okeys = _key(uuid), self._okeys
        cur = okeys.get(k)
        if cur is None:
            return
        if type(cur) is list:
            if uuid in cur:
                cur.remove(uuid)
            if len(cur) == 1:
                okeys[k] = cur[0]
        elif cur == uuid:
            del okeys[k]

    def _drop(self, uuid: bytes, e: Entry) -> None:
        """Remove the record ``e`` found under ``uuid``; its entry in an order goes stale."""
        if type(e) is bytes:
            self.bytes -= len(e) - _HEAD_SIZE + self._md.lens[e[26]] + RECORD_OVERHEAD
            if e[24] == _PROCESSING:
                self._nproc -= 1
                k = _rec_key(e)
                if self._index.get(k) is e:
                    del self._index[k]
                else:
                    del self._other[uuid]
                    self._okey_del(uuid)
                self._forget_processing(e)
                return
            if self._later.later:
                self._later.remove(_rec_ts(e))
            self._navail -= 1
            if self._lookup is not None:
                self._lookup.pop(uuid, None)
            if self._again:
                self._again.pop(uuid, None)
            if self._avail.first() is e:
                self._avail.pop_first()
            else:
                self._gone.add(id(e))
            return
        del self._other[uuid]
        assert isinstance(e, StoredMessage)
        self.bytes -= e.nbytes() + RECORD_OVERHEAD
        if e.state is _S_PROCESSING:
            self._nproc -= 1
            self._okey_del(uuid)
        else:
            self._later.remove(e.id[0])
        if self._accum is e:
            self._accum = None
        if e.ext is not None and e.ext.group is not None:
            self._group_left(e.ext.group, uuid)

    def _forget_processing(self, rec: bytes) -> None:
        """``rec``, a processing record, is gone: drop the stale entries at the front of the
        processing order now. first() only looks there when a deadline is due before the
        backlog, so they would pile up otherwise. Acked in deadline order, as is usual, the
        record's own entry is first; out of order, it is dropped when it comes first."""
        order = self._proc
        first = order.first()
        if first is not None and rec.startswith(first):
            order.pop_first()
        else:
            self._processing_top()

    def _remove(self, uuid: bytes) -> Entry | None:
        e = self._find(uuid, True)
        if e is not None:
            self._drop(uuid, e)
        return e

    def _rebuild_processing(self) -> None:
        # Stale entries (acked, re-keyed or deleted records) can pile up behind a live one under
        # ext/nack-heavy traffic or acks out of order; rebuilding when they outnumber the
        # records keeps the orders O(n) and pushes O(log n). O(records not available).
        proc: list[bytes] = []
        side: list[MessageId] = []
        levels: dict[int, list[MessageId]] = {}
        for e in (*self._index.values(), *self._other.values()):
            if type(e) is bytes:
                proc.append(e[:_ID_SIZE])
            else:
                assert isinstance(e, StoredMessage)
                if e.ext is not None and e.ext.priority > 0:
                    levels.setdefault(e.ext.priority, []).append(e.id)
                elif e.ext is None or e.ext.group is None or self._heads.get(e.ext.group) == e.id[1]:
                    side.append(e.id)
        proc.sort()
        heapq.heapify(side)
        for level in levels.values():
            heapq.heapify(level)
        self._proc, self._side = _Order.of_sorted(proc), side
        self._plevels, self._plist, self._pwait = levels, sorted(levels), []
        self._pcount = sum(len(level) for level in levels.values())

    def _fresh_uuid(self) -> tuple[bytes, int]:
        """A new uuid whose index key no processing compact record has, and that key."""
        index, okeys = self._index, self._okeys
        while True:
            uuid = new_uuid()
            key = _key(uuid)
            if key not in index and key not in okeys:
                return uuid, key

    def restore(self, msg: StoredMessage) -> None:
        """Recovery: insert a record as it was (no journal), replacing one with its uuid."""
        self._later.untrack()  # restored without a time: counted by a walk, when first asked
        old = self._find(msg.id[1], True)
        if old is not None:
            self._drop(msg.id[1], old)
        rec = self._insert(msg)
        if type(rec) is bytes and rec[24] == _AVAILABLE:
            ts = _rec_ts(rec)
            if self._restored is None or ts > self._restored:
                self._restored = ts
        if msg.state is _S_ACCUM and (self._accum is None or msg.id > self._accum.id):
            self._accum = msg

    def restore_move(self, old_uuid: bytes, msg: StoredMessage) -> None:
        """Recovery: ``old_uuid``'s record takes ``msg``'s id, state and retry; its content stays."""
        self._later.untrack()
        old = self._remove(old_uuid)
        if old is None:
            return
        if type(old) is bytes:
            content: Item | list[Item] = (self._md.mds[old[26]], old[_HEAD_SIZE:])
            mtype = _NORMAL
        else:
            assert isinstance(old, StoredMessage)
            content, mtype = old.content, old.type
        rec = self._insert(StoredMessage(msg.id, msg.state, mtype, msg.retry, content, msg.ext))
        if type(rec) is bytes and rec[24] == _AVAILABLE:
            self._again[msg.id[1]] = rec  # a move keeps the uuid: this one was delivered

    def restore_append(self, uuid: bytes, item: Item) -> None:
        msg = self._other.get(uuid)
        if isinstance(msg, StoredMessage) and isinstance(msg.content, list):
            msg.content.append(item)
            self.bytes += len(item[1]) + sum(len(k) + len(v) for k, v in item[0])

    def restore_delete(self, uuid: bytes) -> None:
        self._remove(uuid)

    def recovered(self) -> None:
        """Recovery is over: drop the lookup of available records by uuid (memory)."""
        self._lookup = None

    def clear(self) -> None:
        self._index.clear()
        self._other.clear()
        self._avail.clear()
        self._navail = 0
        self._gone.clear()
        self._lookup = None
        self._again.clear()
        self._restored = None
        self._proc.clear()
        self._side.clear()
        self._okeys.clear()
        self._plevels.clear()
        self._plist.clear()
        self._pwait.clear()
        self._pcount = 0
        self._heads.clear()
        self._held.clear()
        self._md = _MetadataTable()  # a snapshot being written may still read the old one
        self._accum = None
        self.bytes = 0
        self._nproc = 0
        self._later.reset()

    # -- lmq_lib operations ----------------------------------------------------------------------

    def enqueue(self, item: Item, retry: Retry, accum: float, now: float) -> AccumResult:
        """Push one item. ``retry`` is the queue's retry property (deliveries = retry + 1)."""
        self._later.tick(now)
        if accum <= 0:
            retry = _inc(retry)
            body, ref, code = item[1], self._md.ref(item[0]), _retry_code(retry)
            if ref >= 0 and code >= 0 and type(body) is bytes and len(body) <= COMPACT_MAX and now > 0.0:
                uuid = new_uuid()
                self._place(_HEAD.pack(now, uuid, _AVAILABLE, code, ref) + body, -1)
                if self._journal is not None:
                    self._journal.put(self.name, StoredMessage((now, uuid), _S_AVAILABLE, _NORMAL, retry, item))
                return "no"
            msg = StoredMessage((now, new_uuid()), _S_AVAILABLE, _NORMAL, retry, item)
            self._insert(msg)
            if self._journal is not None:
                self._journal.put(self.name, msg)
            return "no"
        cur = self._accum
        if cur is not None and cur.state is _S_ACCUM and cur.id[0] >= now and self._other.get(cur.id[1]) is cur:
            assert isinstance(cur.content, list)
            cur.content.append(item)
            self.bytes += len(item[1]) + sum(len(k) + len(v) for k, v in item[0])
            if self._journal is not None:
                self._journal.append(self.name, cur.id[1], item)
            return "yes"
        msg = StoredMessage((now + accum, new_uuid()), _S_ACCUM, _COMPOUND, _inc(retry), [item])
        self._insert(msg)
        self._accum = msg
        if self._journal is not None:
            self._journal.put(self.name, msg)
        return "new"

    def push(self, item: Item, retry: Retry, now: float, options: PushOptions, *, track: bool = False) -> bytes:
        """Push one item with per-message options (docs/message-options.md); never accumulates.
        ``retry`` is the queue's retry property, used unless the options give their own (``once``
        is retry 0; an ``interval`` without a retry is unlimited, bounded by ``expires``). A
        delay is the record's ts. The record gets a :class:`MessageExt` when the options need one,
        or with ``track`` (its queue has a dead-letter queue: failures are counted). Returns the
        record's uuid."""
        r = options.retry
        if options.once:
            r = 0
        elif isinstance(r, Inherit):
            r = None if options.interval is not None else retry
        stored = _inc(r)
        nb = options.not_before
        ts = now if nb is None or nb <= now else float(nb)
        uuid = new_uuid()
        self._later.tick(now)
        if not track and not options.needs_ext():
            body, ref, code = item[1], self._md.ref(item[0]), _retry_code(stored)
            if ref >= 0 and code >= 0 and type(body) is bytes and len(body) <= COMPACT_MAX and ts > 0.0:
                if ts > now:
                    self._later.add(ts)
                self._place(_HEAD.pack(ts, uuid, _AVAILABLE, code, ref) + body, -1, ts > now)
                if self._journal is not None:
                    self._journal.put(self.name, StoredMessage((ts, uuid), _S_AVAILABLE, _NORMAL, stored, item))
                return uuid
            msg = StoredMessage((ts, uuid), _S_AVAILABLE, _NORMAL, stored, item)
        else:
            ext = MessageExt(
                expires=options.expires,
                interval=options.interval,
                priority=options.priority,
                once=options.once,
                sent_at=now,
                hard=options.hard,
                group=options.group,
                seq=self._seq if options.group is not None else 0,
            )
            msg = StoredMessage((ts, uuid), _S_AVAILABLE, _NORMAL, stored, item, ext)
        self._insert(msg)
        if self._journal is not None:
            self._journal.put(self.name, msg)
        return uuid

    def dequeue(
        self, timeout: float, now: float, dead: list[StoredMessage] | None = None, *, hold: bool = False
    ) -> tuple[StoredMessage, float] | None:
        """Take the first deliverable record: a fresh id ``(now + timeout, new uuid)``, state
        processing, retry - 1. Records whose retry is spent are discarded on the way, or, with
        ``dead`` given (the queue has a dead-letter queue), removed unjournaled and appended to
        it as :func:`dead_letter_of` marks them, for the store to transfer. With ``hold`` (the
        queue's dead-letter queue is missing, and SQS's rule keeps such records), a record
        whose retry is spent is delivered all the same, its retry left at 0.
        Returns the delivered record and its retention (seconds it waited).

        A record with a priority is served before any other due one; a record with a
        :class:`MessageExt` follows queue_server's ttl rule (:meth:`_deliver_ext`)."""
        self._later.tick(now)
        while True:
            e: Entry | None = None
            if self._plevels:
                e = self._ready(now)
            if e is None:
                e = self._first()
            if e is None:
                return None
            if type(e) is bytes:
                ts = _rec_ts(e)
                if ts > now:
                    return None
                old_uuid, code = e[8:24], e[25]
                if e[24] == _AVAILABLE and self._lookup is None and not self._again:  # _drop, inline
                    self._avail.pop_first()  # e comes first
                    self._navail -= 1
                    self.bytes -= len(e) - _HEAD_SIZE + self._md.lens[e[26]] + RECORD_OVERHEAD
                else:
                    self._drop(old_uuid, e)
                if code == 0 and not hold:
                    if dead is not None:
                        dead.append(dead_letter_of(self.name, _decode(e, self._md.mds), "retries"))
                    elif self._journal is not None:
                        self._journal.delete(self.name, old_uuid)
                    continue
                if code != _INFINITY and code > 0:
                    code -= 1
                ts_new = now + timeout
                uuid, key = self._fresh_uuid()
                ref, body = e[26], e[_HEAD_SIZE:]
                new = StoredMessage(
                    (ts_new, uuid),
                    _S_PROCESSING,
                    _NORMAL,
                    None if code == _INFINITY else code,
                    (self._md.mds[ref], body),
                )
                if ts_new > 0.0:
                    self._place(_HEAD.pack(ts_new, uuid, _PROCESSING, code, ref) + body, key)
                else:
                    self._insert(new)
                if self._journal is not None:
                    self._journal.move(self.name, old_uuid, new)
                return new, now - ts
            assert isinstance(e, StoredMessage)
            ts, old_uuid = e.id
            if ts > now:
                return None
            self._drop(old_uuid, e)
            if e.ext is not None:
                got = self._deliver_ext(e, timeout, now, dead, hold)
                if got is None:
                    continue
                return got
            if e.retry is not None and e.retry <= 0 and not hold:
                if dead is not None:
                    dead.append(dead_letter_of(self.name, e, "retries"))
                elif self._journal is not None:
                    self._journal.delete(self.name, old_uuid)
                continue
            retry = None if e.retry is None else max(0, e.retry - 1)
            new = StoredMessage((now + timeout, self._fresh_uuid()[0]), _S_PROCESSING, e.type, retry, e.content)
            self._insert(new)
            if self._journal is not None:
                self._journal.move(self.name, old_uuid, new)
            return new, now - ts

    def _deliver_ext(
        self, e: StoredMessage, timeout: float, now: float, dead: list[StoredMessage] | None, hold: bool = False
    ) -> tuple[StoredMessage, float] | None:
        """Deliver ``e``, a due record with an ext, already dropped from the table; None when it
        is exhausted instead. queue_server's ttl rule: once ``expires`` has come, a record never
        delivered is delivered once more (at-least-once wins) and one delivered before is
        exhausted; a delivery whose deadline reaches ``expires`` is the last. ``interval``
        replaces the queue's timeout."""
        ext = e.ext
        assert ext is not None
        ts, old_uuid = e.id
        expired = ext.expires is not None and now >= ext.expires
        if expired and ext.hard:
            # SQS's retention: the message is gone, whatever its deliveries and dead-letter queue.
            if self._journal is not None:
                self._journal.delete(self.name, old_uuid)
            return None
        if (e.retry is not None and e.retry <= 0 and not hold) or (expired and ext.attempts > 0):
            if dead is not None and not ext.once:
                dead.append(dead_letter_of(self.name, e, "expired" if expired else "retries"))
            elif self._journal is not None:
                self._journal.delete(self.name, old_uuid)
            return None
        deadline = now + (timeout if ext.interval is None else ext.interval)
        if not ext.hard and (expired or (ext.expires is not None and deadline >= ext.expires)):
            retry: Retry = 0
        else:
            retry = None if e.retry is None else max(0, e.retry - 1)
        new = StoredMessage(
            (deadline, self._fresh_uuid()[0]),
            _S_PROCESSING,
            e.type,
            retry,
            e.content,
            replace(
                ext,
                attempts=ext.attempts + 1,
                first_at=now if ext.first_at is None else ext.first_at,
                last_at=now,
            ),
        )
        self._insert(new)
        if self._journal is not None:
            self._journal.move(self.name, old_uuid, new)
        return new, now - ts

    def dequeue_in_group(self, group: str, timeout: float, now: float) -> tuple[StoredMessage, float] | None:
        """Deliver the first waiting record of ``group`` that is not in flight, as
        :meth:`dequeue` would deliver it once it were the head: for a receive that has just
        taken the group's head, so that several messages of one group go out in one answer,
        in order. None when there is none, it is not due, or it is out of retries or past its
        expiry (those are left to :meth:`dequeue`, which knows the dead-letter queue). The
        records in processing passed over are few: those taken with the head in one receive."""
        held = self._held.get(group)
        if not held:
            return None
        passed: list[tuple[int, MessageId]] = []
        found: StoredMessage | None = None
        while held:
            entry = held[0]
            m = self._other.get(entry[1][1])
            if type(m) is not StoredMessage or m.id is not entry[1]:
                heapq.heappop(held)  # stale
            elif m.state is _S_PROCESSING and m.id[0] > now:
                # In flight (taken with the head in this receive): passed over. One whose
                # deadline came is due again, after the head and before those behind it.
                passed.append(heapq.heappop(held))
            else:
                found = m
                break
        for entry in passed:
            heapq.heappush(held, entry)
        if found is None or found.ext is None or found.id[0] > now:
            return None
        ext = found.ext
        if (found.retry is not None and found.retry <= 0) or (ext.expires is not None and now >= ext.expires):
            return None
        self._later.tick(now)
        self._drop(found.id[1], found)
        return self._deliver_ext(found, timeout, now, None)

    def _processing(self, uuid: bytes, now: float) -> Entry | None:
        e = self._find(uuid)
        if e is None:
            return None
        if type(e) is bytes:
            return e if e[24] == _PROCESSING and _rec_ts(e) >= now else None
        assert isinstance(e, StoredMessage)
        return e if e.state is _S_PROCESSING and e.id[0] >= now else None

    def done(self, uuid: bytes, now: float) -> bool:
        # The usual case first, inline (acks are a third of all operations): a compact record
        # under its own index key.
        key = _key(uuid) if len(uuid) == 16 else -1
        rec = self._index.get(key)
        if rec is not None and rec[8:24] == uuid:
            if rec[24] != _PROCESSING or _rec_ts(rec) < now:
                return False
            del self._index[key]
            self._nproc -= 1
            self.bytes -= len(rec) - _HEAD_SIZE + self._md.lens[rec[26]] + RECORD_OVERHEAD
            self._forget_processing(rec)
        else:
            e = self._processing(uuid, now)
            if e is None:
                return False
            self._drop(uuid, e)
        if self._journal is not None:
            self._journal.delete(self.name, uuid)
        return True

    def _move(
        self, uuid: bytes, e: Entry, ts: float, state: State, retry_delta: int, attempt: int = 0, now: float = 0.0
    ) -> None:
        """Record ``e`` under ``uuid`` takes a new ts, state and retry (+ delta); uuid and content
        stay (ext, nack, put_back, claim). ``attempt``: +1 a delivery at ``now`` (a claim of an
        unheld record), -1 a delivery that did not happen (put back), counted in its ext."""
        self._drop(uuid, e)
        if type(e) is bytes:
            code = e[25]
            if code != _INFINITY:
                code += retry_delta
                if code >= _INFINITY:
                    code = -1
            if ts > 0.0 and code >= 0:
                st = _PROCESSING if state is _S_PROCESSING else _AVAILABLE
                rec = _HEAD.pack(ts, uuid, st, code, e[26]) + e[_HEAD_SIZE:]
                self._place(rec, _key(uuid))
                if st == _AVAILABLE:
                    self._later.add(ts)
                    self._again[uuid] = rec
                if self._journal is not None:
                    self._journal.move(self.name, uuid, _decode(rec, self._md.mds))
                return
            old = _decode(e, self._md.mds)  # a retry past a byte, or a ts the bytes cannot order
        else:
            assert isinstance(e, StoredMessage)
            old = e
        retry = old.retry if retry_delta == 0 or old.retry is None else old.retry + retry_delta
        ext = old.ext
        if ext is not None and attempt:
            if attempt > 0:
                first = now if ext.first_at is None else ext.first_at
                ext = replace(ext, attempts=ext.attempts + 1, first_at=first, last_at=now)
            elif ext.attempts <= 1:  # the one delivery did not happen: none did
                ext = replace(ext, attempts=0, first_at=None, last_at=None)
            else:  # the previous delivery's time is not kept: last_at stays the lost one's
                ext = replace(ext, attempts=ext.attempts - 1)
        msg = StoredMessage((ts, uuid), state, old.type, retry, old.content, ext)
        self._insert(msg)
        if self._journal is not None:
            self._journal.move(self.name, uuid, msg)

    def retain(self, uuid: bytes, timeout: float, now: float) -> bool:
        e = self._processing(uuid, now)
        if e is None:
            return False
        self._move(uuid, e, now + _timeout_of(e, timeout), _S_PROCESSING, 0)
        return True

    def release(self, uuid: bytes, now: float) -> bool:
        """nack: available again now; the retry spent by the delivery stays spent."""
        self._later.tick(now)
        e = self._processing(uuid, now)
        if e is None:
            return False
        self._move(uuid, e, now, _S_AVAILABLE, 0)
        return True

    def claim(
        self, uuids: Sequence[bytes], timeout: float, now: float, max_bytes: int | None = None
    ) -> list[StoredMessage | None]:
        """Take messages back by the id of their last delivery (a pylmq extension): each record
        with one of these uuids that is in processing (deadline passed or not) or available
        again under that uuid (nacked, put back, or never pulled since its deadline passed)
        becomes processing with deadline ``now + timeout``, keeping its uuid: the same delivery,
        continued by a new holder. ``None`` for a uuid no such record has (acked, redelivered
        under a new uuid, accumulating, unknown) or that came earlier in ``uuids``.

        A record nobody holds (its deadline passed, nacked, put back) would be redelivered by
        the next pull, which spends a retry: a claim of it spends one too, and one with no retry
        left is discarded as a pull discards it (``None``), so a message that kills every
        consumer still leaves the queue. A record still held keeps its retry.

        Once claimed messages reach ``max_bytes`` of payload (at least one is claimed), the
        uuids after it are left as they are: the answer is shorter than ``uuids``."""
        self._later.tick(now)
        found: dict[bytes, Entry] = {}
        again = self._again
        for u in uuids:
            e = self._find(u)
            if e is None and again:
                e = again.get(u)
            if e is not None:
                found[u] = e
        rest = set(uuids) - found.keys()
        if rest and self._restored is not None:
            self._scan_restored(rest, found)
        out: list[StoredMessage | None] = []
        size = 0
        for u in uuids:
            if max_bytes is not None and size >= max_bytes:
                break
            e = found.pop(u, None)
            if e is None or not self._claimable(e):
                out.append(None)
                continue
            held = (
                (e[24] == _PROCESSING and _rec_ts(e) >= now)
                if type(e) is bytes
                else (
                    e.state is _S_PROCESSING and e.id[0] >= now  # type: ignore[union-attr]
                )
            )
            if not held:
                retry = e[25] if type(e) is bytes else e.retry  # type: ignore[union-attr]
                if retry is not None and retry <= 0:
                    self._drop(u, e)
                    if self._journal is not None:
                        self._journal.delete(self.name, u)
                    out.append(None)
                    continue
            self._move(u, e, now + _timeout_of(e, timeout), _S_PROCESSING, 0 if held else -1, 0 if held else 1, now)
            got = self._find(u)
            assert got is not None
            msg = _decode(got, self._md.mds) if type(got) is bytes else got
            out.append(msg)  # type: ignore[arg-type]
            size += msg.nbytes()  # type: ignore[union-attr]
        return out

    def _scan_restored(self, rest: set[bytes], found: dict[bytes, Entry]) -> None:
        """Look for ``rest`` among the available records, for those restored by recovery
        (not in :attr:`_again`); O(queue depth), only while such a record may remain."""
        top = self._available_top()
        if top is None or self._restored is None or _rec_ts(top) > self._restored:
            self._restored = None  # every restored available record has left
            return
        for rec in self._available_records():
            if rec[8:24] in rest:
                found[rec[8:24]] = rec

    @staticmethod
    def _claimable(e: Entry) -> bool:
        if type(e) is bytes:
            return True  # compact records are available or processing
        assert isinstance(e, StoredMessage)
        return e.state is _S_AVAILABLE or e.state is _S_PROCESSING

    def put_back(self, uuid: bytes, now: float) -> bool:
        """The receiver is gone: available again and the lost delivery costs no retry."""
        self._later.tick(now)
        e = self._processing(uuid, now)
        if e is None:
            return False
        self._move(uuid, e, now, _S_AVAILABLE, 1, -1)
        return True

    # -- per-message extensions: queue_server's msg_id, peek, dead letters ------------------------

    def find_delivery(self, key: int) -> bytes | None:
        """The uuid of the processing record whose index key (:func:`~pylmq.core.message.msg_key`)
        is ``key``; None when none has it, or more than one (never a wrong one)."""
        rec = self._index.get(key)
        o = self._okeys.get(key) if self._okeys else None
        if rec is not None:
            return rec[8:24] if o is None else None
        return o if type(o) is bytes else None

    def peek(self, after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
        """Up to ``limit`` records in id order after ``after`` (an id, or the uuid of a record
        still here); changes nothing. O(n log limit)."""
        return page(self.snapshot(), after, limit)

    def take_dead(self, count: int, keep: Container[str] = ()) -> list[StoredMessage]:
        """Remove, unjournaled, the first ``count`` available dead letters (records whose ext
        names their origin) in id order, for the store to transfer (requeue); those whose
        origin is in ``keep`` stay. O(records with an ext)."""
        found = [
            m
            for m in self._other.values()
            if type(m) is StoredMessage
            and m.state is _S_AVAILABLE
            and m.ext is not None
            and m.ext.dead is not None
            and m.ext.dead.origin not in keep
        ]
        taken = heapq.nsmallest(count, found, key=_id_key)
        for m in taken:
            self._drop(m.id[1], m)
        return taken

    def adopt(self, msg: StoredMessage) -> None:
        """Insert a record transferred from another table (unjournaled: the store journals the
        transfer as one record); its waiters are the store's to wake."""
        self._insert(msg)


def _id_key(m: StoredMessage) -> MessageId:
    return m.id


def _timeout_of(e: Entry, timeout: float) -> float:
    """The message's own ``interval`` if it has one, else the queue's ``timeout``."""
    if type(e) is bytes:
        return timeout
    ext = e.ext  # type: ignore[union-attr]
    return timeout if ext is None or ext.interval is None else ext.interval


def dead_letter_of(origin: str, msg: StoredMessage, reason: DeadReason) -> StoredMessage:
    """``msg`` (same id: the one it leaves under) marked as exhausted in ``origin``: its ext
    gains the :class:`DeadLetter` with its failures (deliveries counted in its ext; 0 when it
    has none, as a record pushed before its queue had a dead-letter queue) and last delivery."""
    ext = msg.ext or MessageExt()
    dead = DeadLetter(origin, ext.attempts, ext.last_at, reason)
    return StoredMessage(msg.id, msg.state, msg.type, msg.retry, msg.content, replace(ext, dead=dead))


def dead_letter_record(dead: StoredMessage, retry: Retry, now: float) -> StoredMessage:
    """The record a dead letter (from :func:`dead_letter_of`) becomes in its dead-letter queue:
    available now under a new uuid, ``retry`` (the target queue's, +1 as a push), with its
    provenance; expiry, interval and the delivery count stay behind."""
    ext = dead.ext
    assert ext is not None
    new_ext = MessageExt(priority=ext.priority, sent_at=ext.sent_at, dead=ext.dead)
    return StoredMessage((now, new_uuid()), _S_AVAILABLE, dead.type, _inc(retry), dead.content, new_ext)


def requeued_record(dead: StoredMessage, retry: Retry, now: float) -> StoredMessage:
    """A dead letter sent back (to its origin or elsewhere): available now under a new uuid,
    ``retry`` +1 as a push, no delivery counted and no provenance left."""
    ext = dead.ext
    new_ext = MessageExt(priority=0 if ext is None else ext.priority, sent_at=None if ext is None else ext.sent_at)
    return StoredMessage((now, new_uuid()), _S_AVAILABLE, dead.type, _inc(retry), dead.content, new_ext)


PEEK_MAX = 1000
"""Most records one peek returns."""


def page(records: Iterable[StoredMessage], after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
    """Up to ``limit`` of ``records`` in id order after the cursor ``after``: an id, or the uuid
    of one of the records (its id is found in the same pass; :class:`MessageNotFound` when it
    is not there any more). O(n log limit)."""
    if isinstance(after, bytes):
        recs = list(records)
        at = next((m.id for m in recs if m.id[1] == after), None)
        if at is None:
            raise MessageNotFound("the peek cursor's message has left the queue: start again without it")
        records, after = recs, at
    if after is None:
        return heapq.nsmallest(limit, records, key=_id_key)
    cursor = after
    return heapq.nsmallest(limit, (m for m in records if m.id > cursor), key=_id_key)
