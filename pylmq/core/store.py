"""The `Store` protocol: what a store does, in the shape of LMQ's ``lmq_lib`` contract.

A store knows tables of message records and does each operation atomically. It knows nothing of
HTTP, waiters or clients. Mutations are ``async`` (a store whose tables live on Erlang nodes does
each one as a Mnesia transaction on a peer); reads that status, stats and wake-up timing need on
every request are synchronous, served from local state (or, for the Mnesia store, its mirror).

Durability is separated from mutation: a mutation returns once it is applied (visible to every
later operation), and :meth:`Store.barrier` returns once every mutation applied before the call
is durable under the configured policy. The queue layer awaits the barrier before it answers a
client, so concurrent requests share one group commit.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from typing import Final, Literal, Protocol, get_args, runtime_checkable

from pylmq.core.message import Item, MessageId, PushOptions, Retry, StoredMessage
from pylmq.core.props import DefaultList, RawProps
from pylmq.core.table import AccumResult, QueueCounts

__all__ = [
    "DEFAULT_DATA_DIR",
    "DEFAULT_DISK_RESERVE_BYTES",
    "DEFAULT_FSYNC",
    "DEFAULT_FSYNC_INTERVAL",
    "DEFAULT_JOURNAL_MAX_BYTES",
    "DEFAULT_PG_POOL_SIZE",
    "DEFAULT_PG_TIMEOUT",
    "DEFAULT_STORE",
    "FSYNC_POLICIES",
    "STORE_KINDS",
    "FsyncPolicy",
    "Store",
    "StoreKind",
    "TransferListener",
]

TransferListener = Callable[[str], None]
"""Told the name of a queue that records were just transferred into (dead letters, requeues),
possibly a queue the store has just created: its waiters are to be woken."""

# The one definition of what the configuration may choose; app.config, the command line and
# NodeOptions all check against these.
StoreKind = Literal["memory", "durable", "postgres"]
"""Stores a node can be configured with (``mnesia`` is not one: a node gets it by joining)."""
STORE_KINDS: Final[tuple[StoreKind, ...]] = get_args(StoreKind)
DEFAULT_STORE: Final[StoreKind] = "durable"

FsyncPolicy = Literal["always", "interval", "none"]
"""When the durable store fsyncs its journal (see :mod:`pylmq.store.durable`)."""
FSYNC_POLICIES: Final[tuple[FsyncPolicy, ...]] = get_args(FsyncPolicy)
DEFAULT_FSYNC: Final[FsyncPolicy] = "interval"
"""Like Redis's ``appendfsync everysec``: an answered change survives the node process crashing
or being killed (it is in the page cache); a power cut or an OS crash can lose the last
``fsync_interval`` of them. ``always`` closes that window at about half the throughput
(``python -m bench``)."""
DEFAULT_FSYNC_INTERVAL: Final[float] = 1.0
"""Seconds between the durable store's fsyncs under ``interval`` (app.config's is in ms)."""

# The durable store's defaults (pylmq.store.durable.DurableStore), which Settings and
# NodeOptions repeat by reference: its data directory, relative to the working directory as
# LMQ's Mnesia directory is; how far its journal may grow while compaction fails; and the free
# space it keeps on the disk. Past a limit it refuses pushes (503 store_full).
DEFAULT_DATA_DIR: Final[str] = "data"
DEFAULT_JOURNAL_MAX_BYTES: Final[int] = 1 << 30
DEFAULT_DISK_RESERVE_BYTES: Final[int] = 64 << 20

# The PostgreSQL store's defaults (pylmq.pgstore): connections each node keeps to the database,
# and how long one statement may take before the operation is answered 503 store_unavailable.
DEFAULT_PG_POOL_SIZE: Final[int] = 10
DEFAULT_PG_TIMEOUT: Final[float] = 5.0


DEDUP_WINDOW: Final[float] = 300.0
"""SQS's deduplication interval: a FIFO send whose deduplication id was sent within it is
accepted and answered as that send was, without a new message."""
MAX_DEDUP: Final[int] = 100_000
"""Deduplication ids a store keeps per FIFO queue; past that the oldest are forgotten. AWS
states no cap; this one is a send every 3 ms for the whole window, and bounds the memory and
the journal's snapshot of a queue sent to faster."""

