"""Message operations of the PostgreSQL store: LMQ's record rules (and pylmq's per-message
options) as SQL, each operation one round trip and one transaction.

Contract with :mod:`pylmq.pgstore.store` (which resolves queue names to ids, keeps the node's
summaries, maps connection failures to :class:`~pylmq.errors.StoreUnavailable` and tells waiters):

- Every function takes ``db`` (an asyncpg pool or connection), the queue's id and the node
  clock's ``now``: every time in the database is the nodes' clocks (as LMQ's Mnesia rows are),
  never PostgreSQL's.
- Every function that changes a queue returns that queue's :class:`QueueState` as committed
  with the change, so the node's summary of it is exact after its own operations.
- Every change that makes a record deliverable (a push, an accumulation window opened, a
  release, a put back, a dead letter or requeue landing) sends ``NOTIFY lmq_due, '<queue
  id>:<ts>'`` in its transaction, so other nodes' waiters wake when it commits (never before,
  never lost while their LISTEN session is up).
- Rows are locked only inside one statement or function: ``FOR UPDATE SKIP LOCKED`` for
  deliveries, so concurrent consumers on any node never wait for each other and never get the
  same delivery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pylmq.core.message import Item, MessageId, PushOptions, Retry, StoredMessage
from pylmq.core.table import AccumResult

__all__ = ["Db", "QueueState"]

Db = Any
"""An ``asyncpg.Pool`` or ``asyncpg.Connection`` (both run a statement with fetch/fetchrow)."""


@dataclass(frozen=True, slots=True)
class QueueState:
    """A queue as committed with an operation: its records, their payload bytes
    (:meth:`StoredMessage.nbytes`), those in processing, and the first record's ts (None when
    empty: what :meth:`Store.waittime` needs)."""

    size: int
    nbytes: int
    in_flight: int
    first_ts: float | None


async def enqueue(
    db: Db, qid: int, item: Item, retry: Retry, accum: float, now: float
) -> tuple[AccumResult, QueueState]:
    raise NotImplementedError


async def push(
    db: Db, qid: int, item: Item, retry: Retry, options: PushOptions, track: bool, now: float
) -> tuple[bytes, QueueState]:
    raise NotImplementedError


async def dequeue(
    db: Db, qid: int, timeout: float, now: float, dead: tuple[int, Retry] | None
) -> tuple[tuple[StoredMessage, float] | None, QueueState, int]:
    """The delivery (record, retention) or None, the queue's state, and how many exhausted
    records moved to the dead-letter queue ``dead`` = (its id, its effective retry)."""
    raise NotImplementedError


async def done(db: Db, qid: int, uuid: bytes, now: float) -> tuple[bool, QueueState]:
    raise NotImplementedError


async def retain(db: Db, qid: int, uuid: bytes, timeout: float, now: float) -> tuple[bool, QueueState]:
    raise NotImplementedError


async def release(db: Db, qid: int, uuid: bytes, now: float) -> tuple[bool, QueueState]:
    raise NotImplementedError


async def put_back(db: Db, qid: int, uuid: bytes, now: float) -> tuple[bool, QueueState]:
    raise NotImplementedError


async def claim(
    db: Db, qid: int, uuids: Sequence[bytes], timeout: float, now: float, max_bytes: int | None
) -> tuple[list[StoredMessage | None], QueueState]:
    raise NotImplementedError


async def peek(db: Db, qid: int, after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
    raise NotImplementedError


async def requeue(
    db: Db,
    dlq: int,
    count: int,
    to: tuple[int, Retry] | None,
    targets: dict[str, tuple[int, Retry]],
    keep: Sequence[str],
    now: float,
) -> dict[int, int]:
    """Move up to ``count`` available dead letters of ``dlq`` (first first) to ``to`` or to their
    origin (``targets``: origin name -> (id, effective retry), the store created them), skipping
    origins in ``keep`` when ``to`` is None; how many landed in each target id."""
    raise NotImplementedError


async def find_delivery(db: Db, qid: int, key: int, now: float) -> bytes | None:
    raise NotImplementedError


async def messages(db: Db, qid: int) -> list[StoredMessage]:
    raise NotImplementedError


async def state(db: Db, qid: int) -> QueueState:
    raise NotImplementedError
