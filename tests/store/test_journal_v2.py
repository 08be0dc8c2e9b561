"""Journal format 2 in the durable store: a format-1 journal (what earlier pylmq versions wrote)
is upgraded at open with its state unchanged; virtual queues survive restarts, crashes and
compaction; a transfer between queues is one frame, so a crash at any byte of it leaves the
record in exactly one of the two queues.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pylmq.core.clock import ManualClock
from pylmq.core.message import DeadLetter, PushOptions, State, StoredMessage, StoredMessageType, make_item
from pylmq.core.props import DefaultList, RawProps
from pylmq.core.store import DEDUP_WINDOW, DedupIds, prune_dedup
from pylmq.core.table import QueueTable
from pylmq.errors import JournalCorrupt, StoreError
from pylmq.store.check import repair
from pylmq.store.durable import DurableStore
from pylmq.store.journal import (
    MAGIC,
    MAGIC_V1,
    SNAPSHOT_BEGIN_FRAME,
    DedupRecord,
    Encoder,
    Frame,
    TransferRecord,
    VirtualRecord,
    scan,
)
from pylmq.store.journal_io import JournalIO
from pylmq.store.local import LocalStore
from pylmq.store.recovery import recover
from pylmq.store.write_buffer import WriteBuffer
from tests.store.store_helpers import OpenStore, crash_copy, state_of
from tests.store.test_durable_compaction import wait_compacted

U1, U2, U3 = bytes(range(16)), bytes(range(16, 32)), bytes(range(32, 48))


def kinds(path: Path) -> list[int]:
    data = path.read_bytes()
    found = list(scan(data))
    assert all(isinstance(f, Frame) for f in found), f"{path} is damaged"
    return [data[f.offset + 8] for f in found if isinstance(f, Frame)]


async def format_1_journal(open_store: OpenStore, data_dir: Path) -> dict[str, object]:
    """A journal as format 1 wrote it: a store's records of every format-1 kind (queues,
    properties, defaults, pushes, pulls, acks, an accumulation, a drop) under format 1's
    signature; returns the state it holds. Format 2 writes these records byte for byte as
    format 1 did (test_journal_codec.py), so only the signature changes."""
    s = await open_store(data_dir)
    await s.set_default_props([("^q", {"retry": 5})])
    await s.create("q", {"timeout": 3.0})
    for i in range(20):
        await s.enqueue("q", make_item(b"m%d" % i, "text/plain"), 5, 0)
    pulled = [await s.dequeue("q", 3) for _ in range(6)]
    last = pulled[-1]
    assert last is not None
    assert await s.done("q", last[0].uuid)
    await s.enqueue("acc", make_item(b"a"), 2, 60.0)
    await s.enqueue("acc", make_item(b"b"), 2, 60.0)
    await s.create("gone")
    await s.delete("gone")
    state = state_of(s)
    await s.close()
    seg = data_dir / "journal-00000001.log"
    assert set(kinds(seg)) == {1, 2, 3, 4, 5, 6, 7}
    seg.write_bytes(MAGIC_V1 + seg.read_bytes()[len(MAGIC) :])
    return state


async def test_a_format_1_journal_is_upgraded_at_open_with_its_state(open_store: OpenStore, tmp_path: Path) -> None:
    data = tmp_path / "data"
    before = await format_1_journal(open_store, data)
    s = await open_store(data)
    assert state_of(s) == before
    # Rewritten as a format-2 compaction segment before serving; the format-1 file is gone.
    assert [p.name for p in s.segment_paths()] == ["journal-00000002.log"]
    head = (data / "journal-00000002.log").read_bytes()[: len(MAGIC) + len(SNAPSHOT_BEGIN_FRAME)]
    assert head == MAGIC + SNAPSHOT_BEGIN_FRAME
    assert s.stats.segment == 2
    # Later records go into the new segment, and it reopens as the same state.
    await s.enqueue("q", make_item(b"after"), 5, 0)
    await s.set_virtual("v", ["q", "acc"])
    after = state_of(s)
    await s.close()
    s2 = await open_store(data)
    assert (state_of(s2), s2.virtual_queues()) == (after, {"v": ["q", "acc"]})
    assert [p.name for p in s2.segment_paths()] == ["journal-00000002.log"]


async def test_a_format_1_journal_with_a_torn_tail_is_cut_then_upgraded(open_store: OpenStore, tmp_path: Path) -> None:
    data = tmp_path / "data"
    before = await format_1_journal(open_store, data)
    seg = data / "journal-00000001.log"
    with open(seg, "ab") as f:
        f.write(Encoder().delete("q", U1)[:-2])  # a crash mid-write
    s = await open_store(data)
    assert state_of(s) == before and s.stats.torn_bytes > 0
    assert [p.name for p in data.glob("journal-*.log")] == ["journal-00000002.log"]
    assert [p.name for p in data.glob("journal-00000001.log.torn-*")]


class FailingSync(JournalIO):
    def __init__(self) -> None:
        self.fail = True

    def fdatasync(self, fd: int) -> None:
        if self.fail:
            raise OSError(5, "Input/output error")
        super().fdatasync(fd)


async def test_an_upgrade_that_fails_leaves_the_format_1_journal_and_is_done_at_the_next_open(
    open_store: OpenStore, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    before = await format_1_journal(open_store, data)
    original = (data / "journal-00000001.log").read_bytes()
    with pytest.raises(StoreError, match="Input/output error"):
        await open_store(data, io=FailingSync())
    assert sorted(p.name for p in data.iterdir() if p.name != "LOCK") == ["journal-00000001.log"]
    assert (data / "journal-00000001.log").read_bytes() == original
    s = await open_store(data)
    assert state_of(s) == before
    assert [p.name for p in s.segment_paths()] == ["journal-00000002.log"]


async def test_a_crash_after_the_upgrade_renamed_its_segment_keeps_the_upgraded_one(
    open_store: OpenStore, tmp_path: Path
) -> None:
    """The old segment is deleted after the new one is in place: a crash between leaves both,
    and the next open replays the newer (a compaction's) and deletes the format-1 one."""
    data = tmp_path / "data"
    before = await format_1_journal(open_store, data)
    original = (data / "journal-00000001.log").read_bytes()
    s = await open_store(data)
    await s.close()
    (data / "journal-00000001.log").write_bytes(original)
    s2 = await open_store(data)
    assert state_of(s2) == before
    assert [p.name for p in s2.segment_paths()] == ["journal-00000002.log"]


@pytest.mark.parametrize("how", ["restart", "crash", "compaction"])
async def test_virtual_queues_survive_restarts_crashes_and_compaction(
    open_store: OpenStore, tmp_path: Path, how: str
) -> None:
    s = await open_store()
    await s.set_virtual("v", ["a", "b"])
    await s.set_virtual("w", ["c"])
    await s.set_virtual("v", ["b", "c", "d"])
    await s.set_virtual("w", [])
    await s.set_virtual("gone", [])  # removing an unknown name writes nothing
    await s.enqueue("a", make_item(b"x"), 2, 0)
    want = {"v": ["b", "c", "d"]}
    assert s.virtual_queues() == want
    if how == "compaction":
        s.start_compaction()
        await s.barrier()
        await wait_compacted(s, 1)
        seg = s.data_dir / f"journal-{s.stats.segment:08d}.log"
        records = [f.record for f in scan(seg.read_bytes()) if isinstance(f, Frame)]
        assert [r for r in records if isinstance(r, VirtualRecord)] == [VirtualRecord("v", ["b", "c", "d"])]
    if how == "crash":
        s2 = await open_store(await crash_copy(s, tmp_path / "crashed"))
    else:
        await s.close()
        s2 = await open_store(s.data_dir)
    assert s2.virtual_queues() == want
    assert [m.content for m in s2.messages("a")] == [((), b"x")]


def keep(s: DurableStore, queue: str, key: str, n: int) -> None:
    """What the SQS layer does at a FIFO send: the map first, then the journal."""
    now = s.clock.now()
    s.dedup_ids(queue)[key] = (now, f"m{n}", f"{n:020d}")
    s.keep_dedup(queue, key, now, f"m{n}", f"{n:020d}")


@pytest.mark.parametrize("how", ["restart", "crash", "compaction"])
async def test_dedup_ids_survive_restarts_crashes_and_compaction_while_inside_the_window(
    open_store: OpenStore, tmp_path: Path, clock: ManualClock, how: str
) -> None:
    s = await open_store()
    await s.create("q.fifo")
    await s.create("gone.fifo")
    keep(s, "q.fifo", "old", 1)
    clock.advance(DEDUP_WINDOW - 10)
    keep(s, "q.fifo", "new", 2)
    keep(s, "q.fifo", "g\nnew", 3)
    keep(s, "gone.fifo", "x", 4)
    await s.delete("gone.fifo")  # a queue dropped forgets its ids
    await s.barrier()
    want = {"new": (clock.now(), "m2", f"{2:020d}"), "g\nnew": (clock.now(), "m3", f"{3:020d}")}
    clock.advance(20)  # "old" is now out of the window; the others are not
    if how == "compaction":
        s.start_compaction()
        await s.barrier()
        await wait_compacted(s, 1)
        seg = s.data_dir / f"journal-{s.stats.segment:08d}.log"
        records = [f.record for f in scan(seg.read_bytes()) if isinstance(f, Frame)]
        assert sorted(r.key for r in records if isinstance(r, DedupRecord)) == ["g\nnew", "new"]
    if how == "crash":
        s2 = await open_store(await crash_copy(s, tmp_path / "crashed"))
    else:
        await s.close()
        s2 = await open_store(s.data_dir)
    assert s2.dedup_ids("q.fifo") == want
    assert s2.dedup_ids("gone.fifo") == {}


async def test_dedup_ids_past_the_window_are_forgotten_at_recovery(open_store: OpenStore, clock: ManualClock) -> None:
    s = await open_store()
    await s.create("q.fifo")
    keep(s, "q.fifo", "a", 1)
    keep(s, "q.fifo", "a", 5)  # the same key sent again: the newer answer
    await s.close()
    s2 = await open_store(s.data_dir)
    assert s2.dedup_ids("q.fifo") == {"a": (clock.now(), "m5", f"{5:020d}")}
    await s2.close()
    clock.advance(DEDUP_WINDOW + 1)
    s3 = await open_store(s.data_dir)
    assert s3.dedup_ids("q.fifo") == {}


async def test_dedup_ids_are_bounded_per_queue_oldest_forgotten_first(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("pylmq.core.store.MAX_DEDUP", 3)
    monkeypatch.setattr("pylmq.store.recovery.MAX_DEDUP", 3)
    s = await open_store()
    await s.create("q.fifo")
    for n in range(5):
        keep(s, "q.fifo", f"k{n}", n)
    await s.close()
    s2 = await open_store(s.data_dir)
    assert list(s2.dedup_ids("q.fifo")) == ["k2", "k3", "k4"]
    ids = {f"k{n}": (s2.clock.now(), "m", "1") for n in range(5)}
    prune_dedup(ids, s2.clock.now())
    assert list(ids) == ["k2", "k3", "k4"]


# -- a transfer at every crash point -------------------------------------------------------------


@dataclass
class Replayed:
    tables: dict[str, QueueTable] = field(default_factory=dict)
    props: dict[str, RawProps] = field(default_factory=dict)
    defaults: DefaultList = field(default_factory=list)
    virtual: dict[str, list[str]] = field(default_factory=dict)
    dedup: dict[str, DedupIds] = field(default_factory=dict)


def replay(data_dir: Path) -> Replayed:
    into = Replayed()
    r = recover(data_dir, into, WriteBuffer())
    os.close(r.fd)
    return into


def view(into: Replayed, queue: str) -> list[tuple[object, ...]]:
    table = into.tables.get(queue)
    msgs = [] if table is None else table.messages()
    return sorted((m.id, m.state, m.type, m.retry, m.content) for m in msgs)


@pytest.mark.parametrize("compound", [False, True], ids=["normal", "compound"])
def test_a_transfer_cut_at_any_byte_happened_wholly_or_not_at_all(tmp_path: Path, compound: bool) -> None:
    enc = Encoder()
    if compound:
        src = StoredMessage(
            (5.0, U1), State.PROCESSING, StoredMessageType.COMPOUND, 0, [make_item(b"a"), make_item(b"b")]
        )
    else:
        src = StoredMessage((5.0, U1), State.PROCESSING, StoredMessageType.NORMAL, 0, make_item(b"job", "x/y"))
    other = StoredMessage((6.0, U3), State.AVAILABLE, StoredMessageType.NORMAL, 2, make_item(b"stays"))
    head = (
        MAGIC + enc.queue("q", {"dead_letter": "dlq"}) + enc.queue("dlq", {}) + enc.put("q", src) + enc.put("q", other)
    )
    moved = StoredMessage((9.5, U2), State.AVAILABLE, src.type, 4, src.content)
    frame = enc.transfer("q", U1, "dlq", moved)
    whole = head + frame
    before_q = [
        (src.id, src.state, src.type, src.retry, src.content),
        (other.id, other.state, other.type, 2, other.content),
    ]
    after_dlq = [(moved.id, State.AVAILABLE, src.type, 4, src.content)]
    for cut in range(len(head), len(whole) + 1):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / "journal-00000001.log").write_bytes(whole[:cut])
        into = replay(d)
        if cut < len(whole):
            assert (view(into, "q"), view(into, "dlq")) == (sorted(before_q), []), f"cut at {cut}: moved in part"
            assert (d / "journal-00000001.log").stat().st_size == len(head)  # the torn frame is cut
        else:
            assert (view(into, "q"), view(into, "dlq")) == (sorted(before_q[1:]), after_dlq)
        shutil.rmtree(d)


def test_a_transfer_into_a_queue_not_yet_known_creates_it_and_a_lost_source_moves_nothing(tmp_path: Path) -> None:
    enc = Encoder()
    src = StoredMessage((5.0, U1), State.AVAILABLE, StoredMessageType.NORMAL, 1, make_item(b"job"))
    moved = StoredMessage((7.0, U2), State.AVAILABLE, StoredMessageType.NORMAL, 3, ((), b""))
    frames = enc.put("q", src) + enc.transfer("q", U1, "new", moved) + enc.transfer("q", U3, "other", moved)
    (tmp_path / "journal-00000001.log").write_bytes(MAGIC + frames)
    into = replay(tmp_path)
    assert view(into, "new") == [((7.0, U2), State.AVAILABLE, StoredMessageType.NORMAL, 3, ((), b"job"))]
    assert view(into, "q") == [] and "other" not in into.tables


# -- records with an ext, dead letters and requeues through a real store ---------------------------


def full_view(s: LocalStore, queue: str) -> list[tuple[object, ...]]:
    """Every field of every record, the ext included."""
    return sorted(((m.id, m.state, m.type, m.retry, m.content, m.ext) for m in s.messages(queue)), key=repr)


async def ext_traffic(s: DurableStore, clock: ManualClock) -> None:
    """Pushes with options, deliveries (move-ext), dead letters (transfers) and a requeue."""
    now = clock.now()
    await s.push("q", make_item(b"prio"), 2, PushOptions(priority=7, expires=now + 500), track=True)
    await s.push("q", make_item(b"late"), 2, PushOptions(not_before=now + 50, interval=3.0))
    await s.push("q", make_item(b"once"), 2, PushOptions(once=True))
    await s.push("q", make_item(b"dies"), 2, PushOptions(retry=0), track=True)
    await s.push("q", make_item(b"expires"), 2, PushOptions(expires=now + 20), track=True)
    for _ in range(4):
        assert await s.dequeue("q", 10, "dlq") is not None
    clock.advance(30)
    # Every delivery is past its deadline: "dies" is spent, "expires" expired after a delivery,
    # "once" is dropped; "prio" is delivered again.
    got = await s.dequeue("q", 10, "dlq")
    assert got is not None and got[0].items()[0][1] == b"prio"
    assert await s.dequeue("q", 10, "dlq") is None  # "late" is not due yet
    assert {m.items()[0][1] for m in s.messages("dlq")} == {b"dies", b"expires"}
    assert await s.requeue("dlq", 1, None) == 1


@pytest.mark.parametrize("how", ["restart", "crash", "compaction"])
async def test_ext_records_dead_letters_and_requeues_are_recovered_whole(
    open_store: OpenStore, tmp_path: Path, clock: ManualClock, how: str
) -> None:
    s = await open_store()
    await ext_traffic(s, clock)
    before = {q: full_view(s, q) for q in ("q", "dlq")}
    letters = [m.ext.dead for m in s.messages("dlq") if m.ext is not None]
    assert [(d.origin, d.failures, d.reason) for d in letters if d is not None] in (
        [("q", 1, "retries")],
        [("q", 1, "expired")],
    )
    if how == "compaction":
        s.start_compaction()
        await s.barrier()
        await wait_compacted(s, 1)
    if how == "crash":
        s2 = await open_store(await crash_copy(s, tmp_path / "crashed"))
    else:
        await s.close()
        s2 = await open_store(s.data_dir)
    assert {q: full_view(s2, q) for q in ("q", "dlq")} == before


async def test_a_dead_letter_transfer_cut_at_any_byte_is_in_one_queue_whole(
    open_store: OpenStore, tmp_path: Path, clock: ManualClock
) -> None:
    """The same with the frame a real store writes for a dead letter, its ext included."""
    s = await open_store()
    await s.push("q", make_item(b"job"), 2, PushOptions(retry=0, priority=2), track=True)
    got = await s.dequeue("q", 5, "dlq")
    assert got is not None
    delivered = got[0]
    clock.advance(10)
    assert await s.dequeue("q", 5, "dlq") is None
    (letter,) = s.messages("dlq")
    await s.close()
    seg = s.data_dir / "journal-00000001.log"
    data = seg.read_bytes()
    (frame,) = [f for f in scan(data) if isinstance(f, Frame) and isinstance(f.record, TransferRecord)]
    assert frame.end == len(data)
    as_pulled = (delivered.id, delivered.state, delivered.type, delivered.retry, delivered.content, delivered.ext)
    moved = (letter.id, letter.state, letter.type, letter.retry, letter.content, letter.ext)
    assert letter.ext is not None and letter.ext.dead == DeadLetter("q", 1, delivered.ext.last_at, "retries")  # type: ignore[union-attr]
    for cut in range(frame.offset, frame.end + 1):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / seg.name).write_bytes(data[:cut])
        into = replay(d)
        views = {
            q: [(m.id, m.state, m.type, m.retry, m.content, m.ext) for m in into.tables[q].messages()]
            for q in ("q", "dlq")
        }
        if cut < frame.end:
            assert views == {"q": [as_pulled], "dlq": []}, f"cut at {cut}: moved in part"
        else:
            assert views == {"q": [], "dlq": [moved]}
        shutil.rmtree(d)


