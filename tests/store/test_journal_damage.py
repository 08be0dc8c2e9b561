"""A damaged journal: start-up cuts only a torn tail, refuses anything else, and repair keeps
every valid record before and after the damage.

Journals here are written by a real :class:`DurableStore`, then damaged on disk as a failing
disk or a careless hand would: a flipped bit mid-segment, damage in a superseded segment or in
a compaction snapshot, a truncation.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from pylmq.cli.journal import run_check
from pylmq.core.message import make_item
from pylmq.errors import JournalCorrupt, StoreError
from pylmq.store.check import check, repair, save_aside
from pylmq.store.durable import DurableStore
from pylmq.store.journal import MAGIC, Encoder, Frame, PutRecord, SnapshotEnd, scan
from tests.store.store_helpers import OpenStore, body_of, state_of


def frames(path: Path) -> list[Frame]:
    found = list(scan(path.read_bytes()))
    assert all(isinstance(f, Frame) for f in found), f"{path} is damaged already"
    return [f for f in found if isinstance(f, Frame)]


def flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


def put_of(path: Path, body: bytes) -> Frame:
    """The frame that put the message whose body is ``body``."""
    (f,) = [f for f in frames(path) if isinstance(f.record, PutRecord) and f.record.message.content[1] == body]
    return f


def bodies(s: DurableStore, queue: str = "q") -> set[bytes]:
    return {body_of(m) for m in s.messages(queue)}


def files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in d.iterdir() if p.name != "LOCK"}


async def push_and_ack(open_store: OpenStore, pushed: int = 250, acked: int = 50) -> DurableStore:
    """A journal of ``pushed`` messages m0.., ``acked`` of them pulled and acked."""
    s = await open_store()
    for i in range(pushed):
        await s.enqueue("q", make_item(b"m%d" % i), 2, 0)
    for _ in range(acked):
        got = await s.dequeue("q", 30)
        assert got is not None
        assert await s.done("q", got[0].id[1])
    await s.close()
    return s


def live_put_in_the_middle(s: DurableStore) -> Frame:
    """The put of a message still live, halfway through the segment."""
    seg = s.data_dir / "journal-00000001.log"
    live = bodies(s)
    puts = [f for f in frames(seg) if isinstance(f.record, PutRecord) and f.record.message.content[1] in live]
    return puts[len(puts) // 2]


async def compacted(open_store: OpenStore, tmp_path: Path, pushed: int = 20) -> tuple[DurableStore, Path]:
    """A closed store whose current segment was written by compaction (a snapshot, no carry);
    also returns a copy of the segment that compaction superseded."""
    s = await open_store()
    for i in range(pushed):
        await s.enqueue("q", make_item(b"m%d" % i), 2, 0)
    await s.barrier()
    old = tmp_path / "superseded.log"
    shutil.copy2(s.data_dir / "journal-00000001.log", old)
    s.start_compaction()
    for _ in range(500):
        if s.stats.compactions:
            break
        await asyncio.sleep(0.01)
    assert s.stats.compactions == 1
    await s.close()
    return s, old


# -- start-up ------------------------------------------------------------------------------------


async def test_flip_inside_a_put_mid_segment_refuses_to_start_and_touches_nothing(open_store: OpenStore) -> None:
    s = await push_and_ack(open_store)
    seg = s.data_dir / "journal-00000001.log"
    hit = live_put_in_the_middle(s)
    flip(seg, (hit.offset + hit.end) // 2)
    before = files(s.data_dir)
    with pytest.raises(JournalCorrupt) as err:
        await open_store(s.data_dir)
    e = err.value
    assert (e.path, e.offset, e.end) == (str(seg), hit.offset, hit.end)
    assert f"{seg} is damaged at byte offset {hit.offset}" in str(e)
    assert f"pylmq journal repair --data-dir {s.data_dir}" in str(e)
    # Nothing cut, nothing saved aside, and the directory is free for the repair.
    assert files(s.data_dir) == before
    s2 = DurableStore(s.data_dir)
    with pytest.raises(JournalCorrupt):
        await s2.open()


async def test_repair_after_mid_segment_damage_keeps_every_other_message_and_no_acked_one_returns(
    open_store: OpenStore,
) -> None:
    s = await push_and_ack(open_store)
    seg = s.data_dir / "journal-00000001.log"
    count = len(frames(seg))
    live = bodies(s)
    hit = live_put_in_the_middle(s)
    assert isinstance(hit.record, PutRecord)
    flip(seg, (hit.offset + hit.end) // 2)
    damaged = seg.read_bytes()
    (done,) = repair(s.data_dir)
    assert done.report.records == count - 1
    assert [(d.offset, d.end) for d in done.report.damages] == [(hit.offset, hit.end)]
    (saved,) = done.saved
    assert saved.read_bytes() == damaged[hit.offset : hit.end]
    assert seg.read_bytes() == damaged[: hit.offset] + damaged[hit.end :]
    s2 = await open_store(s.data_dir)
    # Start-up used to cut everything after the flip: the later pushes were lost and the
    # acked messages (their acks come last) came back.
    assert len(live) == 200 and bodies(s2) == live - {hit.record.message.content[1]}


async def test_repair_is_idempotent_and_never_overwrites_earlier_salvage(open_store: OpenStore) -> None:
    s = await push_and_ack(open_store, pushed=40, acked=0)
    seg = s.data_dir / "journal-00000001.log"
    flip(seg, put_of(seg, b"m10").offset + 20)
    (first,) = repair(s.data_dir)
    repaired = files(s.data_dir)
    (again,) = repair(s.data_dir)
    assert again.report.clean and again.saved == []
    assert files(s.data_dir) == repaired, "a second repair changed something"
    flip(seg, put_of(seg, b"m30").offset + 20)
    (second,) = repair(s.data_dir)
    assert len(second.saved) == 1 and second.saved[0] != first.saved[0]
    assert first.saved[0].read_bytes() == repaired[first.saved[0].name]
    s2 = await open_store(s.data_dir)
    assert bodies(s2) == {b"m%d" % i for i in range(40)} - {b"m10", b"m30"}


def test_save_aside_never_overwrites_a_file_of_the_same_name(tmp_path: Path) -> None:
    seg = tmp_path / "journal-00000001.log"
    paths = [save_aside(seg, "torn", 8, b"%d" % i) for i in range(3)]
    assert len(set(paths)) == 3
    assert [p.read_bytes() for p in paths] == [b"0", b"1", b"2"]


async def test_torn_tail_is_cut_each_time_into_a_salvage_file_of_its_own(open_store: OpenStore) -> None:
    s = await push_and_ack(open_store, pushed=3, acked=0)
    seg = s.data_dir / "journal-00000001.log"
    tails = []
    for body in (b"first", b"second"):
        msg = frames(seg)[-1].record
        assert isinstance(msg, PutRecord)
        tail = Encoder().put("q", msg.message)[:-3] + body
        tails.append(tail)
        with open(seg, "ab") as f:
            f.write(tail)
        s2 = await open_store(s.data_dir)
        assert s2.stats.torn_bytes == len(tail) and bodies(s2) == {b"m0", b"m1", b"m2"}
        await s2.close()
    saved = sorted(seg.parent.glob(seg.name + ".torn-*"))
    assert sorted(p.read_bytes() for p in saved) == sorted(tails)


async def test_damage_in_a_superseded_segment_refuses_to_start_and_repair_lets_it_go(
    open_store: OpenStore, tmp_path: Path
) -> None:
    s, old = await compacted(open_store, tmp_path)
    expected = state_of(s)
    # A crash between installing the compacted segment and deleting the one before.
    stale = s.data_dir / "journal-00000001.log"
    shutil.copy2(old, stale)
    flip(stale, old.stat().st_size // 2)
    with pytest.raises(JournalCorrupt) as err:
        await open_store(s.data_dir)
    assert err.value.path == str(stale)
    assert "not the last" in str(err.value) or "valid records follow" in str(err.value)
    repair(s.data_dir)
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == expected
    assert not stale.exists()


async def test_intact_superseded_segment_is_still_dropped_at_start(open_store: OpenStore, tmp_path: Path) -> None:
    s, old = await compacted(open_store, tmp_path)
    expected = state_of(s)
    shutil.copy2(old, s.data_dir / "journal-00000001.log")
    s2 = await open_store(s.data_dir)
    assert state_of(s2) == expected and not (s.data_dir / "journal-00000001.log").exists()


@pytest.mark.parametrize("current", ["signature only", "a copy of the older segment"])
async def test_a_current_segment_that_is_no_compaction_refuses_to_start_and_keeps_the_older_one(
    open_store: OpenStore, current: str
) -> None:
    # Not what a crash leaves (compaction installs a segment only once its snapshot is whole),
    # but what a hand copying or renaming files does: replaying the newest segment alone and
    # deleting the older one would lose every message it holds.
    s = await push_and_ack(open_store, pushed=30, acked=3)
    old = s.data_dir / "journal-00000001.log"
    newest = s.data_dir / "journal-00000002.log"
    newest.write_bytes(MAGIC if current == "signature only" else old.read_bytes())
    before = files(s.data_dir)
    with pytest.raises(JournalCorrupt, match="does not begin with a compaction snapshot") as err:
        await open_store(s.data_dir)
    assert (err.value.path, err.value.offset) == (str(newest), len(MAGIC))
    assert "journal-00000001.log" in str(err.value)
    assert files(s.data_dir) == before
    *_, last = check(s.data_dir)
    assert last.problems and "compaction snapshot" in last.problems[0].what
    out = io.StringIO()
    assert run_check(s.data_dir, out) == 1
    assert "does not begin with a compaction snapshot" in out.getvalue()
    # Once the stray segment is moved away, the older one is the state again.
    newest.unlink()
    s2 = await open_store(s.data_dir)
    assert len(bodies(s2)) == 27
    await s2.close()


async def test_torn_tail_in_a_superseded_segment_is_not_cut(open_store: OpenStore, tmp_path: Path) -> None:
    s, old = await compacted(open_store, tmp_path)
    stale = s.data_dir / "journal-00000001.log"
    shutil.copy2(old, stale)
    with open(stale, "ab") as f:
        f.write(b"\x05\x00")
    with pytest.raises(JournalCorrupt, match="not the last"):
        await open_store(s.data_dir)


@pytest.mark.parametrize("damage", ["cut inside the last put", "flip in the end marker", "cut before the end marker"])
async def test_damaged_snapshot_at_the_end_of_the_segment_refuses_to_start(
    open_store: OpenStore, tmp_path: Path, damage: str
) -> None:
    s, _ = await compacted(open_store, tmp_path)
    seg = s.data_dir / "journal-00000002.log"
    *_, last_put, end = frames(seg)
    assert isinstance(end.record, SnapshotEnd) and isinstance(last_put.record, PutRecord)
    data = seg.read_bytes()
    if damage == "cut inside the last put":
        seg.write_bytes(data[: last_put.end - 4])
    elif damage == "flip in the end marker":
        flip(seg, end.offset + 4)
    else:
        seg.write_bytes(data[: end.offset])
    # Looks like a torn tail, but compaction installs a segment only once it is whole.
    with pytest.raises(JournalCorrupt, match="compaction snapshot"):
        await open_store(s.data_dir)
    repair(s.data_dir)
    s2 = await open_store(s.data_dir)
    lost = 1 if damage == "cut inside the last put" else 0
    assert len(bodies(s2)) == 20 - lost


async def test_flip_inside_a_snapshot_with_records_after_it_refuses_to_start(
    open_store: OpenStore, tmp_path: Path
) -> None:
    s, _ = await compacted(open_store, tmp_path)
    seg = s.data_dir / "journal-00000002.log"
    hit = put_of(seg, b"m7")
    flip(seg, hit.offset + 12)
    with pytest.raises(JournalCorrupt) as err:
        await open_store(s.data_dir)
    assert (err.value.path, err.value.offset) == (str(seg), hit.offset)


async def test_torn_tail_after_a_complete_snapshot_is_still_cut(open_store: OpenStore, tmp_path: Path) -> None:
    s, _ = await compacted(open_store, tmp_path)
    s2 = await open_store(s.data_dir)
    await s2.enqueue("q", make_item(b"after"), 2, 0)
    await s2.close()
    seg = s.data_dir / "journal-00000002.log"
    with open(seg, "ab") as f:
        f.write(Encoder().delete("q", b"x" * 16)[:-2])
    s3 = await open_store(s.data_dir)
    assert len(bodies(s3)) == 21 and s3.stats.torn_bytes > 0


async def test_truncating_a_real_segment_anywhere_keeps_a_clean_prefix_or_refuses(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """Every cut of a compacted segment with records after its snapshot: inside the snapshot
    start-up refuses; after it, it keeps exactly the whole records before the cut."""
    s, _ = await compacted(open_store, tmp_path, pushed=3)
    s2 = await open_store(s.data_dir)
    await s2.enqueue("q", make_item(b"after"), 2, 0)
    got = await s2.dequeue("q", 30)
    assert got is not None and await s2.done("q", got[0].id[1])
    await s2.close()
    seg = s.data_dir / "journal-00000002.log"
    data = seg.read_bytes()
    all_frames = frames(seg)
    snapshot_end = next(f.end for f in all_frames if isinstance(f.record, SnapshotEnd))
    for cut in range(9, len(data)):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / seg.name).write_bytes(data[:cut])
        if cut < snapshot_end:
            with pytest.raises(JournalCorrupt):
                await DurableStore(d).open()
            continue
        s3 = DurableStore(d)
        await s3.open()
        whole = [f for f in all_frames if f.end <= cut]
        assert (s3.stats.recovered_records, s3.stats.torn_bytes) == (len(whole), cut - whole[-1].end), cut
        await s3.close()


async def test_repair_refuses_while_a_node_holds_the_directory(open_store: OpenStore) -> None:
    s = await open_store()
    with pytest.raises(StoreError, match="in use"):
        repair(s.data_dir)


async def test_check_reports_each_segment_and_says_what_start_up_would_do(open_store: OpenStore) -> None:
    s = await push_and_ack(open_store, pushed=10, acked=0)
    seg = s.data_dir / "journal-00000001.log"
    hit = put_of(seg, b"m4")
    count = len(frames(seg))
    flip(seg, hit.offset + 10)
    (report,) = check(s.data_dir)
    assert report.records == count - 1
    (problem,) = report.problems
    assert (problem.offset, problem.end) == (hit.offset, hit.end) and report.torn_tail is None


# -- the command and the node process -------------------------------------------------------------


def pylmq(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pylmq", *args], capture_output=True, text=True, timeout=timeout)


async def test_journal_command_checks_repairs_and_checks_clean(open_store: OpenStore) -> None:
    s = await push_and_ack(open_store, pushed=10, acked=0)
    seg = s.data_dir / "journal-00000001.log"
    hit = put_of(seg, b"m4")
    count = len(frames(seg))
    flip(seg, hit.offset + 10)
    d = str(s.data_dir)
    checked = pylmq("journal", "check", "--data-dir", d)
    assert checked.returncode == 1, checked
    assert f"{seg}: {len(seg.read_bytes())} bytes, {count - 1} valid records" in checked.stdout
    assert f"damaged at offset {hit.offset}..{hit.end} ({hit.end - hit.offset} bytes)" in checked.stdout
    assert "the node refuses to start" in checked.stdout
    repaired = pylmq("journal", "repair", "--data-dir", d)
    assert repaired.returncode == 0, repaired
    assert f"{seg}: repaired: kept {count - 1} valid records" in repaired.stdout and "saved aside: " in repaired.stdout
    again = pylmq("journal", "check", "--data-dir", d)
    assert (again.returncode, again.stdout.splitlines()[-1]) == (0, f"{d}: journal is clean")
    missing = pylmq("journal", "check", "--data-dir", str(s.data_dir / "nowhere"))
    assert missing.returncode == 2 and "is not a directory" in missing.stderr


async def test_node_process_on_a_damaged_journal_exits_non_zero_naming_file_and_offset(
    open_store: OpenStore,
) -> None:
    s = await push_and_ack(open_store, pushed=10, acked=0)
    seg = s.data_dir / "journal-00000001.log"
    hit = put_of(seg, b"m4")
    flip(seg, hit.offset + 10)
    node = pylmq(
        "--http", "127.0.0.1:0", "--rpc", "127.0.0.1:0", "--store", "durable", "--data-dir", str(s.data_dir),
        "--qs", "off", "--sqs", "off", "--statsd", "off",
    )  # fmt: skip
    assert node.returncode == 1, node
    assert f"pylmq: cannot recover {s.data_dir}: journal {seg} is damaged at byte offset {hit.offset}" in node.stderr
    assert "pylmq ready" not in node.stdout


async def test_checksummed_record_of_an_unknown_kind_mid_segment_refuses_with_its_offset(
    open_store: OpenStore,
) -> None:
    s = await push_and_ack(open_store, pushed=4, acked=0)
    seg = s.data_dir / "journal-00000001.log"
    data = seg.read_bytes()
    at = frames(seg)[2].offset
    payload = b"\x90"
    foreign = struct.pack("<IIB", 2, zlib.crc32(b"\x63" + payload), 0x63) + payload
    seg.write_bytes(data[:at] + foreign + data[at:])
    with pytest.raises(JournalCorrupt, match=f"damaged at byte offset {at} .*unknown record kind 99"):
        await open_store(s.data_dir)
