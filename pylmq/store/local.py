"""A store whose tables live in this process (the base of `memory` and `durable`)."""

from __future__ import annotations

import asyncio
from collections.abc import Container, Sequence

from pylmq.core.clock import Clock, SystemClock
from pylmq.core.message import Item, MessageId, PushOptions, Retry, StoredMessage
from pylmq.core.props import DefaultList, RawProps, effective_props
from pylmq.core.store import DedupIds, TransferListener
from pylmq.core.table import (
    AccumResult,
    Journal,
    QueueCounts,
    QueueTable,
    dead_letter_record,
    page,
    requeued_record,
)

__all__ = ["PEEK_INLINE", "LocalStore"]

PEEK_INLINE = 10_000
"""A peek of a queue with more records picks its page in a worker thread, from a snapshot."""


class LocalStore:
    """In-process tables; every operation is atomic because it runs without awaiting.

    Subclasses set ``journal`` to record mutations and override :meth:`barrier`,
    :meth:`open`, :meth:`close` and the ``_on_*`` hooks for queue and property changes.
    """

    kind = "local"

    def __init__(self, clock: Clock | None = None, journal: Journal | None = None) -> None:
        self.clock: Clock = clock or SystemClock()
        self.journal = journal
        self.tables: dict[str, QueueTable] = {}
        self.props: dict[str, RawProps] = {}
        self.defaults: DefaultList = []
        self.virtual: dict[str, list[str]] = {}
        self.dedup: dict[str, DedupIds] = {}
        self._transfers: TransferListener | None = None

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def barrier(self) -> None:
        return None

    # -- hooks for subclasses that persist metadata -------------------------------------------

    def _on_queue(self, name: str, props: RawProps | None) -> None:
        """A queue was created (props given) or deleted (props None)."""

    def _on_defaults(self, defaults: DefaultList) -> None:
        """The default property list was replaced."""

    def _on_virtual(self, name: str, queues: list[str]) -> None:
        """A virtual queue was bound to ``queues``, or removed (no queues)."""

    # -- queues and properties ------------------------------------------------------------------

    def check_props(self, props: RawProps) -> None:
        return None  # every value parse_props lets through is served here

    def check_push(self, options: PushOptions, retry: Retry) -> None:
        return None  # every option check_options lets through is served here

    def cluster_nodes(self) -> tuple[list[str], list[str]] | None:
        return None

    async def lookup(self, name: str) -> bool:
        return False  # the node knows every queue of its own store

    def queue_names(self) -> list[str]:
        return list(self.tables)

    def queue_props(self, name: str) -> RawProps | None:
        return self.props.get(name)

    def default_props(self) -> DefaultList:
        return list(self.defaults)

    def table(self, name: str) -> QueueTable | None:
        return self.tables.get(name)

    def _create_now(self, name: str, props: RawProps | None) -> bool:
        if name in self.tables:
            if props is not None and props != self.props[name]:
                self.props[name] = dict(props)
                self._on_queue(name, self.props[name])
            return False
        self.tables[name] = QueueTable(name, self.journal)
        self.props[name] = dict(props or {})
        self._on_queue(name, self.props[name])
        return True

    async def create(self, name: str, props: RawProps | None = None) -> bool:
        return self._create_now(name, props)

    async def delete(self, name: str) -> bool:
        table = self.tables.pop(name, None)
        if table is None:
            return False
        self.props.pop(name, None)
        self.dedup.pop(name, None)
        table.clear()
        self._on_queue(name, None)
        return True

    async def set_queue_props(self, name: str, props: RawProps) -> None:
        if not self._create_now(name, props):
            return

    async def set_default_props(self, defaults: DefaultList) -> None:
        self.defaults = list(defaults)
        self._on_defaults(self.defaults)

    def dedup_ids(self, name: str) -> DedupIds:
        ids = self.dedup.get(name)
        if ids is None:
            ids = self.dedup[name] = {}
        return ids

    def keep_dedup(self, name: str, key: str, sent: float, message_id: str, sequence: str) -> None:
        return None  # nothing here outlives the process

    # -- messages ---------------------------------------------------------------------------------

    def _table(self, name: str) -> QueueTable:
        table = self.tables.get(name)
        if table is None:
            self._create_now(name, None)
            table = self.tables[name]
        return table

    async def enqueue(self, name: str, item: Item, retry: Retry, accum: float) -> AccumResult:
        return self._table(name).enqueue(item, retry, accum, self.clock.now())

    async def push(self, name: str, item: Item, retry: Retry, options: PushOptions, *, track: bool = False) -> bytes:
        return self._table(name).push(item, retry, self.clock.now(), options, track=track)

    async def dequeue(
        self, name: str, timeout: float, dead_letter: str | None = None, *, hold: bool = False
    ) -> tuple[StoredMessage, float] | None:
        table = self.tables.get(name)
        if table is None:
            return None
        if dead_letter is None or dead_letter == name:
            return table.dequeue(timeout, self.clock.now())
        if hold and dead_letter not in self.tables:
            return table.dequeue(timeout, self.clock.now(), hold=True)
        dead: list[StoredMessage] = []
        try:
            return table.dequeue(timeout, self.clock.now(), dead)
        finally:
            # Also when the dequeue failed midway: what it took out must land somewhere.
            if dead:
                self._transfer_dead(name, dead, dead_letter)

    async def dequeue_in_group(
        self, name: str, group: str, timeout: float, after: bytes | None = None
    ) -> tuple[StoredMessage, float] | None:
        # One table: the group's records in processing are this node's, ``after`` adds nothing.
        del after
        table = self.tables.get(name)
        return None if table is None else table.dequeue_in_group(group, timeout, self.clock.now())

    def _retry_of(self, name: str) -> Retry:
        """The queue's effective retry (a transferred record is pushed there)."""
        return effective_props(name, self.props.get(name), self.defaults).retry

    def _transfer_dead(self, origin: str, dead: list[StoredMessage], target: str) -> None:
        table = self._table(target)
        retry, now = self._retry_of(target), self.clock.now()
        for m in dead:
            msg = dead_letter_record(m, retry, now)
            table.adopt(msg)
            if self.journal is not None:
                self.journal.transfer(origin, m.uuid, target, msg)
        if self._transfers is not None:
            self._transfers(target)

    def listen_transfers(self, listener: TransferListener | None) -> None:
        self._transfers = listener

    async def peek(self, name: str, after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
        table = self.tables.get(name)
        if table is None:
            return []
        if len(table) <= PEEK_INLINE:
            return table.peek(after, limit)
        # O(n log limit) over a deep queue: off the loop, on a snapshot the loop may go on changing.
        return await asyncio.to_thread(page, table.snapshot(), after, limit)

    async def requeue(self, dlq: str, count: int, to: str | None, keep: Container[str] = ()) -> int:
        table = self.tables.get(dlq)
        if table is None:
            return 0
        now, moved = self.clock.now(), 0
        touched: set[str] = set()
        for m in table.take_dead(count, () if to is not None else keep):
            assert m.ext is not None and m.ext.dead is not None
            target = to if to is not None else m.ext.dead.origin
            msg = requeued_record(m, self._retry_of(target), now)
            self._table(target).adopt(msg)
            if self.journal is not None:
                self.journal.transfer(dlq, m.uuid, target, msg)
            touched.add(target)
            moved += 1
        if self._transfers is not None:
            for target in touched:
                self._transfers(target)
        return moved

    def find_delivery(self, name: str, key: int) -> bytes | None:
        table = self.tables.get(name)
        return None if table is None else table.find_delivery(key)

    def virtual_queues(self) -> dict[str, list[str]]:
        return {name: list(queues) for name, queues in self.virtual.items()}

    async def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        members = list(queues)
        if members:
            self.virtual[name] = members
        elif self.virtual.pop(name, None) is None:
            return
        self._on_virtual(name, members)

    async def done(self, name: str, uuid: bytes) -> bool:
        table = self.tables.get(name)
        return table is not None and table.done(uuid, self.clock.now())

    async def retain(self, name: str, uuid: bytes, timeout: float) -> bool:
        table = self.tables.get(name)
        return table is not None and table.retain(uuid, timeout, self.clock.now())

    async def release(self, name: str, uuid: bytes) -> bool:
        table = self.tables.get(name)
        return table is not None and table.release(uuid, self.clock.now())

    async def put_back(self, name: str, uuid: bytes) -> bool:
        table = self.tables.get(name)
        return table is not None and table.put_back(uuid, self.clock.now())

    async def claim(
        self, name: str, uuids: Sequence[bytes], timeout: float, max_bytes: int | None = None
    ) -> list[StoredMessage | None]:
        table = self.tables.get(name)
        return [None] * len(uuids) if table is None else table.claim(uuids, timeout, self.clock.now(), max_bytes)

    # -- reads --------------------------------------------------------------------------------------

    def waittime(self, name: str) -> float | None:
        table = self.tables.get(name)
        return None if table is None else table.waittime(self.clock.now())

    def size(self, name: str) -> int:
        table = self.tables.get(name)
        return 0 if table is None else len(table)

    def counts(self, name: str) -> QueueCounts:
        table = self.tables.get(name)
        return QueueCounts(0, 0, 0) if table is None else table.counts(self.clock.now())

    def memory(self, name: str) -> int:
        table = self.tables.get(name)
        return 0 if table is None else table.bytes

    def messages(self, name: str) -> list[StoredMessage]:
        table = self.tables.get(name)
        return [] if table is None else table.messages()
