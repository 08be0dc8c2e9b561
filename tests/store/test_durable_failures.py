"""The durable store under failing writes, failing compactions and a filling disk: it refuses
changes with a clear error before its journal or the disk runs away, backs off, and goes back
to work by itself once writes succeed again, losing nothing it answered."""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pylmq.core.message import make_item
from pylmq.errors import StoreError, StoreFull
from pylmq.store.durable import DurableStore, JournalIO
from tests.store.store_helpers import OpenStore, body_of, state_of


class FaultyIO(JournalIO):
    """The real system calls, but writes fail with ``write_errno`` while it is set, and the
    free space reads ``free`` while that is set."""

    def __init__(self) -> None:
        self.write_errno: int | None = None
        self.free: int | None = None
        self.failed_writes = 0

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> None:
        if self.write_errno is not None:
            self.failed_writes += 1
            raise OSError(self.write_errno, os.strerror(self.write_errno))
        super().write(fd, data)

    def free_bytes(self, path: Path) -> int:
        return self.free if self.free is not None else super().free_bytes(path)


async def wait_for_state(s: DurableStore, state: str, seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if s.stats.state == state:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected the store to be {state!r}, it is {s.stats.state!r}")


async def push(s: DurableStore, body: bytes, queue: str = "q") -> None:
    await s.enqueue(queue, make_item(body), 2, 0)
    await s.barrier()


async def cycle(s: DurableStore, body: bytes = b"x" * 100) -> None:
    """A push, pull and ack: journal records without live data."""
    await push(s, body, "churn")
    got = await s.dequeue("churn", 30)
    assert got is not None
    assert await s.done("churn", got[0].uuid)
    await s.barrier()


def contents(s: DurableStore, queue: str = "q") -> list[bytes]:
    return sorted(body_of(m) for m in s.messages(queue))


# -- a write that fails (a full disk) -------------------------------------------------------------


async def test_after_a_failed_write_the_store_recovers_by_itself_once_writes_succeed(
    open_store: OpenStore, caplog: pytest.LogCaptureFixture
) -> None:
    io = FaultyIO()
    s = await open_store(io=io, retry_initial=0.02, retry_max=0.08)
    await push(s, b"answered")
    io.write_errno = errno.ENOSPC
    await s.enqueue("q", make_item(b"failed with its group"), 2, 0)
    with pytest.raises(StoreError, match="No space left"):
        await s.barrier()
    with pytest.raises(StoreError, match="No space left") as refused:
        await s.enqueue("q", make_item(b"refused"), 2, 0)
    assert refused.value.http_status == 503 and s.stats.state == "failed"
    # Attempts to write the state anew fail as long as the disk is full, further and further apart.
    for _ in range(500):
        if io.failed_writes >= 4:
            break
        await asyncio.sleep(0.01)
    assert s.stats.state == "failed" and s.stats.repairs == 0
    io.write_errno = None
    await wait_for_state(s, "ok")
    assert s.stats.repairs == 1
    await push(s, b"after")
    retries = [r.getMessage() for r in caplog.records if "still failing" in r.getMessage()]
    assert retries and all("ENOSPC" in m or "No space" in m for m in retries), retries
    assert any("works again" in r.getMessage() for r in caplog.records)
    # Answered: kept. The change whose group failed got an error, but its effect stayed in the
    # tables (a consumer may have seen it): the new segment keeps it rather than undo it.
    before = state_of(s)
    assert contents(s) == [b"after", b"answered", b"failed with its group"]
    await s.close()
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == before


async def test_a_failed_sync_fails_the_store_and_it_recovers_too(open_store: OpenStore) -> None:
    class FailingSync(FaultyIO):
        sync_errno: int | None = errno.EIO

        def fdatasync(self, fd: int) -> None:
            if self.sync_errno is not None:
                raise OSError(self.sync_errno, os.strerror(self.sync_errno))
            super().fdatasync(fd)

    io = FailingSync()
    io.sync_errno = None
    s = await open_store(io=io, fsync="always", retry_initial=0.02, retry_max=0.08)
    await push(s, b"answered")
    io.sync_errno = errno.EIO
    await s.enqueue("q", make_item(b"unsynced"), 2, 0)
    with pytest.raises(StoreError, match="Input/output error"):
        await s.barrier()
    await asyncio.sleep(0.1)
    assert s.stats.state == "failed"
    io.sync_errno = None
    await wait_for_state(s, "ok")
    await push(s, b"after")
    before = state_of(s)
    await s.close()
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == before and b"answered" in contents(s2) and b"after" in contents(s2)


# -- a compaction that fails --------------------------------------------------------------------


async def test_failing_compaction_backs_off_refuses_pushes_past_the_limit_and_recovers(
    open_store: OpenStore, caplog: pytest.LogCaptureFixture
) -> None:
    limit = 64 << 10
    s = await open_store(
        fsync="none", compact_min_bytes=16 << 10, journal_max_bytes=limit, disk_reserve_bytes=0,
        retry_initial=0.02, retry_max=0.08,
    )  # fmt: skip
    await push(s, b"kept")
    await s.create("bad", {"retry": 1})
    # A property no record can hold (msgpack stops at 64 bits): every snapshot fails to encode.
    s.props["bad"]["retry"] = 2**70
    refused = None
    for _ in range(5000):
        try:
            await cycle(s)
        except StoreFull as e:
            refused = e
            break
        await asyncio.sleep(0)  # let back-off timers fire
    assert refused is not None, f"pushes still accepted with a {s.stats.segment_bytes}-byte journal"
    assert refused.reason == "store_full" and refused.http_status == 503
    assert "while compaction fails" in refused.detail, refused.detail
    assert s.stats.compaction_failures >= 1 and s.stats.state == "refusing_pushes"
    assert limit < s.stats.segment_bytes < limit + (4 << 10), "the journal stopped growing just past its limit"
    # Consumers still drain: pull and ack are accepted.
    got = await s.dequeue("q", 30)
    assert got is not None and await s.done("q", got[0].uuid)
    await s.barrier()
    with pytest.raises(StoreFull):
        await s.enqueue("q", make_item(b"refused"), 2, 0)
    # One alarm per attempt, the attempts further and further apart (bounded by retry_max).
    alarms = [r for r in caplog.records if r.levelno == logging.ERROR and "compaction of" in r.getMessage()]
    assert len(alarms) == s.stats.compaction_failures
    delays = [m.getMessage().split("next attempt in ")[1].split(" s")[0] for m in alarms]
    assert delays[:3] == ["0.02", "0.04", "0.08"][: len(delays[:3])], delays
    # What an operator's fix of the property does: compaction succeeds at its next attempt.
    s.props["bad"]["retry"] = 3
    await wait_for_state(s, "ok")
    assert s.stats.compaction_failures == 0 and s.stats.compactions >= 1
    assert s.stats.segment_bytes < limit
    await push(s, b"after")
    before = state_of(s)
    await s.close()
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == before
    assert contents(s2) == [b"after"] and s2.queue_props("bad") == {"retry": 3}


async def test_compaction_failing_on_io_is_retried_and_the_journal_goes_on_meanwhile(open_store: OpenStore) -> None:
    class SnapshotWritesFail(FaultyIO):
        def write(self, fd: int, data: bytes | bytearray | memoryview) -> None:
            # Journal groups are written on the loop's thread, snapshots in a thread of their own.
            if self.write_errno is not None and threading.current_thread() is not threading.main_thread():
                self.failed_writes += 1
                raise OSError(self.write_errno, os.strerror(self.write_errno))
            JournalIO.write(self, fd, data)

    io = SnapshotWritesFail()
    io.write_errno = errno.EIO
    s = await open_store(
        io=io, fsync="none", compact_min_bytes=8 << 10, disk_reserve_bytes=0, retry_initial=0.02, retry_max=0.04
    )
    await push(s, b"kept")
    for _ in range(3000):
        await cycle(s)
        await asyncio.sleep(0)
        if s.stats.compaction_failures >= 3:
            break
    assert s.stats.compaction_failures >= 3 and s.stats.compactions == 0
    assert s.stats.state == "ok", "a failed compaction alone refuses nothing below the journal's limit"
    io.write_errno = None
    for _ in range(500):
        if s.stats.compactions:
            break
        await cycle(s)
        await asyncio.sleep(0.01)
    assert s.stats.compactions >= 1 and s.stats.compaction_failures == 0
    await push(s, b"after")
    before = state_of(s)
    await s.close()
    assert not list(s.data_dir.glob("*.tmp")), "a failed snapshot was left behind"
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == before and contents(s2) == [b"after", b"kept"]


async def test_journal_far_past_its_limit_fails_the_store_until_compaction_succeeds(open_store: OpenStore) -> None:
    limit = 32 << 10
    s = await open_store(
        fsync="none", compact_min_bytes=8 << 10, journal_max_bytes=limit, disk_reserve_bytes=0,
        retry_initial=0.02, retry_max=0.05,
    )  # fmt: skip
    await s.create("bad", {"retry": 1})
    s.props["bad"]["retry"] = 2**70
    await s.enqueue("q", make_item(b"m"), None, 0)  # retried for ever
    await s.barrier()
    # Past the limit pushes are refused; a consumer that pulls and nacks for ever still writes.
    failed = None
    for _ in range(20000):
        got = await s.dequeue("q", 30)
        if got is not None:
            try:
                assert await s.release("q", got[0].uuid)
                await s.barrier()
            except StoreFull as e:
                failed = e
                break
        await asyncio.sleep(0)
    assert failed is not None and s.stats.state == "failed"
    assert s.stats.segment_bytes <= limit + limit // 4 + 1024, s.stats.segment_bytes
    with pytest.raises(StoreFull):
        await s.create("new")
    s.props["bad"]["retry"] = 3
    await wait_for_state(s, "ok")
    assert s.stats.repairs == 1 and s.stats.segment_bytes < limit
    await push(s, b"after")
    before = state_of(s)
    await s.close()
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == before and contents(s2) == [b"after", b"m"]


# -- free space ---------------------------------------------------------------------------------


async def test_low_free_space_refuses_pushes_then_every_change_and_lifts_by_itself(open_store: OpenStore) -> None:
    io = FaultyIO()
    io.free = 10 << 20
    s = await open_store(io=io, disk_reserve_bytes=1 << 20, retry_initial=0.02, retry_max=0.05)
    await push(s, b"a")
    await push(s, b"b")
    io.free = 700 << 10  # below the reserve: no more pushes, but consumers go on
    refused = None
    for _ in range(200):  # looked at again after retry_initial seconds of writes
        try:
            await push(s, b"more", "other")
        except StoreFull as e:
            refused = e
            break
        await asyncio.sleep(0.01)
    assert refused is not None and "bytes free" in refused.detail, refused
    assert "disk_reserve_bytes" in refused.detail  # what an operator with a small disk lowers
    assert s.stats.state == "refusing_pushes" and s.stats.free_bytes == 700 << 10
    with pytest.raises(StoreFull):
        await s.create("new queue")
    got = await s.dequeue("q", 30)
    assert got is not None and await s.done("q", got[0].uuid)
    await s.barrier()
    acked = got[0].content[1]
    io.free = 100 << 10  # below half of it: nothing is written any more
    await wait_for_state(s, "failed")  # the watch looks while pushes are refused
    with pytest.raises(StoreFull):
        await s.done("q", b"any")
    got = await s.dequeue("q", 30)
    assert got is not None
    with pytest.raises(StoreFull):
        await s.barrier()  # a delivery is not answered while nothing is written
    io.free = 100 << 20
    await wait_for_state(s, "ok")
    await push(s, b"c")
    before = state_of(s)
    await s.close()
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == before
    assert contents(s2) == sorted({b"a", b"b", b"c"} - {acked}) and contents(s2, "other") == [b"more"] * len(
        s2.messages("other")
    )


# -- a real full disk: a small tmpfs ---------------------------------------------------------------


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs root and mount; skipped with the reason otherwise)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


