"""``PostgresStore``: the :class:`~pylmq.core.store.Store` whose queues live in PostgreSQL, shared
by any number of nodes (masterless).

What each node keeps (all of it caches, rebuilt from the database at any time):

- a mirror of the metadata (queues' names, ids and props, the default list, virtual queues,
  SQS deduplication ids), loaded at open; its own changes are applied at once after COMMIT,
  other nodes' arrive as ``lmq_meta`` notifications sent in the changing transaction, and
  each makes this node re-read just that row;
- per queue a :class:`~pylmq.pgstore.summary.Summary` (size, bytes, in flight, first ts) for
  the synchronous reads: exact after this node's operations (each returns the committed
  :class:`~pylmq.pgstore.messages.QueueState`; when this node's operations on a queue
  overlapped, the last to end re-reads its state, as their answers come in any order);
  ``lmq_due`` notifications from other nodes lower ``first_ts`` and wake the queue's waiters
  at once, and mark the queue for a re-read of its state ``refresh_delay`` later (coalesced);
  every ``resync_interval`` every queue's state is re-read (one statement), which bounds how
  stale size/memory/counts are after other nodes' pulls and acks (which do not notify).
  ``waittime`` may be too early (a waiter pulls, finds nothing, and the pull's state corrects
  it; a hold backs off while the first record looks due but another node is taking it) but
  never later than a record any node made deliverable while the LISTEN session was up;
  ``counts`` splits the records by in-flight and the first record's ts only (approximate, as
  SQS's: a delayed record behind a due one counts as visible);
- the deliveries this node handed out (for queue_server's integer ``msg_id``: a client acks on
  the node it pulled from, over its own connection).

Every mutation returns after its COMMIT (``synchronous_commit`` on), so :meth:`barrier` only
has the SQS deduplication ids to write (``keep_dedup`` queues them). A database that cannot be
reached makes operations fail with :class:`~pylmq.errors.StoreUnavailable` (HTTP 503); the pool
and the LISTEN session reconnect by themselves, and on reconnection of the LISTEN session the
node re-reads everything and wakes every queue (notifications sent meanwhile are lost).

A node does not start while the database cannot be reached (:meth:`open` raises
StoreUnavailable naming the cause): a supervisor restarts it, as for any dependency.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Container, Iterable, Sequence
from typing import Any, Final, Protocol, TypeVar

import asyncpg

from pylmq.core.clock import Clock, SystemClock
from pylmq.core.message import Item, MessageId, PushOptions, Retry, StoredMessage, msg_key
from pylmq.core.props import DefaultList, RawProps, effective_props
from pylmq.core.store import (
    DEDUP_WINDOW,
    DEFAULT_PG_POOL_SIZE,
    DEFAULT_PG_TIMEOUT,
    DedupIds,
    TransferListener,
)
from pylmq.core.table import AccumResult, QueueCounts
from pylmq.errors import BadRequest, Duplicate
from pylmq.pgstore import messages as m
from pylmq.pgstore.listener import Listener
from pylmq.pgstore.meta import check_defaults, check_text, decode_defaults, decode_props, encode_defaults, encode_props
from pylmq.pgstore.pool import connection_failure, create_pool, discard, unavailable
from pylmq.pgstore.schema import migrate
from pylmq.pgstore.summary import Summary

__all__ = ["MAX_DELIVERIES", "PostgresStore", "RemoteEvents"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Conn = Any  # an asyncpg connection taken from the pool

# deadlock_detected and serialization_failure: the transaction was rolled back, nothing of it stays.
_ABORTED: Final = frozenset({"40P01", "40001"})

MAX_ABORTS: Final = 5
"""Times one operation runs when the database keeps aborting it (deadlocks, serialization
conflicts) before it is answered 503."""

MAX_DELIVERIES: Final = 100_000
"""Deliveries per queue this node remembers for :meth:`PostgresStore.find_delivery`; past it,
those past their deadline are forgotten first."""


class RemoteEvents(Protocol):
    """What the node's queue manager is told of other nodes' changes
    (:class:`~pylmq.core.manager.QueueManager` has these)."""

    def on_remote_queue_created(self, name: str) -> None: ...

    async def on_remote_queue_deleted(self, name: str) -> None: ...

    def refresh_props(self, names: Iterable[str] | None = None) -> None: ...

    def refresh_virtual(self) -> None: ...


class PostgresStore:
    kind = "postgres"

    def __init__(
        self,
        dsn: str,
        *,
        clock: Clock | None = None,
        pool_size: int = DEFAULT_PG_POOL_SIZE,
        timeout: float = DEFAULT_PG_TIMEOUT,
        refresh_delay: float = 0.1,
        resync_interval: float = 5.0,
        ping_interval: float = 5.0,
    ) -> None:
        self.dsn = dsn
        self.clock: Clock = clock or SystemClock()
        self.pool_size = pool_size
        self.timeout = timeout
        self.refresh_delay = refresh_delay
        self.resync_interval = resync_interval
        self._pool: asyncpg.Pool[Any] | None = None
        self.listener = Listener(dsn, timeout, self._heard, self._reconnected, ping_interval=ping_interval)
        self._ids: dict[str, int] = {}
        self._names: dict[int, str] = {}
        self._props: dict[str, RawProps] = {}
        self._summaries: dict[int, Summary] = {}
        self._defaults: DefaultList = []
        self._virtual: dict[str, list[str]] = {}
        self._dedup: dict[str, DedupIds] = {}
        self._dedup_pending: list[tuple[str, str, float, str, str]] = []
        self._dedup_lock = asyncio.Lock()
        # Ids a push wrote with its record (PushOptions.dedup), until the SQS layer's keep_dedup
        # of them (right after the push): nothing left to write then.
        self._dedup_written: set[tuple[str, str]] = set()
        self._deliveries: dict[str, dict[int, tuple[bytes, float] | None]] = {}
        self._snapshots: dict[str, list[StoredMessage]] = {}
        self._own_pids: set[int] = set()
        self._transfers: TransferListener | None = None
        self._events: RemoteEvents | None = None
        # This node's own metadata changes, numbered: a read of the database that began before
        # one must not undo it in the mirror (keys "q:<name>", "d", "v:<name>").
        self._changes = 0
        # Operations in flight per queue id, and queues where some overlapped (see _tracked).
        self._inflight: dict[int, int] = {}
        self._overlap: set[int] = set()
        self._touched: dict[str, int] = {}
        # Work the notifications leave for the follower task, coalesced (bounded by the queues).
        self._meta_pending: set[str] = set()
        self._unknown_due: dict[int, float] = {}
        self._dirty: set[int] = set()
        self._work = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False

    # -- life cycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        try:
            self._pool = await create_pool(self.dsn, self.pool_size, self.timeout, self._init_connection)
            async with self._pool.acquire() as conn:
                await migrate(conn)
            # LISTEN before loading: whatever commits after the load's snapshot is heard.
            await self.listener.start()
            await self._load_all()
        except BaseException as e:
            await self._shut()
            cause = connection_failure(e)
            if cause is None:
                raise
            raise unavailable(cause, f"the node cannot start without its database ({self.dsn_safe})") from e
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._follow(), name="pgstore-follow"),
            loop.create_task(self._resync_loop(), name="pgstore-resync"),
        ]

    @property
    def dsn_safe(self) -> str:
        """The DSN without its password, for messages."""
        head, at, tail = self.dsn.rpartition("@")
        if not at:
            return self.dsn
        scheme, sep, userinfo = head.partition("://")
        return f"{scheme}{sep}{userinfo.split(':', 1)[0]}@{tail}"

    async def _init_connection(self, conn: asyncpg.Connection[Any]) -> None:
        pid = conn.get_server_pid()
        self._own_pids.add(pid)
        conn.add_termination_listener(lambda _c: self._own_pids.discard(pid))

    async def close(self) -> None:
        self._closing = True
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(Exception):
            await self.barrier()  # dedup ids not written yet: try once more
        await self._shut()

    async def _shut(self) -> None:
        await self.listener.close()
        pool, self._pool = self._pool, None
        if pool is not None:
            try:
                await asyncio.wait_for(pool.close(), self.timeout)
            except Exception:
                pool.terminate()

    async def barrier(self) -> None:
        """Every mutation returned after its COMMIT: only the deduplication ids kept since the
        last barrier remain to write (one transaction for all of them)."""
        async with self._dedup_lock:
            batch, self._dedup_pending = self._dedup_pending, []
            if not batch:
                return
            try:
                await self._run("keep the SQS deduplication ids", lambda c: self._write_dedup(c, batch), retry=True)
            except BaseException:
                self._dedup_pending[:0] = batch  # the next barrier writes them
                raise

    def follow(self, events: RemoteEvents | None) -> None:
        """Tell ``events`` (the node's queue manager) of other nodes' queue, props and virtual
        queue changes, and wake its queues' waiters on their pushes."""
        self._events = events

    # -- running statements ------------------------------------------------------------------

    def _db(self) -> asyncpg.Pool[Any]:
        if self._pool is None:
            raise unavailable("the store is not open", "nothing was done")
        return self._pool

    async def _run(self, what: str, fn: Callable[[Conn], Awaitable[T]], *, retry: bool = False) -> T:
        result, _ = await self._run_unknown(what, fn, retry=retry)
        return result

    async def _run_unknown(
        self, what: str, fn: Callable[[Conn], Awaitable[T]], *, retry: bool = False
    ) -> tuple[T, bool]:
        """``fn`` on a pooled connection; (its result, whether an earlier attempt's outcome is
        unknown). A connection failure before the statement went out is "not done"; after, the
        outcome is unknown: ``retry`` operations (idempotent ones) are tried once more, the
        others fail so (a push is never made twice by the node). A transaction the database
        aborted to break a deadlock or a serialization conflict was rolled back whole, so any
        operation runs again (up to :data:`MAX_ABORTS` times, then 503)."""
        pool = self._db()
        unknown = False
        lost = aborted = 0
        while True:
            if aborted:
                # Apart, and not in step with the other party of the conflict (which may retry too).
                await asyncio.sleep(random.uniform(0.001, 0.01) * aborted)
            try:
                conn = await pool.acquire(timeout=self.timeout)
            except Exception as e:
                cause = connection_failure(e)
                if cause is None:
                    raise
                done = "its outcome is unknown" if unknown else "it was not done"
                raise unavailable(cause, f"{what}: {done}") from e
            try:
                return await fn(conn), unknown
            except Exception as e:
                if getattr(e, "sqlstate", None) in _ABORTED and isinstance(e, asyncpg.PostgresError):
                    aborted += 1
                    if aborted >= MAX_ABORTS:
                        done = "its outcome is unknown" if unknown else "it was not done"
                        raise unavailable(f"the database aborted it {aborted} times ({e})", f"{what}: {done}") from e
                    log.info("%s: aborted by the database (%s); running it again", what, e.sqlstate)
                    continue
                cause = connection_failure(e)
                if cause is None:
                    raise
                discard(conn)
                if not retry:
                    raise unavailable(
                        cause,
                        f"{what}: its outcome is unknown (it may have been committed), so it was not retried",
                    ) from e
                if lost:
                    raise unavailable(cause, f"{what}: failed twice") from e
                lost += 1
                unknown = True
                log.warning("%s: postgresql unreachable: %s; trying once more", what, cause)
            finally:
                with contextlib.suppress(Exception):
                    await pool.release(conn)

    # -- loading and following other nodes -------------------------------------------------------

    async def _load_all(self) -> None:
        """Read every table this node mirrors and every queue's state (at open, on LISTEN
        reconnection, and every ``resync_interval``); tell the manager what changed."""

        async def read(c: Conn) -> tuple[list[Any], str | None, list[Any], list[Any]]:
            queues = await c.fetch("SELECT id, name, props::text FROM lmq.queue")
            defaults = await c.fetchval("SELECT value::text FROM lmq.setting WHERE key = 'defaults'")
            virtual = await c.fetch("SELECT name, members FROM lmq.virtual")
            dedup = await c.fetch(
                "SELECT queue_id, key, sent, message_id, sequence FROM lmq.dedup WHERE sent > $1 ORDER BY sent",
                self.clock.now() - DEDUP_WINDOW,
            )
            return queues, defaults, virtual, dedup

        start = self._changes
        queues, defaults_text, virtual_rows, dedup_rows = await self._run("load the queues", read, retry=True)
        seen: set[str] = set()
        for row in queues:
            seen.add(row["name"])
            if not self._changed_since(start, "q:" + row["name"]):
                self._adopt(row["id"], row["name"], decode_props(row["props"]))
        for name in [n for n in self._ids if n not in seen and not self._changed_since(start, "q:" + n)]:
            self._forget(name)
        defaults = decode_defaults(defaults_text)
        if defaults != self._defaults and not self._changed_since(start, "d"):
            self._defaults = defaults
            if self._events is not None:
                self._events.refresh_props()
        virtual = {r["name"]: list(r["members"]) for r in virtual_rows}
        for name in {*virtual, *self._virtual}:
            if self._changed_since(start, "v:" + name):
                virtual.pop(name, None)
                if name in self._virtual:
                    virtual[name] = self._virtual[name]
        if len(self._touched) > 10_000:
            self._touched = {k: n for k, n in self._touched.items() if n > start}
        if virtual != self._virtual:
            self._virtual = virtual
            if self._events is not None:
                self._events.refresh_virtual()
        for r in dedup_rows:
            owner = self._names.get(r["queue_id"])
            if owner is not None:
                self.dedup_ids(owner).setdefault(r["key"], (r["sent"], r["message_id"], r["sequence"]))
        await self._read_states(list(self._summaries))

    def _touch(self, key: str) -> None:
        self._changes += 1
        self._touched[key] = self._changes

    def _changed_since(self, start: int, key: str) -> bool:
        """Whether this node changed ``key`` after a read that began at ``start``."""
        return self._touched.get(key, 0) > start

    def _adopt(self, qid: int, name: str, props: RawProps) -> None:
        """Mirror a queue row read from the database; tell the manager if it is news."""
        known = self._ids.get(name)
        if known is not None and known != qid:
            self._forget(name)  # deleted and created again elsewhere
            known = None
        changed = known is not None and self._props.get(name) != props
        self._ids[name], self._names[qid], self._props[name] = qid, name, props
        self._summaries.setdefault(qid, Summary(qid))
        if self._events is not None:
            if known is None:
                self._events.on_remote_queue_created(name)
            elif changed:
                self._events.refresh_props([name])

    def _forget(self, name: str) -> None:
        qid = self._ids.pop(name, None)
        if qid is None:
            return
        self._names.pop(qid, None)
        self._summaries.pop(qid, None)
        self._props.pop(name, None)
        self._dedup.pop(name, None)
        self._deliveries.pop(name, None)
        self._snapshots.pop(name, None)
        if self._events is not None and not self._closing:
            self._spawn(self._events.on_remote_queue_deleted(name), f"pgstore-deleted-{name}")

    def _spawn(self, work: Awaitable[None], name: str) -> None:
        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("%s failed", name)
            finally:
                with contextlib.suppress(ValueError):  # close() took the list
                    self._tasks.remove(task)

        task = asyncio.get_running_loop().create_task(run(), name=name)
        self._tasks.append(task)

    async def _read_states(self, qids: Sequence[int], *, settle: bool = False) -> None:
        """Re-read these queues' states in one statement (per queue: its counter shards and
        one index probe, lmq.queue_state)."""
        if not qids:
            return
        async with self._tracked(qids, settle=settle) as sinces:
            rows = await self._run(
                "read the queues' states",
                lambda c: c.fetch(
                    "SELECT u.q, s.* FROM unnest($1::bigint[]) u (q), LATERAL lmq.queue_state(u.q) s", list(qids)
                ),
                retry=True,
            )
            for r in rows:
                state = m.QueueState(r["st_size"], r["st_nbytes"], r["st_in_flight"], r["st_first"])
                self._applied(r["q"], state, sinces[r["q"]])

    @contextlib.asynccontextmanager
    async def _tracked(self, qids: Sequence[int], *, settle: bool = True) -> AsyncIterator[dict[int, int]]:
        """Around an operation on these queues whose answer carries their states: yields each
        one's :attr:`Summary.heard` before the call. Answers of concurrent operations on one
        queue come back in any order, so the state applied last may not be the last committed:
        when operations overlapped, the last one to end re-reads the queue's state (``settle``;
        else the follower task does, ``refresh_delay`` later)."""
        qids = list(dict.fromkeys(qids))
        sinces: dict[int, int] = {}
        for q in qids:
            n = self._inflight.get(q, 0)
            if n:
                self._overlap.add(q)
            self._inflight[q] = n + 1
            sinces[q] = self._since(q)
        quiet: list[int] = []
        try:
            yield sinces
        finally:
            for q in qids:
                n = self._inflight.pop(q) - 1
                if n:
                    self._inflight[q] = n
                elif q in self._overlap:
                    self._overlap.discard(q)
                    quiet.append(q)
            if quiet and not settle:
                self._dirty.update(quiet)
                self._work.set()
        if quiet and settle:
            try:
                await self._read_states(quiet)
            except Exception as e:
                # The operation itself is committed: its answer stands, whatever this re-read
                # met; the follower task reads them later.
                log.warning("re-reading queues' states failed: %s", connection_failure(e) or e)
                self._dirty.update(quiet)
                self._work.set()
            else:
                self._wake_due(quiet)

    def _wake_due(self, qids: Iterable[int]) -> None:
        """After a re-read: a queue whose first record is due may have waiters that an older
        state sent to sleep."""
        now = self.clock.now()
        for q in qids:
            s, name = self._summaries.get(q), self._names.get(q)
            if s is not None and name is not None and s.waittime(now) == 0:
                self._wake(name)

    def _heard(self, pid: int, channel: str, payload: str) -> None:
        """A notification (from the LISTEN session's callback: no I/O here)."""
        if pid in self._own_pids:
            return  # this node's own change: the mirror has it already
        if channel == "lmq_due":
            qid_text, _, ts_text = payload.partition(":")
            try:
                qid, ts = int(qid_text), float(ts_text)
            except ValueError:
                log.warning("ignoring lmq_due notification %r", payload[:100])
                return
            s = self._summaries.get(qid)
            if s is None:
                prior = self._unknown_due.get(qid)
                self._unknown_due[qid] = ts if prior is None else min(prior, ts)
            else:
                s.due(ts)
                self._dirty.add(qid)
                self._wake(self._names[qid])
        elif channel == "lmq_meta":
            self._meta_pending.add(payload)
        self._work.set()

    def _wake(self, name: str) -> None:
        """Records became deliverable in ``name`` elsewhere: its waiters here look now."""
        if self._events is not None:
            self._events.on_remote_queue_created(name)  # attaches it if new, and notifies
        elif self._transfers is not None:
            self._transfers(name)

    async def _reconnected(self) -> None:
        """The LISTEN session is back: anything may have changed meanwhile."""
        self._meta_pending.clear()
        self._unknown_due.clear()
        await self._load_all()
        for name in list(self._ids):
            self._wake(name)

    async def _follow(self) -> None:
        """Apply what notifications left to do, a little later, coalesced."""
        while True:
            await self._work.wait()
            await asyncio.sleep(self.refresh_delay)
            self._work.clear()
            meta, self._meta_pending = self._meta_pending, set()
            unknown, self._unknown_due = self._unknown_due, {}
            dirty, self._dirty = self._dirty, set()
            try:
                for payload in sorted(meta):
                    await self._reload(payload)
                for qid, ts in unknown.items():
                    await self._reload_id(qid, ts)
                fresh = [q for q in dirty if q in self._summaries]
                await self._read_states(fresh)
                self._wake_due(fresh)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                # The LISTEN session's reconnection (or the periodic resync) reads everything.
                log.warning("following other nodes' changes failed: %s", connection_failure(e) or e)

    async def _reload(self, payload: str) -> None:
        kind, _, arg = payload.partition(":")
        start = self._changes
        if kind == "q":
            row = await self._run(
                "read a queue", lambda c: c.fetchrow("SELECT id, props::text FROM lmq.queue WHERE name = $1", arg)
            )
            if self._changed_since(start, payload):
                return  # this node changed it since: its mirror is newer than what was read
            if row is None:
                self._forget(arg)
            else:
                self._adopt(row["id"], arg, decode_props(row["props"]))
                await self._read_states([row["id"]])
        elif kind == "d":
            text = await self._run(
                "read the default props",
                lambda c: c.fetchval("SELECT value::text FROM lmq.setting WHERE key = 'defaults'"),
            )
            if self._changed_since(start, "d"):
                return
            self._defaults = decode_defaults(text)
            if self._events is not None:
                self._events.refresh_props()
        elif kind == "v":
            members = await self._run(
                "read a virtual queue", lambda c: c.fetchval("SELECT members FROM lmq.virtual WHERE name = $1", arg)
            )
            if self._changed_since(start, payload):
                return
            if members is None:
                self._virtual.pop(arg, None)
            else:
                self._virtual[arg] = list(members)
            if self._events is not None:
                self._events.refresh_virtual()
        elif kind == "x":
            name, key, sent, message_id, sequence = json.loads(arg)
            if name in self._ids:
                self.dedup_ids(name).setdefault(key, (sent, message_id, sequence))

    async def _reload_id(self, qid: int, ts: float) -> None:
        """A queue this node had not heard of got a record: mirror it, then wake it."""
        start = self._changes
        row = await self._run(
            "read a queue", lambda c: c.fetchrow("SELECT name, props::text FROM lmq.queue WHERE id = $1", qid)
        )
        if row is None or self._changed_since(start, "q:" + row["name"]):
            return
        self._adopt(qid, row["name"], decode_props(row["props"]))
        self._summaries[qid].due(ts)
        await self._read_states([qid])
        self._wake(row["name"])

    async def _resync_loop(self) -> None:
        """The slow safety net: changes that notify nobody (other nodes' pulls and acks) show in
        sizes within ``resync_interval``; old deduplication ids leave the table."""
        pruned = self.clock.now()
        while True:
            await asyncio.sleep(self.resync_interval)
            try:
                await self._load_all()
                now = self.clock.now()
                if now - pruned >= DEDUP_WINDOW / 10:  # a scan of lmq.dedup: not every time
                    horizon = now - DEDUP_WINDOW
                    await self._run(
                        "forget old deduplication ids",
                        functools.partial(_execute, "DELETE FROM lmq.dedup WHERE sent < $1", horizon),
                    )
                    pruned = now
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("periodic re-read of the queues failed: %s", connection_failure(e) or e)

    # -- queues and properties ------------------------------------------------------------------

    def queue_names(self) -> list[str]:
        return list(self._ids)

    def queue_props(self, name: str) -> RawProps | None:
        props = self._props.get(name)
        return None if props is None else dict(props)

    def default_props(self) -> DefaultList:
        return list(self._defaults)

    async def _queue_row(
        self, conn: Conn, name: str, props: RawProps | None, changes: RawProps | None = None
    ) -> tuple[int, bool, RawProps]:
        """Create the queue if missing (props None keeps existing ones), notifying other nodes
        in the same transaction; (id, created, its props). With ``changes``, an existing queue
        gets only those keys set over its stored props, merged under the row's lock."""
        async with conn.transaction():
            # Queue and virtual names are disjoint: a creation and a binding of one name take
            # turns, each seeing what the other committed.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended('lmq.name:' || $1, 0))", name)
            if await conn.fetchval("SELECT EXISTS (SELECT 1 FROM lmq.virtual WHERE name = $1)", name):
                raise BadRequest(f"{name!r} is a virtual queue: it cannot be a queue")
            encoded = None if props is None else encode_props(props)
            qid = await conn.fetchval(
                "INSERT INTO lmq.queue (name, props) VALUES ($1, coalesce($2::jsonb, '[]'))"
                " ON CONFLICT (name) DO NOTHING RETURNING id",
                name,
                encoded,
            )
            if qid is not None:
                await conn.execute("SELECT pg_notify('lmq_meta', $1)", "q:" + name)
                return qid, True, dict(props or {})
            # FOR UPDATE: a concurrent delete waits for us or we for it; never a half-seen row.
            row = await conn.fetchrow("SELECT id, props::text FROM lmq.queue WHERE name = $1 FOR UPDATE", name)
            if row is None:
                raise _Retry
            old = decode_props(row["props"])
            if changes is not None:
                props = {**old, **changes}
                encoded = encode_props(props)
            if props is None or props == old:
                return row["id"], False, old
            await conn.execute("UPDATE lmq.queue SET props = $2::jsonb WHERE id = $1", row["id"], encoded)
            await conn.execute("SELECT pg_notify('lmq_meta', $1)", "q:" + name)
            return row["id"], False, dict(props)

    async def _create(self, name: str, props: RawProps | None, changes: RawProps | None = None) -> tuple[int, bool]:
        for _ in range(3):
            try:
                qid, created, stored = await self._run(
                    f"create queue {name}", lambda c: self._queue_row(c, name, props, changes), retry=True
                )
            except _Retry:
                continue  # deleted by another node between our two statements
            known = self._ids.get(name)
            if known is not None and known != qid:
                self._forget(name)
            self._touch("q:" + name)
            self._ids[name], self._names[qid], self._props[name] = qid, name, stored
            self._summaries.setdefault(qid, Summary(qid))
            return qid, created
        raise _kept_deleted(f"creating {name}")

    async def _qid(self, name: str) -> int:
        """The queue's id, creating the queue if missing (create-on-use)."""
        qid = self._ids.get(name)
        return qid if qid is not None else (await self._create(name, None))[0]

    async def create(self, name: str, props: RawProps | None = None) -> bool:
        return (await self._create(name, props))[1]

    async def delete(self, name: str) -> bool:
        async def drop(c: Conn) -> int | None:
            async with c.transaction():
                # The queue's advisory lock before its row (lmq.queue_gone takes it too, too late
                # to order it before a grouped push's update of the row): pushes in flight
                # commit first, later ones find the row gone (see lmq.queue_gone). Only the row
                # whose lock is held is deleted: a row of the name created after the lock was
                # taken (a pull re-creating its dead-letter queue), deleted by name, would be
                # locked in the other order, and two deletes of the name would deadlock.
                for _ in range(3):
                    qid: int | None = await c.fetchval("SELECT id FROM lmq.queue WHERE name = $1", name)
                    if qid is None:
                        return None
                    await c.execute(
                        "SELECT pg_advisory_xact_lock(hashtextextended('lmq.queue:' || $1::bigint, 0))", qid
                    )
                    if await c.fetchval("DELETE FROM lmq.queue WHERE id = $1 RETURNING id", qid) is not None:
                        await c.execute("SELECT pg_notify('lmq_meta', $1)", "q:" + name)
                        return qid
                    # Another node deleted it while this one waited for its lock: the name may
                    # already hold a newer queue, which this delete is for too.
                return None

        qid, unknown = await self._run_unknown(f"delete queue {name}", drop, retry=True)
        self._touch("q:" + name)
        self._forget_local(name)  # our own delete: the manager does its part
        return qid is not None or unknown

    async def set_queue_props(self, name: str, props: RawProps) -> None:
        # The manager merged a PATCH into this node's mirror, which may not have another node's
        # latest patch yet: when ``props`` only adds to the mirror or changes its values (a
        # merge), only those keys are written, over the props stored (see _queue_row), so that
        # the other node's keys stay. Dropping a key (a reset) writes the whole object.
        mirror = self._props.get(name)
        changes = None
        if mirror is not None and props and all(k in props for k in mirror):
            changes = {k: v for k, v in props.items() if k not in mirror or mirror[k] != v}
        await self._create(name, props, changes)

    async def lookup(self, name: str) -> bool:
        """Whether queue ``name`` exists in the database though this node has not heard of it
        yet (created on another node, its notification not followed yet): then it is mirrored
        at once (the manager is told, as for a notification)."""
        if name in self._ids:
            return True
        start = self._changes
        row = await self._run(
            f"look up queue {name}",
            lambda c: c.fetchrow("SELECT id, props::text FROM lmq.queue WHERE name = $1", name),
            retry=True,
        )
        if row is None:
            return False
        if not self._changed_since(start, "q:" + name):
            self._adopt(row["id"], name, decode_props(row["props"]))
            await self._read_states([row["id"]])
        return name in self._ids

    async def set_default_props(self, defaults: DefaultList) -> None:
        check_defaults(defaults)  # before writing: jsonb cannot hold every text

        async def write(c: Conn) -> None:
            async with c.transaction():
                await c.execute(
                    "INSERT INTO lmq.setting (key, value) VALUES ('defaults', $1::jsonb)"
                    " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                    encode_defaults(defaults),
                )
                await c.execute("SELECT pg_notify('lmq_meta', 'd')")

        await self._run("set the default props", write, retry=True)
        self._touch("d")
        self._defaults = list(defaults)

    def check_props(self, props: RawProps) -> None:
        check_text(props)

    def check_push(self, options: PushOptions, retry: Retry) -> None:
        return None  # pylmq.pgstore.messages serves every option check_options lets through

    def cluster_nodes(self) -> tuple[list[str], list[str]] | None:
        return None  # nodes sharing a database know nothing of each other

    def dedup_ids(self, name: str) -> DedupIds:
        ids = self._dedup.get(name)
        if ids is None:
            ids = self._dedup[name] = {}
        return ids

    def keep_dedup(self, name: str, key: str, sent: float, message_id: str, sequence: str) -> None:
        if (name, key) in self._dedup_written:
            self._dedup_written.discard((name, key))  # its push wrote it already
            return
        self._dedup_pending.append((name, key, sent, message_id, sequence))

    async def _write_dedup(self, c: Conn, batch: list[tuple[str, str, float, str, str]]) -> None:
        async with c.transaction():
            for name, key, sent, message_id, sequence in batch:
                qid = self._ids.get(name)
                if qid is None:
                    continue  # the queue was deleted: its ids went with it
                await c.execute(
                    "INSERT INTO lmq.dedup (queue_id, key, sent, message_id, sequence)"
                    " SELECT $1, $2, $3, $4, $5 WHERE EXISTS (SELECT 1 FROM lmq.queue WHERE id = $1)"
                    " ON CONFLICT (queue_id, key) DO UPDATE SET sent = EXCLUDED.sent,"
                    " message_id = EXCLUDED.message_id, sequence = EXCLUDED.sequence",
                    qid,
                    key,
                    sent,
                    message_id,
                    sequence,
                )
                payload = "x:" + json.dumps([name, key, sent, message_id, sequence])
                await c.execute("SELECT pg_notify('lmq_meta', $1)", payload)

    def virtual_queues(self) -> dict[str, list[str]]:
        return {name: list(queues) for name, queues in self._virtual.items()}

    async def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        members = list(queues)

        async def write(c: Conn) -> None:
            async with c.transaction():
                if members:
                    # Under the name's lock queue creation takes too (see _queue_row): a queue
                    # another node just created, not mirrored here yet, is seen.
                    await c.execute("SELECT pg_advisory_xact_lock(hashtextextended('lmq.name:' || $1, 0))", name)
                    if await c.fetchval("SELECT EXISTS (SELECT 1 FROM lmq.queue WHERE name = $1)", name):
                        raise BadRequest(f"{name!r} is a queue: a virtual queue needs a name of its own")
                    await c.execute(
                        "INSERT INTO lmq.virtual (name, members) VALUES ($1, $2)"
                        " ON CONFLICT (name) DO UPDATE SET members = EXCLUDED.members",
                        name,
                        members,
                    )
                else:
                    await c.execute("DELETE FROM lmq.virtual WHERE name = $1", name)
                await c.execute("SELECT pg_notify('lmq_meta', $1)", "v:" + name)

        await self._run(f"set virtual queue {name}", write, retry=True)
        self._touch("v:" + name)
        if members:
            self._virtual[name] = members
        else:
            self._virtual.pop(name, None)

    # -- messages ---------------------------------------------------------------------------------

    def _applied(self, qid: int, state: m.QueueState, since: int) -> Summary | None:
        s = self._summaries.get(qid)
        if s is not None:
            s.apply(state, since, self.clock.now())
        return s

    def _since(self, qid: int) -> int:
        s = self._summaries.get(qid)
        return 0 if s is None else s.heard

    async def _write_new(self, name: str, what: str, fn: Callable[[Conn, int], Awaitable[tuple[T, m.QueueState]]]) -> T:
        """A write that adds a record (never retried: its outcome may be unknown); the queue is
        created if missing, or created again if another node deleted it meanwhile."""
        for attempt in range(_GONE_TRIES):
            qid = await self._qid(name)
            try:
                async with self._tracked([qid]) as sinces:
                    result, state = await self._run(what, _bound(fn, qid))
                    self._applied(qid, state, sinces[qid])
            except asyncpg.ForeignKeyViolationError as e:
                # The queue was deleted (by another node, or while this push was on its way):
                # nothing was written. A push to a missing queue creates it, as in LMQ.
                if attempt == _GONE_TRIES - 1:
                    raise _kept_deleted(what) from e
                self._forget_local(name)
                if self._events is not None:
                    self._events.refresh_props([name])  # the new queue has no props of its own
                continue
            return result
        raise AssertionError("unreachable")

    async def _forget_gone(self, qids: Iterable[int]) -> None:
        """After a write found one of these queues deleted: forget those that are gone."""
        ids = list(qids)
        rows = await self._run(
            "read which queues are left",
            lambda c: c.fetch("SELECT id FROM lmq.queue WHERE id = ANY($1::bigint[])", ids),
            retry=True,
        )
        left = {r["id"] for r in rows}
        for qid in ids:
            name = self._names.get(qid)
            if qid not in left and name is not None:
                self._forget_local(name)

    def _forget_local(self, name: str) -> None:
        events, self._events = self._events, None
        try:
            self._forget(name)
        finally:
            self._events = events

    async def enqueue(self, name: str, item: Item, retry: Retry, accum: float) -> AccumResult:
        now = self.clock.now()
        return await self._write_new(name, f"push to {name}", lambda c, qid: m.enqueue(c, qid, item, retry, accum, now))

    async def push(self, name: str, item: Item, retry: Retry, options: PushOptions, *, track: bool = False) -> bytes:
        now = self.clock.now()
        claim = options.dedup
        if claim is None:
            return await self._write_new(
                name, f"push to {name}", lambda c, qid: m.push(c, qid, item, retry, options, track, now)
            )
        # The deduplication id and the record in one transaction: of two nodes sending one id
        # at once, exactly one pushes (this node's mirror of the ids cannot tell).
        horizon = now - DEDUP_WINDOW
        got = await self._write_new(
            name,
            f"push to {name}",
            lambda c, qid: m.push_dedup(c, qid, name, claim, horizon, item, retry, options, track, now),
        )
        if isinstance(got, tuple):
            self.dedup_ids(name)[claim.key] = got
            raise Duplicate(got[1], got[2])
        self._dedup_written.add((name, claim.key))
        return got

    async def dequeue_in_group(
        self, name: str, group: str, timeout: float, after: bytes | None = None
    ) -> tuple[StoredMessage, float] | None:
        # The receive names the group's record it holds (``after``): the database checks, under
        # the group's lock, that it still holds it, so two nodes never both take from one group.
        qid = self._ids.get(name)
        if qid is None or after is None:
            return None
        now = self.clock.now()
        async with self._tracked([qid]) as sinces:
            # Retried once: a first attempt that committed left a record in processing nobody
            # was handed, which waits behind the group's head (and comes back after it).
            got, state = await self._run(
                f"pull from {name}", lambda c: m.dequeue_in_group(c, qid, group, after, timeout, now), retry=True
            )
            self._applied(qid, state, sinces[qid])
        if got is not None:
            self._remember(name, got[0])
        return got

    async def dequeue(
        self, name: str, timeout: float, dead_letter: str | None = None, *, hold: bool = False
    ) -> tuple[StoredMessage, float] | None:
        qid = self._ids.get(name)
        if qid is None:
            return None
        now = self.clock.now()

        async def pull() -> tuple[tuple[StoredMessage, float] | None, m.QueueState, int]:
            dead: tuple[int | str, Retry] | None = None
            if dead_letter is not None and dead_letter != name:
                # ``hold`` (SQS's rule): the database looks the queue up by name and never makes
                # it again; else it is created here if missing (LMQ's rule).
                target: int | str = dead_letter if hold else await self._qid(dead_letter)
                dead = (target, self._retry_of(dead_letter))
            # Retried once: a first attempt that committed left a processing record nobody was
            # handed, which comes back after its timeout (LMQ's own rule for a lost delivery).
            return await self._run(f"pull from {name}", lambda c: m.dequeue(c, qid, timeout, now, dead), retry=True)

        async with self._tracked([qid]) as sinces:
            for attempt in range(_GONE_TRIES):
                try:
                    got, state, moved = await pull()
                    break
                except asyncpg.ForeignKeyViolationError as e:
                    # The dead-letter queue was deleted meanwhile (nothing was done): once more,
                    # creating it again (this node may have heard of the delete already).
                    if attempt == _GONE_TRIES - 1:
                        raise _kept_deleted(f"pull from {name}") from e
                    gone = None if dead_letter is None else self._ids.get(dead_letter)
                    if gone is not None:
                        await self._forget_gone([gone])
            s = self._applied(qid, state, sinces[qid])
            if got is None and s is not None:
                s.missed(sinces[qid], self.clock.now())
        if moved and dead_letter is not None:
            dlq = self._ids.get(dead_letter)
            if dlq is not None:
                try:
                    # Its size is exact when the pull is answered, as after a local move.
                    await self._read_states([dlq])
                except Exception:
                    self._dirty.add(dlq)  # the delivery is not lost for it: read it later
                    self._work.set()
            if self._transfers is not None:
                self._transfers(dead_letter)
        if got is not None:
            self._remember(name, got[0])
        return got

    def _retry_of(self, name: str) -> Retry:
        return effective_props(name, self._props.get(name), self._defaults).retry

    def listen_transfers(self, listener: TransferListener | None) -> None:
        self._transfers = listener

    async def peek(self, name: str, after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
        qid = self._ids.get(name)
        if qid is None:
            return []
        return await self._run(f"peek at {name}", lambda c: m.peek(c, qid, after, limit), retry=True)

    async def requeue(self, dlq: str, count: int, to: str | None, keep: Container[str] = ()) -> int:
        dlq_id = self._ids.get(dlq)
        if dlq_id is None:
            return 0
        landed = await self._requeue_once(dlq, dlq_id, count, to, keep)
        if landed is None:  # a target queue was deleted meanwhile: once more, creating it again
            landed = await self._requeue_once(dlq, dlq_id, count, to, keep, last=True)
            assert landed is not None
        for qid, n in landed.items():
            name = self._names.get(qid)
            if n and name is not None and self._transfers is not None:
                self._transfers(name)
        return sum(landed.values())

    async def _requeue_once(
        self, dlq: str, dlq_id: int, count: int, to: str | None, keep: Container[str], *, last: bool = False
    ) -> dict[int, int] | None:
        """How many landed in each target queue; None when one was deleted by another node
        meanwhile (nothing was moved; those deleted are forgotten), unless ``last``."""
        target: tuple[int, Retry] | None = None
        targets: dict[str, tuple[int, Retry]] = {}
        kept: list[str] = []
        if to is not None:
            target = (await self._qid(to), self._retry_of(to))
        else:
            origins = await self._run(
                f"read the origins of {dlq}'s dead letters",
                lambda c: c.fetch(
                    "SELECT DISTINCT dead_origin FROM lmq.message WHERE queue_id = $1 AND dead_origin IS NOT NULL",
                    dlq_id,
                ),
                retry=True,
            )
            for row in origins:
                origin: str = row["dead_origin"]
                if origin in keep:
                    kept.append(origin)
                else:
                    targets[origin] = (await self._qid(origin), self._retry_of(origin))
        now = self.clock.now()
        touched = [*(t[0] for t in targets.values()), *([] if target is None else [target[0]])]
        try:
            async with self._tracked([dlq_id, *touched]) as sinces:
                landed, states = await self._run(
                    f"requeue from {dlq}", lambda c: m.requeue(c, dlq_id, count, target, targets, kept, now)
                )
                for qid, state in states.items():
                    self._applied(qid, state, sinces.get(qid, 0))
        except asyncpg.ForeignKeyViolationError:
            if last:
                raise
            await self._forget_gone(touched)
            return None
        return landed

    # -- deliveries ---------------------------------------------------------------------------------

    def _remember(self, name: str, msg: StoredMessage) -> None:
        known = self._deliveries.setdefault(name, {})
        if len(known) >= MAX_DELIVERIES:
            now = self.clock.now()
            for key in [k for k, v in known.items() if v is None or v[1] < now]:
                del known[key]
            while len(known) >= MAX_DELIVERIES:
                del known[next(iter(known))]
        key = msg_key(msg.uuid)
        prior = known.get(key)
        # Two live deliveries with one key: neither is answered (never a wrong one).
        clash = key in known and (prior is None or (prior[0] != msg.uuid and prior[1] >= self.clock.now()))
        known[key] = None if clash else (msg.uuid, msg.id[0])

    def _settled(self, name: str, uuid: bytes) -> None:
        known = self._deliveries.get(name)
        if known is not None:
            key = msg_key(uuid)
            v = known.get(key)
            if v is not None and v[0] == uuid:
                del known[key]

    def find_delivery(self, name: str, key: int) -> bytes | None:
        """Deliveries this node handed out (queue_server's clients ack where they pulled)."""
        v = self._deliveries.get(name, {}).get(key)
        return None if v is None or v[1] < self.clock.now() else v[0]

    async def _settle(
        self, name: str, what: str, fn: Callable[[Conn, int], Awaitable[tuple[bool, m.QueueState]]]
    ) -> bool:
        qid = self._ids.get(name)
        if qid is None:
            return False
        async with self._tracked([qid]) as sinces:
            (ok, state), unknown = await self._run_unknown(f"{what} in {name}", lambda c: fn(c, qid), retry=True)
            self._applied(qid, state, sinces[qid])
        # Not found on the second try after a lost answer: the first one did it.
        return ok or unknown

    async def done(self, name: str, uuid: bytes) -> bool:
        now = self.clock.now()
        ok = await self._settle(name, "ack", lambda c, qid: m.done(c, qid, uuid, now))
        self._settled(name, uuid)
        return ok

    async def retain(self, name: str, uuid: bytes, timeout: float) -> bool:
        now = self.clock.now()
        ok = await self._settle(name, "extend", lambda c, qid: m.retain(c, qid, uuid, timeout, now))
        known = self._deliveries.get(name, {})
        v = known.get(msg_key(uuid))
        if ok and v is not None and v[0] == uuid:
            known[msg_key(uuid)] = (uuid, now + timeout)
        return ok

    async def release(self, name: str, uuid: bytes) -> bool:
        now = self.clock.now()
        ok = await self._settle(name, "release", lambda c, qid: m.release(c, qid, uuid, now))
        self._settled(name, uuid)
        return ok

    async def put_back(self, name: str, uuid: bytes) -> bool:
        now = self.clock.now()
        ok = await self._settle(name, "put back", lambda c, qid: m.put_back(c, qid, uuid, now))
        self._settled(name, uuid)
        return ok

    async def claim(
        self, name: str, uuids: Sequence[bytes], timeout: float, max_bytes: int | None = None
    ) -> list[StoredMessage | None]:
        qid = self._ids.get(name)
        if qid is None:
            return [None] * len(uuids)
        now = self.clock.now()
        async with self._tracked([qid]) as sinces:
            got, state = await self._run(
                f"claim in {name}", lambda c: m.claim(c, qid, uuids, timeout, now, max_bytes), retry=True
            )
            self._applied(qid, state, sinces[qid])
        for msg in got:
            if msg is not None:
                self._remember(name, msg)
        return got

    # -- reads --------------------------------------------------------------------------------------

    def _summary(self, name: str) -> Summary | None:
        qid = self._ids.get(name)
        return None if qid is None else self._summaries.get(qid)

    def waittime(self, name: str) -> float | None:
        s = self._summary(name)
        return None if s is None else s.waittime(self.clock.now())

    def size(self, name: str) -> int:
        s = self._summary(name)
        return 0 if s is None else s.size

    def counts(self, name: str) -> QueueCounts:
        s = self._summary(name)
        return QueueCounts(0, 0, 0) if s is None else s.counts(self.clock.now())

    def memory(self, name: str) -> int:
        s = self._summary(name)
        return 0 if s is None else s.nbytes

    async def load_messages(self, name: str) -> list[StoredMessage]:
        """Read every record of the queue (id order) and keep them for :meth:`messages`."""
        qid = self._ids.get(name)
        got = [] if qid is None else await self._run(f"read {name}", lambda c: m.messages(c, qid), retry=True)
        self._snapshots[name] = got
        return got

    def messages(self, name: str) -> list[StoredMessage]:
        """The records as of the last :meth:`load_messages` of the queue (a synchronous read
        cannot ask the database; status uses size and memory, not this)."""
        return list(self._snapshots.get(name, []))


async def _execute(sql: str, arg: object, c: Conn) -> str:
    result: str = await c.execute(sql, arg)
    return result


def _bound(fn: Callable[[Conn, int], Awaitable[T]], qid: int) -> Callable[[Conn], Awaitable[T]]:
    return lambda c: fn(c, qid)


# Times a write tries again when another node deleted the queue it writes to (a push, or a
# pull's dead-letter queue) meanwhile, re-creating it each time, before it is answered 503.
_GONE_TRIES: Final = 4


def _kept_deleted(what: str) -> Exception:
    return unavailable("the queue keeps being deleted by other nodes", f"{what}: it was not done")


class _Retry(Exception):
    """The queue row vanished between two statements of one creation."""
