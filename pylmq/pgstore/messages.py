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

How (the migrations in :mod:`pylmq.pgstore.schema` hold the SQL):

- Each operation is one call of a PL/pgSQL function (``lmq.enqueue``, ``lmq.push``,
  ``lmq.dequeue``, ``lmq.dequeue_in_group``, ``lmq.done``, ``lmq.move``, ``lmq.claim``,
  ``lmq.peek``, ``lmq.requeue``) or one statement (:func:`find_delivery`, :func:`messages`,
  :func:`state`): one round trip, one transaction (autocommit), whatever records a dequeue
  drops or dead-letters on its way. Python only resolves push options (pure functions of the
  arguments) and encodes items (:mod:`pylmq.pgstore.codec`).
- A record is one row of ``lmq.message``; its id is ``(ts, uuid)``, a delivery updates both (a
  new uuid drawn by ``gen_random_uuid()``). Records without options keep ``ext`` false and read
  back with ``ext=None``. Acks delete.
- Deliveries walk ``message_due`` (queue_id, ts, uuid), the queue's id order without the grouped
  records that wait behind their group's head (``held``), after one probe of ``message_priority``
  (records with a priority, highest level first). A group's head is its record in processing, or
  else its first by ``seq``; when the head leaves, the next one is promoted under the group's
  advisory lock (a grouped push takes it too).
- :class:`QueueState`: ``lmq.queue_count`` keeps per-queue deltas in up to 8 rows (the shard of
  the connection, ``pg_backend_pid() % 8``) updated in each operation's transaction, summed on
  read; ``first_ts`` is one probe of ``message_due``: the first record a dequeue could look at, as
  QueueTable's ``first()`` (grouped records waiting behind their head do not count).

Signatures beyond the contract's first draft: :func:`dequeue` also answers how many records it
moved to the dead-letter queue (whose state the caller reads with :func:`state`);
:func:`requeue` answers the state of the dead-letter queue and of each target too;
:func:`claim` ends the list early at ``max_bytes``; :func:`peek` raises
:class:`~pylmq.errors.MessageNotFound` for a uuid cursor that has left the queue.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import asyncpg

from pylmq.core.message import (
    DeadLetter,
    DedupClaim,
    Inherit,
    Item,
    MessageExt,
    MessageId,
    PushOptions,
    Retry,
    State,
    StoredMessage,
    StoredMessageType,
)
from pylmq.core.table import AccumResult
from pylmq.errors import MessageNotFound
from pylmq.pgstore.codec import decode_content, encode_item, item_nbytes

__all__ = [
    "Db",
    "QueueState",
    "claim",
    "dequeue",
    "dequeue_in_group",
    "done",
    "enqueue",
    "find_delivery",
    "messages",
    "peek",
    "push",
    "push_dedup",
    "put_back",
    "release",
    "requeue",
    "retain",
    "state",
]

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


_STATES: Final = (State.AVAILABLE, State.PROCESSING, State.ACCUM)
_ST: Final = "f.st_size, f.st_nbytes, f.st_in_flight, f.st_first"


def _state_of(row: Mapping[str, Any]) -> QueueState:
    return QueueState(row["st_size"], row["st_nbytes"], row["st_in_flight"], row["st_first"])


def _pg_uuid(u: bytes) -> _uuid.UUID:
    return _uuid.UUID(bytes=u)


def _record(row: Mapping[str, Any]) -> StoredMessage:
    """A row of ``lmq.message`` as the StoredMessage QueueTable would hold."""
    compound: bool = row["compound"]
    ext: MessageExt | None = None
    if row["ext"]:
        origin = row["dead_origin"]
        dead = (
            None
            if origin is None
            else DeadLetter(origin, row["dead_failures"], row["dead_last_at"], row["dead_reason"])
        )
        ext = MessageExt(
            expires=row["expires"],
            interval=row["interval"],
            priority=row["priority"],
            once=row["once"],
            attempts=row["attempts"],
            first_at=row["first_at"],
            last_at=row["last_at"],
            sent_at=row["sent_at"],
            dead=dead,
            hard=row["hard"],
            group=row["grp"],
            seq=row["seq"],
        )
    return StoredMessage(
        (row["ts"], row["uuid"].bytes),
        _STATES[row["state"]],
        StoredMessageType.COMPOUND if compound else StoredMessageType.NORMAL,
        row["retry"],
        decode_content(row["content"], compound),
        ext,
    )


def _inc(retry: Retry) -> Retry:
    return None if retry is None else retry + 1


async def enqueue(
    db: Db, qid: int, item: Item, retry: Retry, accum: float, now: float
) -> tuple[AccumResult, QueueState]:
    """LMQ's push: a record due now (``accum`` <= 0), else the item joins the queue's open
    accumulation window (a compound record, state accumulating until its ts) or opens one at
    ``now + accum``. ``retry`` is the queue's retry property."""
    row = await db.fetchrow(
        f"SELECT f.result, {_ST} FROM lmq.enqueue($1, $2, $3, $4, $5, $6) f",
        qid,
        encode_item(item),
        item_nbytes(item),
        _inc(retry),
        float(accum),
        float(now),
    )
    result: AccumResult = row["result"]
    return result, _state_of(row)


