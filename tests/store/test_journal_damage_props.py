"""Property tests of the journal reader and scanner: round trip, truncation, bit flips.

The promise is "no silent loss": whatever happens to a segment's bytes, what comes back is
the original records (never different ones), and every missing record is reported as damage
or is part of a torn tail at the very end.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylmq.core.message import DeadLetter, MessageExt, State, StoredMessage, StoredMessageType
from pylmq.store.check import check_buffer
from pylmq.store.journal import (
    MAGIC,
    SNAPSHOT_BEGIN_FRAME,
    Damage,
    Encoder,
    Frame,
    JournalFormatError,
    JournalReader,
    Record,
    scan,
)

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PATH = Path("data/journal-00000001.log")

names = st.text(min_size=1, max_size=8)
uuids = st.binary(min_size=16, max_size=16)
bodies = st.binary(max_size=64)
metadata = st.lists(st.tuples(st.binary(max_size=6), st.binary(max_size=6)), max_size=2).map(tuple)
items = st.tuples(metadata, bodies)
states = st.sampled_from(list(State))
retries = st.one_of(st.none(), st.integers(0, 5))
stamps = st.floats(0, 2e9, allow_nan=False)


times = st.one_of(st.none(), stamps)
dead_letters = st.builds(DeadLetter, names, st.integers(0, 1000), times, st.sampled_from(["retries", "expired"]))
exts = st.one_of(
    st.none(),
    st.builds(
        MessageExt,
        times,
        times,
        st.integers(0, 255),
        st.booleans(),
        st.integers(0, 1000),
        times,
        times,
        times,
        st.one_of(st.none(), dead_letters),
    ),
)


@st.composite
def messages(draw: st.DrawFn) -> StoredMessage:
    """Records of format 1 and, with an ext, of format 2."""
    if draw(st.booleans()):
        return StoredMessage(
            (draw(stamps), draw(uuids)), draw(states), StoredMessageType.NORMAL, draw(retries), draw(items), draw(exts)
        )
    content = draw(st.lists(items, min_size=1, max_size=3))
    mid = (draw(stamps), draw(uuids))
    return StoredMessage(mid, draw(states), StoredMessageType.COMPOUND, draw(retries), content, draw(exts))


enc = Encoder()
frames = st.one_of(
    st.builds(enc.put, names, messages()),
    st.builds(enc.delete, names, uuids),
    st.builds(enc.append, names, uuids, items),
    st.builds(enc.move, names, uuids, messages()),
    st.builds(enc.queue, names, st.dictionaries(st.sampled_from(["retry", "pack", "timeout"]), st.integers(0, 9))),
    st.builds(enc.drop, names),
    st.builds(enc.transfer, names, uuids, names, messages()),
    st.builds(enc.virtual, names, st.lists(names, max_size=4)),
)
segments = st.lists(frames, min_size=1, max_size=12)


def records_of(frame_list: list[bytes]) -> list[Record]:
    reader = JournalReader()
    return reader.feed(MAGIC + b"".join(frame_list))


def bounds(frame_list: list[bytes]) -> list[tuple[int, int]]:
    out, pos = [], len(MAGIC)
    for f in frame_list:
        out.append((pos, pos + len(f)))
        pos += len(f)
    return out


@FAST
@given(segments, st.data())
def test_round_trip_in_any_chunking_gives_back_every_record(frame_list: list[bytes], data: st.DataObject) -> None:
    blob = MAGIC + b"".join(frame_list)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(blob)), max_size=6)))
    reader = JournalReader()
    got: list[Record] = []
    for a, b in zip([0, *cuts], [*cuts, len(blob)], strict=True):
        got += reader.feed(blob[a:b])
    assert len(got) == len(frame_list)
    assert (reader.offset, reader.torn) == (len(blob), False)
    scanned = list(scan(blob))
    assert [f.record for f in scanned if isinstance(f, Frame)] == got
    assert not [d for d in scanned if isinstance(d, Damage)]


@FAST
@given(segments)
def test_truncation_at_every_offset_keeps_a_clean_prefix_and_reports_the_rest_as_a_torn_tail(
    frame_list: list[bytes],
) -> None:
    blob = MAGIC + b"".join(frame_list)
    full = records_of(frame_list)
    ends = [e for _, e in bounds(frame_list)]
    for cut in range(len(MAGIC), len(blob)):
        reader = JournalReader()
        got = reader.feed(blob[:cut])
        whole = sum(1 for e in ends if e <= cut)
        assert got == full[:whole], f"cut at {cut}: expected the first {whole} records"
        assert reader.offset == max([len(MAGIC), *[e for e in ends if e <= cut]])
        report = check_buffer(blob[:cut], PATH, last=True)
        assert report.records == whole
        if reader.offset < cut:
            # Only a torn tail, never refused in the last segment, always refused elsewhere.
            assert report.damages == [Damage(reader.offset, cut, report.damages[0].reason)]
            assert report.problems == [] and report.torn_tail is not None
            assert check_buffer(blob[:cut], PATH, last=False).problems
        else:
            assert report.clean


@FAST
@given(segments, st.data())
def test_any_single_bit_flip_loses_exactly_the_frame_it_hit_and_says_where(
    frame_list: list[bytes], data: st.DataObject
) -> None:
    blob = bytearray(MAGIC + b"".join(frame_list))
    at = data.draw(st.integers(len(MAGIC), len(blob) - 1))
    blob[at] ^= 1 << data.draw(st.integers(0, 7))
    full = records_of(frame_list)
    spans = bounds(frame_list)
    hit = next(i for i, (a, b) in enumerate(spans) if a <= at < b)
    scanned = list(scan(bytes(blob)))
    start = spans[hit][0]
    if at < start + 4 and start + 8 + int.from_bytes(blob[start : start + 4], "little") == len(blob):
        # The flip made the frame's length reach the end of the segment exactly: by design that
        # is a last frame torn by a crash (cut, and saved aside, at start-up), never damage to
        # resynchronise past, since the reader would then take frames out of what may be that
        # record's payload (a message body can hold bytes shaped like frames).
        assert [f.record for f in scanned if isinstance(f, Frame)] == full[:hit]
        assert check_buffer(bytes(blob), PATH, last=True).torn_tail == Damage(start, len(blob), "checksum mismatch")
        return
    assert [f.record for f in scanned if isinstance(f, Frame)] == full[:hit] + full[hit + 1 :]
    (damage,) = [d for d in scanned if isinstance(d, Damage)]
    assert (damage.offset, damage.end) == spans[hit]
    report = check_buffer(bytes(blob), PATH, last=True)
    if hit == len(frame_list) - 1:
        assert report.torn_tail == damage and not report.problems  # the last frame: a torn tail
    else:
        (problem,) = report.problems
        assert (problem.offset, problem.end) == spans[hit]
        assert f"valid records follow at offset {spans[hit][1]}" in str(problem)


@FAST
@given(segments, st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 7)), min_size=1, max_size=6))
def test_random_bit_flips_never_invent_records_and_never_go_unreported(
    frame_list: list[bytes], flips: list[tuple[int, int]]
) -> None:
    original = MAGIC + b"".join(frame_list)
    blob = bytearray(original)
    for at, bit in flips:
        blob[at % len(blob)] ^= 1 << bit
    full = records_of(frame_list)
    try:
        scanned = list(scan(bytes(blob)))
    except JournalFormatError:
        assert blob[:7] == MAGIC[:7] and blob[7] != MAGIC[7]  # only a flipped version byte
        return
    got = [f.record for f in scanned if isinstance(f, Frame)]
    it = iter(full)
    assert all(any(r == o for o in it) for r in got), "a record that was never written came back"
    damaged = [d for d in scanned if isinstance(d, Damage)]
    if bytes(blob) != original:
        assert damaged, "bytes changed and nothing was reported"
    missing = len(full) - len(got)
    assert missing == 0 or damaged


@FAST
@given(st.lists(st.tuples(names, st.lists(messages(), max_size=4)), max_size=3), st.data())
def test_truncating_a_snapshot_anywhere_is_refused_never_cut(
    queues: list[tuple[str, list[StoredMessage]]], data: st.DataObject
) -> None:
    snapshot = MAGIC + b"".join(Encoder().state([(n, {}, ms) for n, ms in queues], []))
    assert check_buffer(snapshot, PATH, last=True).clean
    # Cut to its bare signature, a snapshot looks like a new empty segment: from the first byte on
    # it is told apart.
    cut = data.draw(st.integers(len(MAGIC) + 1, len(snapshot) - 1))
    report = check_buffer(snapshot[:cut], PATH, last=True)
    assert report.problems, f"a snapshot cut at {cut} of {len(snapshot)} bytes was taken for a torn tail"
    reader = JournalReader()
    reader.feed(snapshot[:cut])
    # What recovery goes by, besides the begin marker's own bytes.
    assert reader.snapshot_at == (len(MAGIC) if cut >= len(MAGIC) + len(SNAPSHOT_BEGIN_FRAME) else None)
