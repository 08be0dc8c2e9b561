"""The durable store, pylmq's default: in-process tables plus an append-only journal.

The tables are the same :class:`~pylmq.core.table.QueueTable` as the memory store's (one
implementation of LMQ's rules); this store adds a journal that receives every mutation as a
framed record (:mod:`pylmq.store.journal`) in a memory buffer. Once the loop has run the
requests that were ready along with the first record, it writes the buffer as one group (a copy
into the OS page cache, done on the loop: handing each group to a thread and back cost far more
CPU than the write). A sync thread ``fdatasync``s the journal up to the last group written, so
one sync covers every group written while the previous sync ran. :meth:`DurableStore.barrier`
waits for the group that holds every mutation made before it, so concurrent requests share one
write and one fsync:

- ``always``: a group counts once written and ``fdatasync``-ed;
- ``interval`` (the default, :data:`DEFAULT_FSYNC`): once written (in the OS page cache: survives
  a crash of the process); synced about every ``fsync_interval`` seconds. A request writes its
  own records at its barrier rather than wait for the loop's next round;
- ``none``: once written; synced only on close and around compaction.

A write into the page cache can block when the kernel throttles writers of dirty pages; the
groups are small (the records of one round of the loop), and Redis's append-only file makes
the same choice for the same reason.

Files in the data directory: ``LOCK`` (held with ``flock`` while open, so two nodes never share
a directory) and ``journal-NNNNNNNN.log``, the current segment. Compaction
(:mod:`pylmq.store.compaction`) freezes the live state (O(n) references, on the loop), writes it
as a new segment in a thread, appends the records that came meanwhile, syncs, renames it into
place and drops the old segment; the highest-numbered segment always holds the whole state.
Recovery (:mod:`pylmq.store.recovery`) replays that segment and cuts a torn tail (saved aside as
``journal-NNNNNNNN.log.torn-<time>-at<offset>``); any other damage makes
it refuse to start (:mod:`pylmq.store.check` says which is which, and repairs).

The journal's format 2 (docs/decisions/journal-v2.md) also holds per-message options, a record
moved to another queue (a dead letter, a requeue) as one frame, and the virtual queues; a journal
of format 1 is rewritten as a format-2 segment at open, before the store serves (``_upgrade``).

Failures and limits (docs/decisions/store-failures.md): a write or sync that fails stops all
writing and refuses changes (503) until the tables could be written whole as a new segment,
tried again with back-off; a compaction that fails is tried again with back-off. Near a limit
(the journal past ``journal_max_bytes`` while compaction fails, free space below
``disk_reserve_bytes``) pushes and new queues are refused with ``store_full``; past it, every
change is, so the journal neither grows for ever nor meets a full disk.

Why a journal rather than SQLite (docs/decisions/durable-journal.md): the in-process tables are
needed anyway (LMQ's rules in O(log n) on a heap and an index), so the question is only how to
make their mutations durable; SQLite would write whole WAL pages and keep a second indexed copy
of every message. The journal's price is compaction, which runs in a thread on a frozen copy of
the state: the loop only pays for the freeze and shares the GIL while the snapshot is written.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fcntl
import logging
import math
import os
import time
from collections.abc import Container, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from pylmq.core.clock import Clock
from pylmq.core.message import Item, PushOptions, Retry, StoredMessage
from pylmq.core.props import DefaultList, RawProps
from pylmq.core.store import (
    DEFAULT_DISK_RESERVE_BYTES,
    DEFAULT_FSYNC,
    DEFAULT_FSYNC_INTERVAL,
    DEFAULT_JOURNAL_MAX_BYTES,
    FSYNC_POLICIES,
    DedupIds,
    prune_dedup,
)
from pylmq.core.table import AccumResult
from pylmq.errors import ConfigError, ShuttingDown, StoreError, StoreFull
from pylmq.store import compaction as compact
from pylmq.store.compaction import Frozen, drop_snapshot, install, write_snapshot
from pylmq.store.journal import VERSION, JournalFormatError
from pylmq.store.journal_io import JournalIO, Syncer, Worker, fdatasync
from pylmq.store.local import LocalStore
from pylmq.store.recovery import recover
from pylmq.store.write_buffer import WriteBuffer, wake_all

__all__ = ["DurableStats", "DurableStore", "JournalIO"]  # JournalIO: the seam tests give the store

log = logging.getLogger("pylmq.store.durable")

# What the store accepts: every change; no pushes or new queues (it lets consumers drain and
# operators fix what they can while a limit is near); or no change at all (failed: nothing is
# written until the whole state could be written anew).
_ACCEPT, _NO_GROWTH = 0, 1


@dataclass(slots=True)
class DurableStats:
    """Counters for status, bench and tests."""

    segment: int = 0
    segment_bytes: int = 0
    groups: int = 0  # writes of the buffer (one per round of the loop that made records)
    syncs: int = 0  # fdatasyncs (under always, each covers the groups written before it began)
    compactions: int = 0
    last_compaction_seconds: float = 0.0
    recovered_records: int = 0
    torn_bytes: int = 0
    state: str = "ok"  # ok, refusing_pushes (a limit is near) or failed (nothing is written)
    compaction_failures: int = 0  # in a row: back to 0 once one succeeds
    repairs: int = 0  # failed states left by writing the whole state as a new segment
    free_bytes: int = -1  # on the data directory's file system at the last look (-1: not looked)


class DurableStore(LocalStore):
    kind = "durable"

    def __init__(
        self,
        data_dir: Path | str,
        *,
        fsync: str = DEFAULT_FSYNC,
        clock: Clock | None = None,
        fsync_interval: float = DEFAULT_FSYNC_INTERVAL,
        compact_min_bytes: int = 64 << 20,
        compact_ratio: float = 2.0,
        journal_max_bytes: int = DEFAULT_JOURNAL_MAX_BYTES,
        disk_reserve_bytes: int = DEFAULT_DISK_RESERVE_BYTES,
        retry_initial: float = 1.0,
        retry_max: float = 300.0,
        io: JournalIO | None = None,
    ) -> None:
        """``journal_max_bytes``: while compaction keeps failing, the segment may grow to the
        larger of this and twice ``compact_ratio`` times the live data; past it pushes and new
        queues are refused (503 ``store_full``), past a quarter more every change is.
        ``disk_reserve_bytes``: free space kept on the data directory's file system, looked at
        every eighth of it written; below it pushes and new queues are refused, below half of
        it every change is, so that the journal does not meet a full disk. Failed compactions
        and attempts to leave the failed state are retried after ``retry_initial`` seconds,
        doubling up to ``retry_max``."""
        if fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {fsync!r}")
        self._log = WriteBuffer()
        super().__init__(clock, self._log)
        self.data_dir = Path(data_dir)
        self.fsync = fsync
        self.fsync_interval = fsync_interval
        self.compact_min_bytes = compact_min_bytes
        self.compact_ratio = compact_ratio
        self.journal_max_bytes = journal_max_bytes
        self.disk_reserve_bytes = disk_reserve_bytes
        self.retry_initial = retry_initial
        self.retry_max = retry_max
        self.io = io or JournalIO()
        self.stats = DurableStats()
        self._lock_fd = -1
        self._fd = -1
        self._seq = 0
        self._next_check = compact_min_bytes
        self._io: Worker | None = None
        self._snap_io: ThreadPoolExecutor | None = None
        self._syncer: Syncer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._write_pending = False  # _write_out is scheduled
        self._holding = False  # the flusher switches segments: groups wait in the buffer
        # Bytes of journal written since open (across segments), and those known synced.
        self._written = 0
        self._synced = 0
        self._sync_asked = 0
        # Groups written and not yet synced, oldest first: (end, their barrier waiters).
        self._unsynced: collections.deque[tuple[int, list[asyncio.Future[None]]]] = collections.deque()
        self._all_synced: asyncio.Future[None] | None = None
        self._compaction: asyncio.Future[tuple[int, int]] | None = None
        self._compaction_started = 0.0
        self._wake = asyncio.Event()
        self._closing = False
        self._closed = False
        self._error: BaseException | None = None
        self._last_sync = 0.0
        self._sync_timer: asyncio.TimerHandle | None = None
        self._sync_replied = 0  # bytes up to which the sync thread answered, success or not
        # Limits and failures: what changes are refused, why, and the timers that look again.
        self._refusing = False  # failed or a limit is near: a change must ask _check_change
        self._refusal = _ACCEPT
        self._refusal_detail = ""
        self._compact_failures = 0
        self._journal_limit = journal_max_bytes
        self._compact_timer: asyncio.TimerHandle | None = None
        self._repair_delay = 0.0
        self._repair_due = False
        self._repair_timer: asyncio.TimerHandle | None = None
        self._watch_timer: asyncio.TimerHandle | None = None
        self._free = -1
        # Free space is looked at again once this much more is written (_written) or by then
        # (time.monotonic(): others fill the disk too), whichever comes first.
        self._space_next = 0
        self._space_due = 0.0

    # -- life cycle ---------------------------------------------------------------------------

    async def open(self) -> None:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._lock()
        except OSError as e:
            raise StoreError(f"cannot open data directory {self.data_dir}: {e.strerror or e}") from e
        loop = asyncio.get_running_loop()
        self._io = Worker(loop, "pylmq-journal")
        self._snap_io = ThreadPoolExecutor(1, thread_name_prefix="pylmq-compact")
        try:
            await self._io.call(self._recover)
        except StoreError:
            self._release()
            raise
        except JournalFormatError as e:
            self._release()
            raise StoreError(f"cannot recover {self.data_dir}: {e}") from e
        except OSError as e:
            self._release()
            raise StoreError(f"cannot recover {self.data_dir}: {e.strerror or e}") from e
        self._loop = loop
        self._syncer = Syncer(loop, self._on_synced, self.io.fdatasync)
        self._log.kick = self._kick
        self._last_sync = time.monotonic()
        self._flusher = loop.create_task(self._run(), name="pylmq-journal-flusher")
        self._check_space()

    def _lock(self) -> None:
        fd = os.open(self.data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreError(f"data directory {self.data_dir} is in use by another pylmq node") from None
        self._lock_fd = fd

    def _release(self) -> None:
        if self._syncer is not None:
            self._syncer.shutdown()
            self._syncer = None
        if self._io is not None:
            self._io.shutdown()
        if self._snap_io is not None:
            self._snap_io.shutdown(wait=True)
        self._io = self._snap_io = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)  # closing the descriptor drops the flock
            self._lock_fd = -1

    async def close(self) -> None:
        """Write and sync everything (whatever the policy), finish a running compaction."""
        if self._flusher is None:
            self._release()
            return
        self._closing = True
        self._wake.set()
        await self._flusher
        self._flusher = None
        self._closed = True
        for timer in (self._sync_timer, self._compact_timer, self._repair_timer, self._watch_timer):
            if timer is not None:
                timer.cancel()
        if self._compaction is not None:
            # Left over by a failure: the snapshot is useless without its carry.
            with contextlib.suppress(BaseException):
                fd, _ = await self._compaction
                self._drop_snapshot(fd)
            self._compaction = None
        try:
            if self._error is None and self._fd >= 0 and self._io is not None:
                await self._io.call(fdatasync, self._fd)
        finally:
            self._release()
        if self._error is not None:
            raise StoreError(f"journal of {self.data_dir} failed: {self._error}")

    async def barrier(self) -> None:
        if self._closed:
            raise ShuttingDown(f"the store at {self.data_dir} is closed")
        if self._error is not None:
            self._check_change(False)
        lg = self._log
        if lg.buf and self.fsync != "always":
            # Under interval and none the write into the page cache is all a barrier waits
            # for: do it now rather than suspend the request until the loop's next round
            # (one write per request costs a few microseconds, a suspension several times that).
            self._write_group()
            if self._error is not None:
                self._check_change(False)
            if not lg.buf:
                return
        if lg.buf:
            waiters = lg.waiters
        elif self._unsynced:
            waiters = self._unsynced[-1][1]
        else:
            return  # everything applied so far is durable already
        # A future of its own, not one shared by the group: a client that goes away cancels
        # only its own wait (what asyncio.shield of a shared future did, at twice the cost).
        fut = asyncio.get_running_loop().create_future()
        waiters.append(fut)
        await fut

    # -- changes: refused while failed or near a limit ------------------------------------------
    # A delivery (dequeue, put_back) is never refused here: the queue layer serves waiters with
    # it, and refusing would make it retry in a loop. While failed it changes the tables only
    # (nothing is written), its barrier raises, and the message stays in processing until its
    # timeout: as when a client leaves before its answer.

    async def enqueue(self, name: str, item: Item, retry: Retry, accum: float) -> AccumResult:
        if self._refusing:
            self._check_change(True)
        return self._table(name).enqueue(item, retry, accum, self.clock.now())

    async def push(self, name: str, item: Item, retry: Retry, options: PushOptions, *, track: bool = False) -> bytes:
        if self._refusing:
            self._check_change(True)
        return await super().push(name, item, retry, options, track=track)

    async def requeue(self, dlq: str, count: int, to: str | None, keep: Container[str] = ()) -> int:
        if self._refusing:
            self._check_change(False)
        return await super().requeue(dlq, count, to, keep)

    async def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        if self._refusing:
            self._check_change(False)
        await super().set_virtual(name, queues)

    async def create(self, name: str, props: RawProps | None = None) -> bool:
        if self._refusing:
            self._check_change(name not in self.tables)
        return self._create_now(name, props)

    async def set_queue_props(self, name: str, props: RawProps) -> None:
        if self._refusing:
            self._check_change(name not in self.tables)
        self._create_now(name, props)

    async def delete(self, name: str) -> bool:
        if self._refusing:
            self._check_change(False)
        return await super().delete(name)

    async def set_default_props(self, defaults: DefaultList) -> None:
        if self._refusing:
            self._check_change(False)
        await super().set_default_props(defaults)

    async def done(self, name: str, uuid: bytes) -> bool:
        if self._refusing:
            self._check_change(False)
        table = self.tables.get(name)
        return table is not None and table.done(uuid, self.clock.now())

    async def retain(self, name: str, uuid: bytes, timeout: float) -> bool:
        if self._refusing:
            self._check_change(False)
        return await super().retain(name, uuid, timeout)

    async def release(self, name: str, uuid: bytes) -> bool:
        if self._refusing:
            self._check_change(False)
        return await super().release(name, uuid)

    async def claim(
        self, name: str, uuids: Sequence[bytes], timeout: float, max_bytes: int | None = None
    ) -> list[StoredMessage | None]:
        if self._refusing:
            self._check_change(False)
        return await super().claim(name, uuids, timeout, max_bytes)

    # -- metadata hooks --------------------------------------------------------------------------

    def _on_queue(self, name: str, props: RawProps | None) -> None:
        lg = self._log
        lg.add(lg.enc.drop(name) if props is None else lg.enc.queue(name, props))

    def _on_defaults(self, defaults: DefaultList) -> None:
        self._log.add(self._log.enc.defaults(defaults))

    def _on_virtual(self, name: str, queues: list[str]) -> None:
        self._log.add(self._log.enc.virtual(name, queues))

    def keep_dedup(self, name: str, key: str, sent: float, message_id: str, sequence: str) -> None:
        self._log.add(self._log.enc.dedup(name, key, sent, message_id, sequence))

    # -- recovery (runs in the journal thread before anything else touches the store) ------------

    def _recover(self) -> None:
        r = recover(self.data_dir, self, self._log)
        now = self.clock.now()
        for ids in self.dedup.values():
            prune_dedup(ids, now)
        self._seq, self._fd = r.seq, r.fd
        st = self.stats
        st.segment, st.segment_bytes, st.recovered_records, st.torn_bytes = r.seq, r.size, r.records, r.torn_bytes
        if r.version < VERSION:
            self._upgrade(r.version)

    def _upgrade(self, version: int) -> None:
        """The journal is an older format: write the recovered state as a new segment of the
        current format (a compaction, before the store serves anything), so that no newer
        record ever goes into an older segment. A crash meanwhile leaves the old segment as the
        state (the new one is a ``.tmp`` until whole), and the next start upgrades again."""
        frozen, defaults, virtual, dedup = self._freeze()
        seq = self._seq + 1
        fd, size = write_snapshot(self.data_dir, self.io, seq, frozen, defaults, virtual, dedup)
        try:
            install(self.data_dir, self.io, seq, fd, b"", self._fd)
        except BaseException:
            drop_snapshot(self.data_dir, seq, fd)
            raise
        self._seq, self._fd = seq, fd
        st = self.stats
        st.segment, st.segment_bytes = seq, size
        self._next_check = compact.next_check(self.compact_min_bytes, self.compact_ratio, size)
        log.warning(
            "journal of %s upgraded from format %d to %d: segment %d (%d bytes); older pylmq versions cannot read it",
            self.data_dir, version, VERSION, seq, size,
        )  # fmt: skip

    # -- group commit ------------------------------------------------------------------------------

    def _kick(self) -> None:
        """The buffer got its first frame: write it out once the loop has run what is ready now
        (requests taken in meanwhile join the same group)."""
        if not self._write_pending:
            self._write_pending = True
            assert self._loop is not None
            self._loop.call_soon(self._write_out)

    def _write_out(self) -> None:
        """The write that _kick scheduled."""
        self._write_pending = False
        self._write_group()

    def _write_group(self) -> None:
        """Write the buffer as one group, on the loop (a copy into the page cache, far cheaper
        than handing it to a thread and back). Under ``always`` its waiters then wait for the
        sync thread; under ``interval`` and ``none`` the write is all they wait for. A barrier
        calls it directly, leaving the write _kick scheduled in place: one scheduled write per
        round of the loop covers what no barrier wrote (a redelivery's move, say)."""
        lg = self._log
        if not lg.buf or self._holding or self._error is not None or self._closed:
            return  # the flusher writes what waits once it lets go
        compaction = self._compaction
        if compaction is not None and (compaction.done() or self._carry_full()):
            # Switch to the new segment first, or (both segments growing while a snapshot is
            # written) hold further groups in memory until it is done: the flusher's work.
            self._wake.set()
            return
        data, waiters = lg.buf, lg.waiters
        lg.buf, lg.waiters = bytearray(), []
        try:
            self.io.write(self._fd, data)
        except OSError as e:
            self._unsynced.append((self._written + len(data), waiters))
            self._fail(e)
            return
        self._written += len(data)
        self.stats.segment_bytes += len(data)
        self.stats.groups += 1
        if self.fsync == "always":
            self._unsynced.append((self._written, waiters))
            self._request_sync()
        else:
            wake_all(waiters)
            if self.fsync == "interval" and self._sync_timer is None:
                assert self._loop is not None
                delay = max(0.0, self.fsync_interval - (time.monotonic() - self._last_sync))
                self._sync_timer = self._loop.call_later(delay, self._on_sync_timer)
        if self._written >= self._space_next or time.monotonic() >= self._space_due:
            self._check_space()
        elif self._compact_failures:
            self._update_refusal()
        self._maybe_compact()

    def _request_sync(self) -> None:
        assert self._syncer is not None
        self._sync_asked = self._written
        self._syncer.request(self._fd, self._written)

    def _on_sync_timer(self) -> None:
        self._sync_timer = None
        # While the flusher switches segments it syncs the new one itself.
        if self._written > self._sync_asked and not self._holding and self._error is None and not self._closed:
            self._request_sync()

    def _on_synced(self, end: int, error: BaseException | None) -> None:
        """The sync thread synced the journal up to ``end`` (called on the loop)."""
        self._sync_replied = max(self._sync_replied, end)
        if error is not None:
            self._fail(error)
        else:
            self.stats.syncs += 1
            self._last_sync = time.monotonic()
            self._synced = max(self._synced, end)
            unsynced = self._unsynced
            while unsynced and unsynced[0][0] <= end:
                wake_all(unsynced.popleft()[1])
        # Every sync asked for is over, failed or not: the file may be closed or replaced.
        done = self._all_synced
        if done is not None and self._sync_replied >= self._sync_asked:
            self._all_synced = None
            if not done.done():
                done.set_result(None)

    async def _wait_synced(self) -> None:
        """Return once every sync asked for is over (the file may then be closed or replaced)."""
        if self._sync_replied >= self._sync_asked:
            return
        if self._all_synced is None:
            assert self._loop is not None
            self._all_synced = self._loop.create_future()
        await self._all_synced

    async def _run(self) -> None:
        """The flusher: what group commits do not do on their own (switching to a compacted
        segment, leaving the failed state, closing). A failure fails the store, not the flusher."""
        while True:
            try:
                compaction = self._compaction
                if compaction is not None and compaction.done():
                    if self._error is None:
                        await self._switch(compaction)
                        self._write_out()  # the groups held meanwhile
                    else:
                        self._discard(compaction)  # the repair writes a snapshot of its own
                elif self._closing:
                    if compaction is not None:
                        await asyncio.wait([compaction])
                        continue
                    if self._error is None:
                        self._write_out()
                        await self._wait_synced()
                    return
                elif self._repair_due and compaction is None:
                    self._repair_due = False
                    await self._repair()
                else:
                    self._wake.clear()
                    await self._wake.wait()
            except Exception as e:
                self._fail(e)

    def _carry_full(self) -> bool:
        return self._log.carry_bytes > self.compact_min_bytes // 4

    def _fail(self, e: BaseException) -> None:
        """An I/O error, or a limit passed: nothing more is written (a later record after a
        partly written group would be cut off at recovery anyway) and changes are refused; the
        barrier of every change not yet durable raises. The tables stay as they are: the
        repair (:meth:`_repair`) writes them whole as a new segment."""
        if self._error is not None:
            return
        self._error = e
        lg = self._log
        lg.failed = True
        err = e if isinstance(e, StoreFull) else StoreError(f"journal of {self.data_dir} failed: {e}")
        waiting = [*lg.waiters]
        for _, waiters in self._unsynced:
            waiting += waiters
        for fut in waiting:
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved: a waiter cancelled meanwhile must not log a warning
        self._unsynced.clear()
        lg.waiters, lg.buf, lg.carry = [], bytearray(), None
        self._refusing = True
        self.stats.state = "failed"
        self._schedule_repair()
        log.error(
            "journal of %s failed; the store refuses changes and writes its whole state anew in %.3g s: %r",
            self.data_dir, self._repair_delay, e,
        )  # fmt: skip

    def _schedule_repair(self) -> None:
        delay = self.retry_initial if self._repair_delay == 0 else min(2 * self._repair_delay, self.retry_max)
        self._repair_delay = delay
        if self._loop is not None and not self._closing:
            self._repair_timer = self._loop.call_later(delay, self._repair_soon)

    def _repair_soon(self) -> None:
        self._repair_timer = None
        self._repair_due = True
        self._wake.set()

    async def _repair(self) -> None:
        """Leave the failed state: write the tables whole as a new segment, as a compaction
        does, and go on writing there. While failed every change but a delivery was refused
        and no delivery was answered (its barrier raised), so the tables hold what was answered
        plus the changes of the groups that failed; their clients got an error and may see
        them done anyway, as after any lost answer."""
        while self._sync_replied < self._sync_asked:
            await self._wait_synced()  # a sync of the old file may still run: it is closed below
        self._look_at_space()
        if self._disk_level() > _NO_GROWTH:
            self._schedule_repair()
            log.error(
                "journal of %s still refused: %s; next attempt in %.3g s",
                self.data_dir,
                self._space_detail(),
                self._repair_delay,
            )
            return
        frozen, defaults, virtual, dedup = self._freeze()
        seq = self._seq + 1
        loop = asyncio.get_running_loop()
        io = self._io
        assert io is not None
        try:
            fd, size = await loop.run_in_executor(
                self._snap_io, write_snapshot, self.data_dir, self.io, seq, frozen, defaults, virtual, dedup
            )
            try:
                await io.call(install, self.data_dir, self.io, seq, fd, b"", self._fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.close(fd)
                raise
        except Exception as e:
            self._schedule_repair()
            log.error("journal of %s still failing; next attempt in %.3g s: %r", self.data_dir, self._repair_delay, e)
            return
        error, self._error = self._error, None
        self._fd, self._seq = fd, seq
        self._synced = self._sync_asked = self._sync_replied = self._written
        self._log.failed = False
        st = self.stats
        st.segment, st.segment_bytes, st.repairs = seq, size, st.repairs + 1
        self._next_check = compact.next_check(self.compact_min_bytes, self.compact_ratio, size)
        self._repair_delay = 0.0
        self._compaction_succeeded()
        self._check_space()
        log.warning(
            "journal of %s works again: its whole state is segment %d (%d bytes); failed with %r",
            self.data_dir, seq, size, error,
        )  # fmt: skip

    def _discard(self, compaction: asyncio.Future[tuple[int, int]]) -> None:
        self._compaction = None
        self._log.carry = None
        if compaction.exception() is None:
            self._drop_snapshot(compaction.result()[0])

    def _drop_snapshot(self, fd: int) -> None:
        """A compaction's snapshot that will not be installed: close it and delete its file."""
        drop_snapshot(self.data_dir, self._seq + 1, fd)

    # -- limits -----------------------------------------------------------------------------------

    def _check_change(self, growth: bool) -> None:
        """Raise if the store refuses a change now (``growth``: a push or a new queue)."""
        error = self._error
        if isinstance(error, StoreFull):
            raise StoreFull(f"{error.detail}; the store refuses changes until it has written its state anew")
        if error is not None:
            raise StoreError(
                f"journal of {self.data_dir} failed: {error}; the store refuses changes until it works again"
            )
        if growth and self._refusal == _NO_GROWTH:
            raise StoreFull(f"{self._refusal_detail}; the store refuses pushes and new queues")

    def _disk_level(self) -> int:
        reserve = self.disk_reserve_bytes
        if self._free < 0 or self._free >= reserve:
            return _ACCEPT
        return _NO_GROWTH if self._free >= reserve // 2 else _NO_GROWTH + 1

    def _space_detail(self) -> str:
        # Names the setting: on a small disk a new node refuses everything until it is lowered.
        reserve = self.disk_reserve_bytes
        return f"{self._free} bytes free for {self.data_dir}, below the reserve of {reserve} bytes (disk_reserve_bytes)"

    def _journal_level(self) -> int:
        seg, limit = self.stats.segment_bytes, self._journal_limit
        if not self._compact_failures or seg <= limit:
            return _ACCEPT
        return _NO_GROWTH if seg <= limit + limit // 4 else _NO_GROWTH + 1

    def _journal_detail(self) -> str:
        seg, limit = self.stats.segment_bytes, self._journal_limit
        return f"the journal has grown to {seg} bytes (limit {limit}, journal_max_bytes) while compaction fails"

    def _check_space(self) -> None:
        """Look at the free space of the data directory's file system, then at the limits."""
        self._look_at_space()
        self._update_refusal()

    def _look_at_space(self) -> None:
        if self.disk_reserve_bytes > 0:
            try:
                self._free = self.io.free_bytes(self.data_dir)
            except OSError as e:
                log.warning("cannot tell the free space of %s: %r", self.data_dir, e)
                self._free = -1
            self.stats.free_bytes = self._free
            self._space_next = self._written + max(self.disk_reserve_bytes // 8, 1 << 16)
            self._space_due = time.monotonic() + self.retry_initial
        else:
            self._space_next, self._space_due = 1 << 62, math.inf

    def _update_refusal(self) -> None:
        """Refuse pushes and new queues near a limit; fail (refuse every change) past it."""
        if self._error is not None:
            return
        disk, journal = self._disk_level(), self._journal_level()
        if disk > _NO_GROWTH or journal > _NO_GROWTH:
            self._fail(StoreFull(self._space_detail() if disk > _NO_GROWTH else self._journal_detail()))
            return
        level = max(disk, journal)
        detail = self._space_detail() if disk else self._journal_detail() if journal else ""
        if level != self._refusal:
            if level == _NO_GROWTH:
                log.error("store at %s refuses pushes and new queues: %s", self.data_dir, detail)
            else:
                log.warning("store at %s accepts pushes again", self.data_dir)
        self._refusal, self._refusal_detail = level, detail
        self._refusing = level != _ACCEPT
        self.stats.state = "refusing_pushes" if self._refusing else "ok"
        # The space freed by someone else, or a compaction's success: looked at again.
        if self._refusing and self._watch_timer is None and self._loop is not None and not self._closing:
            self._watch_timer = self._loop.call_later(self.retry_initial, self._watch)

    def _watch(self) -> None:
        self._watch_timer = None
        self._check_space()

    # -- compaction --------------------------------------------------------------------------------

    def _maybe_compact(self) -> None:
        if self._compaction is not None or self._closing or self._error is not None or self._compact_timer is not None:
            return  # (with a timer, a failed compaction waits for its next attempt)
        seg = self.stats.segment_bytes
        if seg < self._next_check:
            return
        live = sum(t.bytes for t in self.tables.values())
        if not compact.is_due(seg, live, self.compact_ratio):
            self._next_check = seg + max(self.compact_min_bytes // 4, 1)
            return
        self.start_compaction()

    def start_compaction(self) -> None:
        """Freeze the live state now and write it as the next segment in a thread."""
        if self._compaction is not None or self._snap_io is None or self._error is not None:
            return
        frozen, defaults, virtual, dedup = self._freeze()
        self._log.carry, self._log.carry_bytes = [], 0
        self._compaction_started = time.monotonic()
        seq = self._seq + 1
        fut = asyncio.get_running_loop().run_in_executor(
            self._snap_io, write_snapshot, self.data_dir, self.io, seq, frozen, defaults, virtual, dedup
        )
        fut.add_done_callback(lambda _: self._wake.set())
        self._compaction = fut

    def _freeze(self) -> tuple[Frozen, DefaultList, dict[str, list[str]], dict[str, DedupIds]]:
        frozen, defaults = compact.freeze(self.tables, self.props, self.defaults)
        virtual = {name: list(queues) for name, queues in self.virtual.items()}
        # Only the deduplication ids still inside the window outlive a compaction.
        now = self.clock.now()
        for ids in self.dedup.values():
            prune_dedup(ids, now)
        dedup = {name: dict(ids) for name, ids in self.dedup.items() if ids}
        return frozen, defaults, virtual, dedup

    def _retry_compaction(self) -> None:
        self._compact_timer = None
        if not self._closing:
            self.start_compaction()

    def _compaction_failed(self, e: BaseException) -> None:
        """Keep the current segment, try again after a back-off, and refuse pushes once the
        journal passes its limit (whatever the cause: a record that does not encode, an I/O
        error, a full disk)."""
        self._compact_failures = n = self._compact_failures + 1
        self.stats.compaction_failures = n
        delay = compact.retry_delay(self.retry_initial, self.retry_max, n)
        live = sum(t.bytes for t in self.tables.values())
        self._journal_limit = compact.journal_limit(self.journal_max_bytes, self.compact_ratio, live)
        log.error(
            "compaction of %s failed (%d in a row), keeping the current segment (%d bytes; pushes refused past %d); "
            "next attempt in %.3g s: %r",
            self.data_dir, n, self.stats.segment_bytes, self._journal_limit, delay, e,
        )  # fmt: skip
        assert self._loop is not None
        if not self._closing:
            self._compact_timer = self._loop.call_later(delay, self._retry_compaction)
        self._update_refusal()

    def _compaction_succeeded(self) -> None:
        if self._compact_failures:
            log.warning("compaction of %s succeeded after %d failures", self.data_dir, self._compact_failures)
            self._compact_failures = self.stats.compaction_failures = 0
        if self._compact_timer is not None:
            self._compact_timer.cancel()
            self._compact_timer = None

    async def _switch(self, compaction: asyncio.Future[tuple[int, int]]) -> None:
        """The snapshot is written: add the records made since the freeze, sync, rename it into
        place. Until the rename the old segment is the state; after it, the new one. Groups
        wait in the buffer meanwhile."""
        self._compaction = None
        self._holding = True
        try:
            await self._switch_held(compaction)
        finally:
            self._holding = False

    async def _switch_held(self, compaction: asyncio.Future[tuple[int, int]]) -> None:
        lg = self._log
        io = self._io
        assert io is not None
        try:
            fd, snap_size = compaction.result()
        except Exception as e:
            lg.carry = None
            self._compaction_failed(e)
            return
        # The old segment's file is closed below: no sync of it may still be running.
        await self._wait_synced()
        if self._error is not None:  # a sync failed meanwhile: the repair writes its own
            self._drop_snapshot(fd)
            return
        # Every frame made since the freeze is in the carry, whether written to the old segment
        # or still in the buffer: the new segment is the snapshot plus the carry, so the
        # buffer's frames are not written again, and their waiters go once it is in place.
        carry, lg.carry = lg.carry or [], None
        held, waiters = lg.buf, lg.waiters
        lg.buf, lg.waiters = bytearray(), []
        seq = self._seq + 1
        tail = b"".join(carry)
        try:
            await io.call(install, self.data_dir, self.io, seq, fd, tail, self._fd)
        except BaseException:
            self._unsynced.append((self._written + len(held), waiters))  # failed with the store
            raise
        self._fd, self._seq = fd, seq
        self._written += len(held)
        self._synced = self._sync_asked = self._sync_replied = self._written
        self._last_sync = time.monotonic()
        size = snap_size + len(tail)
        st = self.stats
        st.segment, st.segment_bytes, st.compactions = seq, size, st.compactions + 1
        st.syncs += 1
        st.last_compaction_seconds = time.monotonic() - self._compaction_started
        self._next_check = compact.next_check(self.compact_min_bytes, self.compact_ratio, snap_size)
        self._compaction_succeeded()
        self._update_refusal()
        log.info("compacted %s: segment %d, %d bytes, %.3f s", self.data_dir, seq, size, st.last_compaction_seconds)
        wake_all(waiters)

    # -- for tests and tools --------------------------------------------------------------------------

    def segment_paths(self) -> Iterable[Path]:
        return sorted(p for p in self.data_dir.iterdir() if p.name.startswith("journal-"))
