"""A local, indexed mirror of the cluster's LMQ tables, fed by Mnesia table events.

Sans-IO: :class:`Mirror` takes the terms that ``mnesia_subscr`` sends to a subscribed pid
(``{mnesia_table_event, Event}``, simple subscriptions) and the rows of table scans, and keeps:

- one :class:`MirrorTable` per queue table, an ordered set keyed by message id exactly like the
  Mnesia ``ordered_set`` (a heap of ids with lazy deletion: first record, size, bytes in
  O(log n));
- every queue's own props (``'__lmq_queue_info__'``), the default list and pylmq's virtual
  queues (``'__lmq_info__'``: key ``default_props``, and one row per virtual queue keyed
  ``{pylmq_virtual_queues, Name}``, which Erlang nodes never read).

Whoever owns the subscription (:mod:`pylmq.cluster.cluster`) subscribes, then scans. Events are
applied as they come; while a table is *loading* they are also recorded. :meth:`Mirror.load`
replaces the table by the scan and replays the recorded events on top. Every event is a write or a
delete of one key, so replaying events that the scan already reflects is harmless (last event per
key wins), and events that came after the scan are not lost whatever order the scan's answer and
the events arrived in. After any gap (subscription node down, reconnect) the owner begins loading
again and re-scans every table.

A :class:`MirrorListener` hears what the queue layer cares about: queues appearing, changing
props or disappearing, records changing (wake waiters), the default list changing, and queue
tables appearing or disappearing in the schema (the owner then subscribes to / scans them).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Callable, Iterator
from typing import Protocol

from pylmq.cluster.records import (
    default_list_from_term,
    message_from_term,
    name_from_atom,
    props_from_term,
)
from pylmq.core.message import MessageId, State, StoredMessage, msg_key
from pylmq.core.props import DefaultList, RawProps
from pylmq.core.table import RECORD_OVERHEAD, LaterCount, QueueCounts, page
from pylmq.erlang.terms import Atom, Pid, Term

__all__ = [
    "ADMIN_TABLES",
    "LMQ_INFO",
    "QUEUE_INFO",
    "SCHEMA",
    "VIRTUAL_QUEUES",
    "Mirror",
    "MirrorListener",
    "MirrorTable",
    "virtual_from_row",
]

log = logging.getLogger("pylmq.cluster.mirror")

A = Atom
SCHEMA = A("schema")
QUEUE_INFO = A("__lmq_queue_info__")
LMQ_INFO = A("__lmq_info__")
ADMIN_TABLES = frozenset({QUEUE_INFO, LMQ_INFO})
EVENT = A("mnesia_table_event")
WRITE = A("write")
DELETE = A("delete")
DELETE_OBJECT = A("delete_object")
TID = A("tid")
DEFAULT_PROPS = A("default_props")
VIRTUAL_QUEUES = A("pylmq_virtual_queues")


class MirrorListener(Protocol):
    def on_queue_created(self, name: str) -> None: ...

    def on_queue_props(self, name: str) -> None: ...

    def on_queue_deleted(self, name: str) -> None: ...

    def on_messages(self, name: str) -> None:
        """Records of the queue changed: something may have become deliverable."""
        ...

    def on_defaults(self) -> None: ...

    def on_virtual(self) -> None:
        """pylmq's virtual queues (:attr:`Mirror.virtual`) changed."""
        ...

    def on_table_created(self, table: Atom) -> None:
        """A queue table appeared in the schema: subscribe to it and scan it."""
        ...