DedupIds = dict[str, tuple[float, str, str]]
"""A FIFO queue's deduplication keys sent within the window: (when, MessageId, SequenceNumber),
oldest first."""


def prune_dedup(ids: DedupIds, now: float) -> None:
    """Forget the ids sent before the window and the oldest past :data:`MAX_DEDUP`."""
    while ids:
        oldest = next(iter(ids))
        if ids[oldest][0] > now - DEDUP_WINDOW and len(ids) <= MAX_DEDUP:
            break
        del ids[oldest]


@runtime_checkable
class Store(Protocol):
    kind: str
    """``memory``, ``durable`` or ``mnesia``: shown in status and logs."""

    async def open(self) -> None:
        """Load or recover state; called once before any other method."""
        ...

    async def close(self) -> None:
        """Make everything durable and release resources."""
        ...

    async def barrier(self) -> None:
        """Return when every mutation applied before this call is durable."""
        ...

    # -- queues and properties --------------------------------------------------------------

    def queue_names(self) -> list[str]: ...

    def queue_props(self, name: str) -> RawProps | None:
        """The queue's own (raw) properties; ``None`` if the queue does not exist."""
        ...

    def default_props(self) -> DefaultList: ...

    async def create(self, name: str, props: RawProps | None = None) -> bool:
        """Create the queue if missing (``props`` None keeps existing ones); True if created."""
        ...

    async def delete(self, name: str) -> bool:
        """Drop the queue and its messages; False if it did not exist."""
        ...

    async def lookup(self, name: str) -> bool:
        """Whether queue ``name``, which the node does not know, exists in the store all the
        same (a store shared with other nodes: created elsewhere, not heard of yet); if so the
        node is told of it as of any other node's new queue. Stores whose queue list the node
        always has answer False."""
        ...

    async def set_queue_props(self, name: str, props: RawProps) -> None: ...

    async def set_default_props(self, defaults: DefaultList) -> None: ...

    def check_props(self, props: RawProps) -> None:
        """Raise :class:`~pylmq.errors.InvalidProps` for valid props that this store cannot keep
        (the Erlang nodes of a cluster cannot serve every value pylmq can)."""
        ...

    def check_push(self, options: PushOptions, retry: Retry) -> None:
        """Raise :class:`~pylmq.errors.NotSupported` for a push with ``options`` (to a queue
        whose own retry property is ``retry``) that this store cannot honour; called for every queue of a
        push before any is created or written."""
        ...

    def cluster_nodes(self) -> tuple[list[str], list[str]] | None:
        """(all nodes, active nodes) of the cluster whose tables this store serves, as LMQ's
        ``/stats`` lists them; None while the store is this node's own."""
        ...

    def dedup_ids(self, name: str) -> DedupIds:
        """The queue's deduplication ids (SQS FIFO): the map the SQS layer reads, adds to and
        prunes; the store keeps it across restarts if it keeps messages (with :meth:`keep_dedup`)."""
        ...

    def keep_dedup(self, name: str, key: str, sent: float, message_id: str, sequence: str) -> None:
        """Make one entry of :meth:`dedup_ids` survive a restart (the map has it already); the
        next :meth:`barrier` covers it."""
        ...

    # -- messages -----------------------------------------------------------------------------

    async def enqueue(self, name: str, item: Item, retry: Retry, accum: float) -> AccumResult: ...

    async def push(self, name: str, item: Item, retry: Retry, options: PushOptions, *, track: bool = False) -> bytes:
        """Push with per-message options (:meth:`QueueTable.push
        <pylmq.core.table.QueueTable.push>`; ``track``: the queue has a dead-letter queue);
        creates the queue if missing; the record's uuid. Never accumulates."""
        ...

    async def dequeue(
        self, name: str, timeout: float, dead_letter: str | None = None, *, hold: bool = False
    ) -> tuple[StoredMessage, float] | None:
        """The delivered record and how long it waited (retention, seconds), or None. With
        ``dead_letter``, records exhausted on the way move to that queue (created if missing;
        each move one atomic change), and the transfer listener is told its name. With
        ``hold`` too, a missing ``dead_letter`` is not created: exhausted records stay and are
        delivered again (SQS's rule for a deleted dead-letter queue)."""
        ...

    async def dequeue_in_group(
        self, name: str, group: str, timeout: float, after: bytes | None = None
    ) -> tuple[StoredMessage, float] | None:
        """The next record of message group ``group`` after those in processing, delivered as
        :meth:`dequeue` delivers (:meth:`QueueTable.dequeue_in_group
        <pylmq.core.table.QueueTable.dequeue_in_group>`), for a receive that has just taken the
        group's head; None when there is none to take so. ``after``: the uuid of the group's
        record the receive took last (its head, or the last one this gave it), by which a store
        shared by nodes knows the group is still this receive's (one table's store does not
        need it)."""
        ...

    def listen_transfers(self, listener: TransferListener | None) -> None:
        """Install the one listener told of queues that records were transferred into."""
        ...

    async def peek(self, name: str, after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
        """Up to ``limit`` records in id order after ``after`` (an id, or the uuid of a record
        still in the queue: :class:`~pylmq.errors.MessageNotFound` when it is not), without
        delivering or changing anything (:func:`pylmq.core.table.page`)."""
        ...

    async def requeue(self, dlq: str, count: int, to: str | None, keep: Container[str] = ()) -> int:
        """Move up to ``count`` available dead letters of ``dlq``, first first, to their origin
        queue (or ``to``), as new available records; how many moved. Without ``to``, those
        whose origin is in ``keep`` stay (the manager's virtual names: no queue may take them)."""
        ...

    def find_delivery(self, name: str, key: int) -> bytes | None:
        """The uuid of the processing record of ``name`` whose index key is ``key`` (see
        :meth:`QueueTable.find_delivery <pylmq.core.table.QueueTable.find_delivery>`)."""
        ...

    def virtual_queues(self) -> dict[str, list[str]]:
        """The virtual queues this store keeps: name -> member queue names."""
        ...

    async def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        """Bind (or, with no queues, remove) a virtual queue; the caller validated it."""
        ...

    async def done(self, name: str, uuid: bytes) -> bool: ...

    async def retain(self, name: str, uuid: bytes, timeout: float) -> bool: ...

    async def release(self, name: str, uuid: bytes) -> bool: ...

    async def put_back(self, name: str, uuid: bytes) -> bool: ...

    async def claim(
        self, name: str, uuids: Sequence[bytes], timeout: float, max_bytes: int | None = None
    ) -> list[StoredMessage | None]:
        """Take messages back by the uuid of their delivery (see :meth:`QueueTable.claim
        <pylmq.core.table.QueueTable.claim>`): each becomes processing with deadline now +
        ``timeout``, same uuid; ``None`` for each uuid no claimable record has. Stops after
        ``max_bytes`` of claimed payload: the answer then covers only the first uuids."""
        ...

    # -- synchronous reads ----------------------------------------------------------------------

    def waittime(self, name: str) -> float | None:
        """Seconds until the queue's first record is deliverable; None when empty or missing."""
        ...

    def size(self, name: str) -> int: ...

    def counts(self, name: str) -> QueueCounts:
        """The queue's records now: visible (due, not in processing), in flight (processing),
        delayed (due later); all 0 for a missing queue. Kept as records change: no scan."""
        ...

    def memory(self, name: str) -> int:
        """Approximate bytes held for the queue."""
        ...

    def messages(self, name: str) -> list[StoredMessage]:
        """Every record of the queue in id order (status, tests, seeding another store)."""
        ...
