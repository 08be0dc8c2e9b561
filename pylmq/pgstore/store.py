"""``PostgresStore``: the :class:`~pylmq.core.store.Store` whose queues live in PostgreSQL.

Skeleton of the contract: every method is to be written (pool, schema migration, the node's
summaries, LISTEN/NOTIFY wake-ups, failure mapping); :mod:`pylmq.pgstore.messages` does the
message operations in SQL.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from pylmq.core.clock import Clock, SystemClock
from pylmq.core.message import Item, MessageId, PushOptions, Retry, StoredMessage
from pylmq.core.props import DefaultList, RawProps
from pylmq.core.store import DEFAULT_PG_POOL_SIZE, DEFAULT_PG_TIMEOUT, DedupIds, TransferListener
from pylmq.core.table import AccumResult, QueueCounts

__all__ = ["PostgresStore"]


class PostgresStore:
    kind = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        clock: Clock | None = None,
        pool_size: int = DEFAULT_PG_POOL_SIZE,
        timeout: float = DEFAULT_PG_TIMEOUT,
    ) -> None:
        self.dsn = dsn
        self.clock: Clock = clock or SystemClock()
        self.pool_size = pool_size
        self.timeout = timeout

    async def open(self) -> None:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def barrier(self) -> None:
        raise NotImplementedError

    def queue_names(self) -> list[str]:
        raise NotImplementedError

    def queue_props(self, name: str) -> RawProps | None:
        raise NotImplementedError

    def default_props(self) -> DefaultList:
        raise NotImplementedError

    async def create(self, name: str, props: RawProps | None = None) -> bool:
        raise NotImplementedError

    async def delete(self, name: str) -> bool:
        raise NotImplementedError

    async def set_queue_props(self, name: str, props: RawProps) -> None:
        raise NotImplementedError

    async def set_default_props(self, defaults: DefaultList) -> None:
        raise NotImplementedError

    def check_props(self, props: RawProps) -> None:
        raise NotImplementedError

    def check_push(self, options: PushOptions, retry: Retry) -> None:
        raise NotImplementedError

    def cluster_nodes(self) -> tuple[list[str], list[str]] | None:
        raise NotImplementedError

    def dedup_ids(self, name: str) -> DedupIds:
        raise NotImplementedError

    def keep_dedup(self, name: str, key: str, sent: float, message_id: str, sequence: str) -> None:
        raise NotImplementedError

    async def enqueue(self, name: str, item: Item, retry: Retry, accum: float) -> AccumResult:
        raise NotImplementedError

    async def push(self, name: str, item: Item, retry: Retry, options: PushOptions, *, track: bool = False) -> bytes:
        raise NotImplementedError

    async def dequeue(
        self, name: str, timeout: float, dead_letter: str | None = None
    ) -> tuple[StoredMessage, float] | None:
        raise NotImplementedError

    def listen_transfers(self, listener: TransferListener | None) -> None:
        raise NotImplementedError

    async def peek(self, name: str, after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
        raise NotImplementedError

    async def requeue(self, dlq: str, count: int, to: str | None, keep: Container[str] = ()) -> int:
        raise NotImplementedError

    def find_delivery(self, name: str, key: int) -> bytes | None:
        raise NotImplementedError

    def virtual_queues(self) -> dict[str, list[str]]:
        raise NotImplementedError

    async def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        raise NotImplementedError

    async def done(self, name: str, uuid: bytes) -> bool:
        raise NotImplementedError

    async def retain(self, name: str, uuid: bytes, timeout: float) -> bool:
        raise NotImplementedError

    async def release(self, name: str, uuid: bytes) -> bool:
        raise NotImplementedError

    async def put_back(self, name: str, uuid: bytes) -> bool:
        raise NotImplementedError

    async def claim(
        self, name: str, uuids: Sequence[bytes], timeout: float, max_bytes: int | None = None
    ) -> list[StoredMessage | None]:
        raise NotImplementedError

    def waittime(self, name: str) -> float | None:
        raise NotImplementedError

    def size(self, name: str) -> int:
        raise NotImplementedError

    def counts(self, name: str) -> QueueCounts:
        raise NotImplementedError

    def memory(self, name: str) -> int:
        raise NotImplementedError

    def messages(self, name: str) -> list[StoredMessage]:
        raise NotImplementedError