class MirrorTable:
    """One queue table: rows keyed by id, in id order through a heap with lazy deletion, and
    its processing rows indexed by :func:`~pylmq.core.message.msg_key` of their uuid (the
    integer ids of queue_server's protocol, resolved here without a scan)."""

    __slots__ = ("_clock", "_heap", "_keys", "_later", "_nproc", "bytes", "rows")

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.rows: dict[MessageId, StoredMessage] = {}
        self._heap: list[MessageId] = []
        self._keys: dict[int, list[MessageId]] = {}
        self.bytes = 0
        # For counts(), as a QueueTable keeps them: rows in processing, rows due later.
        self._clock = clock
        self._nproc = 0
        self._later = LaterCount()

    def _index(self, msg: StoredMessage) -> None:
        if msg.state is State.PROCESSING:
            self._nproc += 1
            self._keys.setdefault(msg_key(msg.id[1]), []).append(msg.id)
        else:
            self._later.add(msg.id[0])

    def _unindex(self, msg: StoredMessage) -> None:
        if msg.state is not State.PROCESSING:
            self._later.remove(msg.id[0])
        else:
            self._nproc -= 1
            key = msg_key(msg.id[1])
            ids = self._keys.get(key)
            if ids is not None:
                ids.remove(msg.id)
                if not ids:
                    del self._keys[key]

    def __len__(self) -> int:
        return len(self.rows)

    def put(self, msg: StoredMessage) -> None:
        # Rows carry no time of their own: the clock keeps the count of rows due later small.
        self._later.tick(self._clock())
        old = self.rows.get(msg.id)
        if old is not None:
            self.bytes -= old.nbytes() + RECORD_OVERHEAD
            self._unindex(old)
        else:
            heapq.heappush(self._heap, msg.id)
        self.rows[msg.id] = msg
        self._index(msg)
        self.bytes += msg.nbytes() + RECORD_OVERHEAD
        if len(self._heap) > 2 * len(self.rows) + 1024:
            self._heap = list(self.rows)
            heapq.heapify(self._heap)

    def delete(self, key: MessageId) -> None:
        self._later.tick(self._clock())
        old = self.rows.pop(key, None)
        if old is not None:
            self.bytes -= old.nbytes() + RECORD_OVERHEAD
            self._unindex(old)

    def first(self) -> StoredMessage | None:
        heap, rows = self._heap, self.rows
        while heap:
            msg = rows.get(heap[0])
            if msg is not None:
                return msg
            heapq.heappop(heap)
        return None

    def waittime(self, now: float) -> float | None:
        msg = self.first()
        return None if msg is None else max(0.0, msg.id[0] - now)

    def counts(self) -> QueueCounts:
        delayed = self._later.count(self._clock(), self._due_times)
        return QueueCounts(len(self.rows) - self._nproc - delayed, self._nproc, delayed)

    def _due_times(self) -> Iterator[float]:
        return (m.id[0] for m in self.rows.values() if m.state is not State.PROCESSING)

    def by_uuid(self, uuid: bytes) -> StoredMessage | None:
        """O(n): only for the rare checks after a peer died mid-call."""
        for msg in self.rows.values():
            if msg.id[1] == uuid:
                return msg
        return None

    def find_delivery(self, key: int) -> bytes | None:
        """The uuid of the one processing row whose uuid has this key; None if none or several
        (an ambiguous key never settles a delivery it may not mean)."""
        ids = self._keys.get(key)
        return ids[0][1] if ids is not None and len(ids) == 1 else None

    def messages(self) -> list[StoredMessage]:
        return sorted(self.rows.values(), key=lambda m: m.id)

    def page(self, after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
        """Up to ``limit`` rows in id order after the cursor (:func:`pylmq.core.table.page`)."""
        return page(self.rows.values(), after, limit)

    def replace(self, msgs: list[StoredMessage]) -> None:
        self.rows = {m.id: m for m in msgs}
        self._heap = list(self.rows)
        heapq.heapify(self._heap)
        self._keys = {}
        self._nproc = 0
        self._later.untrack()  # walked at the next count
        for m in msgs:
            self._index(m)
        self.bytes = sum(m.nbytes() + RECORD_OVERHEAD for m in msgs)


class Mirror:
    def __init__(self, listener: MirrorListener | None = None, *, clock: Callable[[], float] = time.time) -> None:
        self.listener = listener
        self.clock = clock  # the store's: what counts() call now
        self.tables: dict[str, MirrorTable] = {}
        self.queue_props: dict[str, RawProps] = {}
        self.defaults: DefaultList = []
        self.virtual: dict[str, list[str]] = {}  # pylmq's virtual queues, shared through lmq_info
        self.seq: dict[str, int] = {}  # per queue, bumped on every change of its records
        # When each queue's rows were last written by a transaction that is not this node's
        # (``own_writer`` says which are: its queue runners'), by the clock above: while other
        # nodes write a queue, this node's runner leaves its table's locks to records.
        self.foreign_writes: dict[str, float] = {}
        # The node whose process ran that last write (its transaction's coordinator), where
        # known: a shared queue's runner goes there (see Cluster.queue_peers).
        self.foreign_nodes: dict[str, str] = {}
        self.own_writer: Callable[[Term], bool] | None = None
        self._recording: dict[Atom, list[Term]] = {}
        self.events = 0

    # -- reading ---------------------------------------------------------------------------------

    def table(self, name: str) -> MirrorTable | None:
        return self.tables.get(name)

    def loading(self) -> list[Atom]:
        return list(self._recording)

    # -- loading -----------------------------------------------------------------------------------

    def begin(self, table: Atom) -> None:
        """Start recording events of ``table`` (subscribe next, then scan, then :meth:`load`)."""
        self._recording[table] = []
        if table not in ADMIN_TABLES and table is not SCHEMA:
            self.tables.setdefault(name_from_atom(table), MirrorTable(self.clock))

    def load(self, table: Atom, rows: list[Term]) -> None:
        """The scan of ``table``: it becomes the table's state, recorded events replayed on top."""
        recorded = self._recording.pop(table, None)
        if recorded is None:
            return  # dropped while its scan was on the way (or never begun): the scan is stale
        if table is QUEUE_INFO:
            self._load_queue_info(rows)
        elif table is LMQ_INFO:
            self._load_lmq_info(rows)
        else:
            name = name_from_atom(table)
            t = self.tables.setdefault(name, MirrorTable(self.clock))
            msgs: list[StoredMessage] = []
            for row in rows:
                try:
                    msgs.append(message_from_term(row))
                except ValueError:
                    log.warning("queue table %s holds a row that is not a message: %r", name, row)
            t.replace(msgs)
        for event in recorded:
            self._apply(event)
        if table not in ADMIN_TABLES:
            self._changed(name_from_atom(table))

    def drop(self, table: Atom) -> None:
        """The queue table is gone (deleted, or not in the schema after a re-scan)."""
        self._recording.pop(table, None)
        name = name_from_atom(table)
        self.foreign_writes.pop(name, None)
        self.foreign_nodes.pop(name, None)
        if self.tables.pop(name, None) is not None:
            self.seq.pop(name, None)
            if name in self.queue_props:
                # LMQ deletes the queue_info row first; a table going without it is still a delete.
                del self.queue_props[name]
                if self.listener is not None:
                    self.listener.on_queue_deleted(name)

    def _load_queue_info(self, rows: list[Term]) -> None:
        new: dict[str, RawProps] = {}
        for row in rows:
            if isinstance(row, tuple) and len(row) == 3 and isinstance(row[1], Atom):
                new[name_from_atom(row[1])] = props_from_term(row[2])
        old = self.queue_props
        self.queue_props = new
        if self.listener is None:
            return
        for name in old:
            if name not in new:
                self.listener.on_queue_deleted(name)
        for name, props in new.items():
            if name not in old:
                self.listener.on_queue_created(name)
            elif old[name] != props:
                self.listener.on_queue_props(name)

    def _load_lmq_info(self, rows: list[Term]) -> None:
        defaults: DefaultList = []
        virtual: dict[str, list[str]] = {}
        for row in rows:
            if isinstance(row, tuple) and len(row) == 3 and row[1] is DEFAULT_PROPS:
                defaults = default_list_from_term(row[2])
            elif (entry := virtual_from_row(row)) is not None and entry[1]:
                virtual[entry[0]] = entry[1]
        if virtual != self.virtual:
            self.virtual = virtual
            if self.listener is not None:
                self.listener.on_virtual()
        self._set_defaults(defaults)

    def _set_defaults(self, defaults: DefaultList) -> None:
        if defaults != self.defaults:
            self.defaults = defaults
            if self.listener is not None:
                self.listener.on_defaults()

    # -- events ---------------------------------------------------------------------------------------

    def apply(self, msg: Term) -> bool:
        """One message from mnesia_subscr; False if it is not a table event."""
        if not (type(msg) is tuple and len(msg) == 2 and msg[0] is EVENT and type(msg[1]) is tuple):
            return False
        self.events += 1
        event = msg[1]
        record = event[1] if len(event) >= 2 else None
        if not (type(record) is tuple and record and isinstance(record[0], Atom)):
            return True
        table = record[0]
        rec = self._recording.get(table)
        if rec is not None:
            rec.append(event)
        self._apply(event)
        return True

    def _apply(self, event: Term) -> None:
        op, record = event[0], event[1]
        table = record[0]
        if table is SCHEMA:
            self._schema(op, record)
        elif table is QUEUE_INFO:
            self._queue_info(op, record)
        elif table is LMQ_INFO:
            if len(record) == 3 and record[1] is DEFAULT_PROPS:
                self._set_defaults([] if op is not WRITE else default_list_from_term(record[2]))
            elif (entry := virtual_from_row(record if op is WRITE else (*record[:2], []))) is not None:
                name, queues = entry
                if self.virtual.get(name, []) != queues:
                    if queues:
                        self.virtual[name] = queues
                    else:
                        del self.virtual[name]
                    if self.listener is not None:
                        self.listener.on_virtual()
        else:
            self._queue_row(table, op, record, event)

    def _schema(self, op: Atom, record: Term) -> None:
        if len(record) < 2 or not isinstance(record[1], Atom):
            return
        table = record[1]
        if table in ADMIN_TABLES or table is SCHEMA:
            return
        if op is WRITE:
            # create_table writes its schema row twice, add_table_copy rewrites it: only new
            # tables are news.
            if name_from_atom(table) not in self.tables:
                self.begin(table)
                if self.listener is not None:
                    self.listener.on_table_created(table)
        elif op is DELETE or op is DELETE_OBJECT:
            self.drop(table)

    def _queue_info(self, op: Atom, record: Term) -> None:
        if len(record) < 2 or not isinstance(record[1], Atom):
            return
        name = name_from_atom(record[1])
        if op is WRITE and len(record) == 3:
            props = props_from_term(record[2])
            old = self.queue_props.get(name)
            self.queue_props[name] = props
            if self.listener is not None:
                if old is None:
                    self.listener.on_queue_created(name)
                elif old != props:
                    self.listener.on_queue_props(name)
        elif op is DELETE or op is DELETE_OBJECT:
            existed = self.queue_props.pop(name, None) is not None
            if existed and self.listener is not None:
                self.listener.on_queue_deleted(name)

    def _queue_row(self, table: Atom, op: Atom, record: Term, event: Term) -> None:
        name = name_from_atom(table)
        t = self.tables.get(name)
        if t is None:
            return  # a table we no longer (or not yet) mirror; its load will bring it
        owner = self.own_writer
        if owner is not None:
            coordinator = _coordinator(event)
            if coordinator is None or not owner(coordinator):
                self.foreign_writes[name] = self.clock()
                if type(coordinator) is Pid:
                    self.foreign_nodes[name] = coordinator.node.name
                else:
                    self.foreign_nodes.pop(name, None)  # this last write names no node
        if op is WRITE:
            try:
                t.put(message_from_term(record))
            except ValueError:
                log.warning("queue table %s: event with a row that is not a message: %r", name, record)
                return
        elif op is DELETE:
            if len(record) == 2 and isinstance(record[1], tuple) and len(record[1]) == 2:
                t.delete((float(record[1][0]), record[1][1]))
        elif op is DELETE_OBJECT and len(record) == 6 and isinstance(record[1], tuple):
            t.delete((float(record[1][0]), record[1][1]))
        self._changed(name)

    def _changed(self, name: str) -> None:
        self.seq[name] = self.seq.get(name, 0) + 1
        if self.listener is not None:
            self.listener.on_messages(name)


def _coordinator(event: Term) -> Term | None:
    """The coordinator of the transaction that wrote ``event``; None for a dirty write, or an
    event of another shape: nobody's transaction."""
    # A transaction's event carries its id, {tid, Counter, CoordinatorPid}.
    activity = event[2] if type(event) is tuple and len(event) >= 3 else None
    if not (type(activity) is tuple and len(activity) == 3 and activity[0] is TID):
        return None
    return activity[2]


def virtual_from_row(row: Term) -> tuple[str, list[str]] | None:
    """``{lmq_info, {pylmq_virtual_queues, Name}, [Queue]}`` as (name, queues); None if the row
    is not one (an empty list: the name was unbound). One row per name, so pylmq nodes that
    bind different names at once never overwrite each other's."""
    if not (isinstance(row, tuple) and len(row) == 3):
        return None
    key, value = row[1], row[2]
    if not (isinstance(key, tuple) and len(key) == 2 and key[0] is VIRTUAL_QUEUES and isinstance(key[1], bytes)):
        return None
    if not isinstance(value, list):
        return None
    queues = [q.decode("utf-8", "replace") for q in value if isinstance(q, bytes)]
    return key[1].decode("utf-8", "replace"), queues