async def test_real_full_disk_fails_the_store_and_freeing_space_recovers_it(
    open_store: OpenStore, small_fs: Path
) -> None:
    s = await open_store(small_fs / "data", disk_reserve_bytes=0, retry_initial=0.02, retry_max=0.05)
    answered: list[bytes] = []
    filler = small_fs / "filler"
    # Most of the space taken by another file, so the journal fails while the state is small
    # enough to be written anew once that file is gone.
    filler.write_bytes(b"\0" * (3 << 19))
    failed = False
    for i in range(2000):
        body = b"%06d" % i + b"x" * 2000
        try:
            await push(s, body)
        except StoreError as e:
            assert "No space left" in str(e), e
            failed = True
            break
        answered.append(body)
    assert failed and s.stats.state == "failed", "the tmpfs never filled up"
    filler.unlink()
    await wait_for_state(s, "ok")
    await push(s, b"after")
    assert set(answered) <= set(contents(s))
    before = state_of(s)
    await s.close()
    s2 = await open_store(s.data_dir, disk_reserve_bytes=0)
    assert state_of(s2) == before


async def test_with_a_reserve_a_filling_disk_refuses_pushes_before_any_write_fails(
    open_store: OpenStore, small_fs: Path
) -> None:
    s = await open_store(small_fs / "data", disk_reserve_bytes=512 << 10)
    refused = None
    for i in range(2000):
        try:
            await push(s, b"%06d" % i + b"x" * 2000)
        except StoreError as e:
            refused = e
            break
    assert isinstance(refused, StoreFull), refused
    assert s.stats.state == "refusing_pushes" and 256 << 10 <= s.stats.free_bytes < 512 << 10
    got = await s.dequeue("q", 30)
    assert got is not None and await s.done("q", got[0].uuid)
    await s.barrier()
    await s.close()