async def push(
    db: Db, qid: int, item: Item, retry: Retry, options: PushOptions, track: bool, now: float
) -> tuple[bytes, QueueState]:
    """A push with per-message options (QueueTable.push); the record's uuid. The options are
    resolved here, as pure functions of the arguments (no round trip for them): ``once`` is
    retry 0, an ``interval`` without a retry is unlimited, a delay is the record's ts."""
    row = await db.fetchrow(
        f"SELECT f.id, {_ST} FROM lmq.push($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) f",
        *_push_args(qid, item, retry, options, track, now),
    )
    return row["id"].bytes, _state_of(row)


async def push_dedup(
    db: Db,
    qid: int,
    name: str,
    claim: DedupClaim,
    horizon: float,
    item: Item,
    retry: Retry,
    options: PushOptions,
    track: bool,
    now: float,
) -> tuple[bytes | tuple[float, str, str], QueueState]:
    """:func:`push` taking the deduplication id ``claim`` of queue ``name`` in the same
    transaction: the record's uuid, or, when another send holds the id (sent after
    ``horizon``), that send's (sent, message id, sequence) and nothing pushed."""
    row = await db.fetchrow(
        f"SELECT f.id, f.dup_sent, f.dup_message_id, f.dup_sequence, {_ST} FROM lmq.push_dedup("
        "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19) f",
        qid,
        name,
        claim.key,
        float(claim.sent),
        claim.message_id,
        claim.sequence,
        float(horizon),
        *_push_args(qid, item, retry, options, track, now)[1:],
    )
    if row["id"] is None:
        return (row["dup_sent"], row["dup_message_id"], row["dup_sequence"]), _state_of(row)
    return row["id"].bytes, _state_of(row)


def _push_args(qid: int, item: Item, retry: Retry, options: PushOptions, track: bool, now: float) -> tuple[Any, ...]:
    """lmq.push's arguments."""
    r = options.retry
    if options.once:
        r = 0
    elif isinstance(r, Inherit):
        r = None if options.interval is not None else retry
    nb = options.not_before
    ts = float(now) if nb is None or nb <= now else float(nb)
    ext = track or options.needs_ext()
    return (
        qid,
        encode_item(item),
        item_nbytes(item),
        _inc(r),
        ts,
        ext,
        options.expires if ext else None,
        options.interval if ext else None,
        options.priority if ext else 0,
        options.once if ext else False,
        options.hard if ext else False,
        options.group if ext else None,
        float(now),
    )


async def dequeue(
    db: Db, qid: int, timeout: float, now: float, dead: tuple[int | str, Retry] | None
) -> tuple[tuple[StoredMessage, float] | None, QueueState, int]:
    """The delivery (record, retention) or None, the queue's state, and how many exhausted
    records moved to the dead-letter queue ``dead`` = (its id, its effective retry) in the same
    transaction (the caller asks :func:`state` of that queue when it is not 0). With the
    queue's name instead of its id, SQS's rule: the queue is looked up in the transaction and,
    when there is none of that name, records out of retries are delivered again (held)."""
    dlq_id = dlq_name = None
    if dead is not None:
        if isinstance(dead[0], str):
            dlq_name = dead[0]
        else:
            dlq_id = dead[0]
    row = await db.fetchrow(
        f"SELECT (f.m).*, f.retention, f.ndead, {_ST} FROM lmq.dequeue($1, $2, $3, $4, $5, $6) f",
        qid,
        float(timeout),
        float(now),
        dlq_id,
        None if dead is None else dead[1],
        dlq_name,
    )
    got = None if row["uuid"] is None else (_record(row), row["retention"])
    return got, _state_of(row), row["ndead"]


async def dequeue_in_group(
    db: Db, qid: int, group: str, prev: bytes, timeout: float, now: float
) -> tuple[tuple[StoredMessage, float] | None, QueueState]:
    """The next record of ``group`` after ``prev`` (a record of the group the caller holds in
    processing), delivered, or None (lmq.dequeue_in_group says when); the queue's state."""
    row = await db.fetchrow(
        f"SELECT (f.m).*, f.retention, {_ST} FROM lmq.dequeue_in_group($1, $2, $3, $4, $5) f",
        qid,
        group,
        _pg_uuid(prev),
        float(timeout),
        float(now),
    )
    got = None if row["uuid"] is None else (_record(row), row["retention"])
    return got, _state_of(row)


async def done(db: Db, qid: int, uuid: bytes, now: float) -> tuple[bool, QueueState]:
    """ack: the record in processing under ``uuid``, deadline not passed, is deleted."""
    row = await db.fetchrow(f"SELECT f.ok, {_ST} FROM lmq.done($1, $2, $3) f", qid, _pg_uuid(uuid), float(now))
    return row["ok"], _state_of(row)


