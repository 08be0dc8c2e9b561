"""Compaction: storage stays bounded under steady traffic and no state is lost by it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from pylmq.core.clock import ManualClock
from pylmq.core.message import make_item
from pylmq.store.durable import DurableStore
from tests.store.store_helpers import OpenStore, crash_copy, state_of


def dir_bytes(d: Path) -> int:
    total = 0
    for p in d.iterdir():
        # The compaction thread may rename or remove a file between listing and stat.
        with contextlib.suppress(FileNotFoundError):
            total += p.stat().st_size
    return total


async def wait_compacted(s: DurableStore, count: int) -> None:
    for _ in range(500):
        if s.stats.compactions >= count:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {count} compactions, saw {s.stats.compactions}")


@pytest.mark.slow
async def test_steady_push_ack_traffic_keeps_the_data_directory_bounded(
    open_store: OpenStore, clock: ManualClock
) -> None:
    limit = 256 << 10
    s = await open_store(fsync="none", compact_min_bytes=limit)
    body = b"x" * 100
    largest = 0
    for _ in range(500):  # 50k push/pull/ack cycles in batches of 100
        for _ in range(100):
            await s.enqueue("q", make_item(body), 2, 0)
        await s.barrier()
        for _ in range(100):
            got = await s.dequeue("q", 30)
            assert got is not None
            assert await s.done("q", got[0].uuid)
        await s.barrier()
        clock.advance(0.01)
        largest = max(largest, dir_bytes(s.data_dir))
    assert s.stats.compactions >= 10, f"expected compactions under 50k cycles, saw {s.stats.compactions}"
    # Bound: old segment (threshold + carry + a group) + new one (snapshot + carry + a group).
    assert largest < 4 * limit, f"data directory reached {largest} bytes with a {limit}-byte threshold"


async def test_state_after_compaction_is_the_state_before(open_store: OpenStore, clock: ManualClock) -> None:
    s = await open_store()
    await s.set_default_props([("^q", {"retry": 5})])
    await s.create("q", {"timeout": 3.0})
    for i in range(50):
        await s.enqueue("q", make_item(b"%d" % i, "text/plain"), 5, 0)
    for _ in range(10):
        await s.dequeue("q", 3)
    await s.enqueue("acc", make_item(b"a"), 2, 60.0)
    await s.enqueue("acc", make_item(b"b"), 2, 60.0)
    await s.create("empty", {"retry": None})
    before = state_of(s)
    s.start_compaction()
    await s.barrier()
    await wait_compacted(s, 1)
    assert len(list(s.data_dir.glob("journal-*.log"))) == 1
    await s.close()
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == before


async def test_mutations_during_compaction_are_kept_after_a_crash(
    open_store: OpenStore, tmp_path: Path, clock: ManualClock
) -> None:
    s = await open_store()
    for i in range(2000):
        await s.enqueue("q", make_item(b"%d" % i), 2, 0)
    await s.enqueue("acc", make_item(b"before"), 2, 60.0)
    await s.enqueue("gone", make_item(b"g"), 2, 0)
    await s.barrier()
    s.start_compaction()
    # These land after the freeze: in the old segment, and carried into the new one.
    await s.enqueue("acc", make_item(b"during"), 2, 60.0)
    taken = [got[0] for _ in range(5) if (got := await s.dequeue("q", 30)) is not None]
    assert await s.done("q", taken[0].uuid)
    assert await s.release("q", taken[1].uuid)
    assert await s.delete("gone")
    await s.enqueue("new", make_item(b"n"), 2, 0)
    await s.barrier()
    await wait_compacted(s, 1)
    await s.enqueue("q", make_item(b"after"), 2, 0)
    before = state_of(s)
    dest = await crash_copy(s, tmp_path / "crashed")
    s2 = await open_store(dest)
    assert state_of(s2) == before
    assert [i[1] for i in s2.messages("acc")[0].items()] == [b"before", b"during"]


async def test_crash_before_the_switch_recovers_from_the_old_segment(open_store: OpenStore, tmp_path: Path) -> None:
    s = await open_store()
    for i in range(100):
        await s.enqueue("q", make_item(b"%d" % i), 2, 0)
    await s.barrier()
    s.start_compaction()
    await s.enqueue("q", make_item(b"during"), 2, 0)
    await s.barrier()
    before = state_of(s)
    # Copy whatever is there now: maybe a half-written snapshot (*.tmp), never a renamed one
    # without the records made meanwhile.
    dest = await crash_copy(s, tmp_path / "crashed")
    s2 = await open_store(dest)
    assert state_of(s2) == before


async def test_failed_compaction_keeps_the_current_segment_working(open_store: OpenStore) -> None:
    s = await open_store()
    await s.enqueue("q", make_item(b"a"), 2, 0)
    await s.barrier()
    # A directory where the snapshot file should go makes the snapshot fail.
    (s.data_dir / "journal-00000002.log.tmp").mkdir()
    s.start_compaction()
    await s.enqueue("q", make_item(b"b"), 2, 0)
    await s.barrier()
    for _ in range(200):
        if s._compaction is None:
            break
        await asyncio.sleep(0.01)
        await s.barrier()
    await s.enqueue("q", make_item(b"c"), 2, 0)
    await s.barrier()
    assert s.stats.compactions == 0
    before = state_of(s)
    await s.close()
    (s.data_dir / "journal-00000002.log.tmp").rmdir()
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == before
    assert sorted(m.content[1] for m in s2.messages("q")) == [b"a", b"b", b"c"]
