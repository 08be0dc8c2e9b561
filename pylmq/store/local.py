"""A store whose tables live in this process (the base of `memory` and `durable`)."""

from __future__ import annotations

from collections.abc import Sequence

from pylmq.core.clock import Clock, SystemClock
from pylmq.core.message import Item, Retry, StoredMessage
from pylmq.core.props import DefaultList, RawProps
from pylmq.core.table import AccumResult, Journal, QueueTable

__all__ = ["LocalStore"]


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

    # -- queues and properties ------------------------------------------------------------------

    def check_props(self, props: RawProps) -> None:
        return None  # every value parse_props lets through is served here

    def cluster_nodes(self) -> tuple[list[str], list[str]] | None:
        return None

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
        table.clear()
        self._on_queue(name, None)
        return True

    async def set_queue_props(self, name: str, props: RawProps) -> None:
        if not self._create_now(name, props):
            return

    async def set_default_props(self, defaults: DefaultList) -> None:
        self.defaults = list(defaults)
        self._on_defaults(self.defaults)

    # -- messages ---------------------------------------------------------------------------------

    def _table(self, name: str) -> QueueTable:
        table = self.tables.get(name)
        if table is None:
            self._create_now(name, None)
            table = self.tables[name]
        return table

    async def enqueue(self, name: str, item: Item, retry: Retry, accum: float) -> AccumResult:
        return self._table(name).enqueue(item, retry, accum, self.clock.now())

    async def dequeue(self, name: str, timeout: float) -> tuple[StoredMessage, float] | None:
        table = self.tables.get(name)
        return None if table is None else table.dequeue(timeout, self.clock.now())

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

    def memory(self, name: str) -> int:
        table = self.tables.get(name)
        return 0 if table is None else table.bytes

    def messages(self, name: str) -> list[StoredMessage]:
        table = self.tables.get(name)
        return [] if table is None else table.messages()