async def _move(db: Db, qid: int, uuid: bytes, mode: str, timeout: float, now: float) -> tuple[bool, QueueState]:
    row = await db.fetchrow(
        f"SELECT f.ok, {_ST} FROM lmq.move($1, $2, $3, $4, $5) f",
        qid,
        _pg_uuid(uuid),
        mode,
        float(timeout),
        float(now),
    )
    return row["ok"], _state_of(row)


async def retain(db: Db, qid: int, uuid: bytes, timeout: float, now: float) -> tuple[bool, QueueState]:
    """ext: a new deadline, now + the record's interval or ``timeout``."""
    return await _move(db, qid, uuid, "retain", timeout, now)


async def release(db: Db, qid: int, uuid: bytes, now: float) -> tuple[bool, QueueState]:
    """nack: available again now; the retry spent by the delivery stays spent."""
    return await _move(db, qid, uuid, "release", 0.0, now)


async def put_back(db: Db, qid: int, uuid: bytes, now: float) -> tuple[bool, QueueState]:
    """The receiver is gone: available again now, and the delivery costs no retry."""
    return await _move(db, qid, uuid, "put_back", 0.0, now)


async def claim(
    db: Db, qid: int, uuids: Sequence[bytes], timeout: float, now: float, max_bytes: int | None
) -> tuple[list[StoredMessage | None], QueueState]:
    """QueueTable.claim: each record in processing or available again under one of ``uuids``
    becomes processing until now + its interval or ``timeout``; None for the others; the list
    stops once ``max_bytes`` of payload are claimed."""
    rows = await db.fetch(
        f"SELECT f.ord, (f.m).*, {_ST} FROM lmq.claim($1, $2, $3, $4, $5) f",
        qid,
        [_pg_uuid(u) for u in uuids],
        float(timeout),
        float(now),
        max_bytes,
    )
    out = [None if r["uuid"] is None else _record(r) for r in rows[:-1]]
    return out, _state_of(rows[-1])


async def peek(db: Db, qid: int, after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
    """Up to ``limit`` records in id order after ``after``: an id, or the uuid of a record still
    in the queue (:class:`MessageNotFound` when it has left). Changes nothing."""
    if isinstance(after, bytes):
        args: tuple[Any, ...] = (None, _pg_uuid(after), True)
    elif after is None:
        args = (None, None, False)
    else:
        args = (float(after[0]), _pg_uuid(after[1]), False)
    try:
        rows = await db.fetch("SELECT * FROM lmq.peek($1, $2, $3, $4, $5)", qid, *args, limit)
    except asyncpg.exceptions.NoDataFoundError:
        raise MessageNotFound("the peek cursor's message has left the queue: start again without it") from None
    return [_record(r) for r in rows]


async def requeue(
    db: Db,
    dlq: int,
    count: int,
    to: tuple[int, Retry] | None,
    targets: Mapping[str, tuple[int, Retry]],
    keep: Sequence[str],
    now: float,
) -> tuple[dict[int, int], dict[int, QueueState]]:
    """Move up to ``count`` available dead letters of ``dlq`` (first first) to ``to`` or to their
    origin (``targets``: origin name -> (id, effective retry), the store created them), skipping
    origins in ``keep`` when ``to`` is None; how many landed in each target id, and the state of
    ``dlq`` and of each target, as committed."""
    names = list(targets)
    rows = await db.fetch(
        f"SELECT f.qid, f.moved, {_ST} FROM lmq.requeue($1, $2, $3, $4, $5, $6, $7, $8, $9) f",
        dlq,
        count,
        None if to is None else to[0],
        None if to is None else to[1],
        names,
        [targets[n][0] for n in names],
        [targets[n][1] for n in names],
        list(keep),
        float(now),
    )
    moved = {r["qid"]: r["moved"] for r in rows if r["moved"]}
    return moved, {r["qid"]: _state_of(r) for r in rows}


async def find_delivery(db: Db, qid: int, key: int, now: float) -> bytes | None:
    """The uuid of the record in processing whose :func:`~pylmq.core.message.msg_key` is
    ``key``; None when none has it, or more than one (never a wrong one)."""
    rows = await db.fetch(
        "SELECT uuid FROM lmq.message WHERE queue_id = $1 AND key = $2 AND state = 1 LIMIT 2", qid, key
    )
    return rows[0]["uuid"].bytes if len(rows) == 1 else None


async def messages(db: Db, qid: int) -> list[StoredMessage]:
    """All records in id order (status, tests): a scan of the queue."""
    rows = await db.fetch("SELECT * FROM lmq.message WHERE queue_id = $1 ORDER BY ts, uuid", qid)
    return [_record(r) for r in rows]


async def state(db: Db, qid: int) -> QueueState:
    row = await db.fetchrow("SELECT * FROM lmq.queue_state($1) f", qid)
    return _state_of(row)