async def test_a_damaged_transfer_mid_segment_is_refused_then_repaired_around(
    open_store: OpenStore, clock: ManualClock
) -> None:
    """Damage in a format-2 frame is judged as in any other: valid records follow, so start-up
    refuses; repair saves the frame aside, keeps every other frame byte for byte and the
    segment's signature."""
    s = await open_store()
    await ext_traffic(s, clock)
    await s.set_virtual("v", ["q"])
    await s.close()
    seg = s.data_dir / "journal-00000001.log"
    data = bytearray(seg.read_bytes())
    hit = next(f for f in scan(bytes(data)) if isinstance(f, Frame) and isinstance(f.record, TransferRecord))
    assert hit.end < len(data)
    data[(hit.offset + hit.end) // 2] ^= 0x10
    seg.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt) as err:
        await open_store(s.data_dir)
    assert (err.value.offset, err.value.end) == (hit.offset, hit.end)
    (done,) = repair(s.data_dir)
    assert [d[:2] for d in done.report.damages] == [(hit.offset, hit.end)]
    assert seg.read_bytes() == bytes(data[: hit.offset] + data[hit.end :])
    s2 = await open_store(s.data_dir)
    # The record whose transfer was cut stays where it was before the transfer, as processing.
    assert s2.virtual_queues() == {"v": ["q"]}
    assert len(s2.messages("dlq")) + len(s2.messages("q")) == len(s.messages("dlq")) + len(s.messages("q"))
