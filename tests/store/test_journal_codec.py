"""The journal's record format, byte for byte, and the reader's handling of torn input."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import msgpack
import pytest

from pylmq.core.message import DeadLetter, MessageExt, State, StoredMessage, StoredMessageType, make_item
from pylmq.store.check import check_buffer
from pylmq.store.journal import (
    MAGIC,
    MAGIC_V1,
    AppendRecord,
    DedupRecord,
    DefaultsRecord,
    DeleteRecord,
    DropRecord,
    Encoder,
    Frame,
    JournalFormatError,
    JournalReader,
    MoveRecord,
    PutRecord,
    QueueRecord,
    SnapshotEnd,
    TransferRecord,
    VirtualRecord,
    scan,
)

U1, U2 = bytes(range(16)), bytes(range(16, 32))


def read_all(data: bytes) -> tuple[list[object], JournalReader]:
    r = JournalReader()
    return list(r.feed(data)), r


def test_delete_frame_is_length_crc_kind_then_msgpack_fields() -> None:
    frame = Encoder().delete("q", U1)
    payload = b"\x92\xa1q\xc4\x10" + U1  # msgpack ["q", bin(16)]
    expected = struct.pack("<II", len(payload) + 1, zlib.crc32(b"\x07" + payload)) + b"\x07" + payload
    assert frame == expected


def test_every_record_kind_reads_back_as_written() -> None:
    enc = Encoder()
    normal = StoredMessage((12.5, U1), State.AVAILABLE, StoredMessageType.NORMAL, 3, make_item(b"body", "text/plain"))
    compound = StoredMessage(
        (13.0, U2), State.ACCUM, StoredMessageType.COMPOUND, None, [make_item(b"a"), make_item(b"b", "x/y")]
    )
    moved = StoredMessage((40.25, U2), State.PROCESSING, StoredMessageType.NORMAL, 2, ((), b""))
    data = MAGIC + b"".join(
        [
            enc.queue("q", {"accum": 0.5, "retry": None, "timeout": 30.0}),
            enc.defaults([("^a", {"retry": 1}), ("b$", {})]),
            enc.put("q", normal),
            enc.put("q", compound),
            enc.move("q", U1, moved),
            enc.append("q", U2, make_item(b"c")),
            enc.delete("q", U1),
            enc.drop("q"),
        ]
    )
    records, r = read_all(data)
    assert records == [
        QueueRecord("q", {"accum": 0.5, "retry": None, "timeout": 30.0}),
        DefaultsRecord([("^a", {"retry": 1}), ("b$", {})]),
        PutRecord("q", normal),
        PutRecord("q", compound),
        MoveRecord("q", U1, 40.25, U2, State.PROCESSING, 2),
        AppendRecord("q", U2, make_item(b"c")),
        DeleteRecord("q", U1),
        DropRecord("q"),
    ]
    assert (r.offset, r.torn) == (len(data), False)


def test_compound_content_reads_back_as_a_list_of_items() -> None:
    msg = StoredMessage((1.0, U1), State.ACCUM, StoredMessageType.COMPOUND, 1, [make_item(b"a")])
    (rec,), _ = read_all(MAGIC + Encoder().put("q", msg))
    assert isinstance(rec, PutRecord) and rec.message.content == [((), b"a")]


def test_feeding_one_byte_at_a_time_gives_the_same_records() -> None:
    enc = Encoder()
    data = MAGIC + enc.queue("q", {}) + enc.delete("q", U1) + enc.append("q", U2, make_item(b"x" * 300))
    whole, _ = read_all(data)
    r = JournalReader()
    pieces = [rec for i in range(len(data)) for rec in r.feed(data[i : i + 1])]
    assert pieces == whole and r.offset == len(data)


def test_short_last_frame_stops_at_the_previous_frame_end() -> None:
    enc = Encoder()
    good = MAGIC + enc.delete("q", U1)
    records, r = read_all(good + enc.delete("q", U2)[:-3])
    assert records == [DeleteRecord("q", U1)]
    assert r.offset == len(good)


def test_checksum_mismatch_marks_the_tail_torn_and_ignores_the_rest() -> None:
    enc = Encoder()
    good = MAGIC + enc.delete("q", U1)
    bad = bytearray(enc.delete("q", U2))
    bad[-1] ^= 0xFF
    records, r = read_all(good + bytes(bad) + enc.delete("q", U1))
    assert records == [DeleteRecord("q", U1)]
    assert (r.offset, r.torn) == (len(good), True)
    assert r.feed(enc.delete("q", U1)) == []


def test_zero_filled_tail_is_torn_not_an_empty_record() -> None:
    good = MAGIC + Encoder().delete("q", U1)
    records, r = read_all(good + bytes(64))
    assert len(records) == 1 and r.torn and r.offset == len(good)


def test_file_without_the_signature_is_refused() -> None:
    with pytest.raises(JournalFormatError, match="signature"):
        JournalReader().feed(b"NOTAJOURNAL" + bytes(8))


def test_whole_frame_of_unknown_kind_is_refused_not_dropped() -> None:
    payload = b"\x90"
    frame = struct.pack("<IIB", 2, zlib.crc32(b"\x63" + payload), 0x63) + payload
    with pytest.raises(JournalFormatError, match="unknown record kind 99"):
        JournalReader().feed(MAGIC + frame)


def test_whole_frame_with_wrong_fields_is_refused_not_dropped() -> None:
    payload = b"\x91\xa1q"  # a delete record needs two fields
    frame = struct.pack("<IIB", 4, zlib.crc32(b"\x07" + payload), 7) + payload
    with pytest.raises(JournalFormatError, match="unreadable record of kind 7"):
        JournalReader().feed(MAGIC + frame)


# -- format 2: records with a MessageExt, transfers, virtual queues ---------------------------------

EXT = MessageExt(
    expires=2_000_000_000.5,
    interval=7.25,
    priority=255,
    once=True,
    attempts=3,
    first_at=1_000.125,
    last_at=1_010.5,
    sent_at=999.0,
    dead=DeadLetter("origin", 4, 1_009.75, "expired"),
)


def test_a_record_without_ext_is_written_as_format_1_wrote_it() -> None:
    msg = StoredMessage((12.5, U1), State.PROCESSING, StoredMessageType.NORMAL, None, make_item(b"body", "text/plain"))
    payload = msgpack.packb(("q", 12.5, U1, 1, 0, None, msg.content), use_bin_type=True)
    assert (
        Encoder().put("q", msg)
        == struct.pack("<II", len(payload) + 1, zlib.crc32(b"\x04" + payload)) + b"\x04" + payload
    )
    payload = msgpack.packb(("q", U2, 12.5, U1, 1, None), use_bin_type=True)
    assert (
        Encoder().move("q", U2, msg)
        == struct.pack("<II", len(payload) + 1, zlib.crc32(b"\x05" + payload)) + b"\x05" + payload
    )


@pytest.mark.parametrize(
    "ext",
    [
        EXT,
        MessageExt(),
        MessageExt(dead=DeadLetter("dlq-origin", 0, None, "retries")),
        MessageExt(sent_at=5.0, attempts=1, first_at=6.0, last_at=6.0),
        MessageExt(expires=70.0, sent_at=10.0, hard=True),
        MessageExt(sent_at=10.0, group="g-1", seq=2**40),
        MessageExt(expires=70.0, hard=True, group="", seq=0),
    ],
    ids=["every-field", "defaults", "dead-letter-never-delivered", "delivery-counts", "hard-expiry", "group", "all"],
)
def test_ext_records_read_back_with_every_field(ext: MessageExt) -> None:
    enc = Encoder()
    normal = StoredMessage((12.5, U1), State.AVAILABLE, StoredMessageType.NORMAL, 3, make_item(b"b", "x/y"), ext)
    compound = StoredMessage((13.0, U2), State.PROCESSING, StoredMessageType.COMPOUND, None, [make_item(b"a")], ext)
    moved = StoredMessage((40.25, U2), State.PROCESSING, StoredMessageType.NORMAL, 2, ((), b""), ext)
    data = (
        MAGIC
        + enc.put("q", normal)
        + enc.put("q", compound)
        + enc.move("q", U1, moved)
        + enc.transfer("q", U1, "dlq", moved)
    )
    records, r = read_all(data)
    assert records == [
        PutRecord("q", normal),
        PutRecord("q", compound),
        MoveRecord("q", U1, 40.25, U2, State.PROCESSING, 2, ext),
        TransferRecord("q", U1, "dlq", 40.25, U2, State.PROCESSING, 2, ext),
    ]
    assert (r.offset, r.torn, r.version) == (len(data), False, 2)


def test_a_transfer_without_ext_and_virtual_queues_read_back() -> None:
    enc = Encoder()
    msg = StoredMessage((1.5, U2), State.AVAILABLE, StoredMessageType.NORMAL, None, ((), b"ignored"))
    data = MAGIC + enc.transfer("dlq", U1, "q", msg) + enc.virtual("v", ["a", "b"]) + enc.virtual("v", [])
    records, _ = read_all(data)
    assert records == [
        TransferRecord("dlq", U1, "q", 1.5, U2, State.AVAILABLE, None, None),
        VirtualRecord("v", ["a", "b"]),
        VirtualRecord("v", []),
    ]
    assert b"ignored" not in data  # the content goes with the record: replay takes it from the source


def test_an_ext_costs_a_byte_per_default_field() -> None:
    msg = StoredMessage((12.5, U1), State.AVAILABLE, StoredMessageType.NORMAL, 3, make_item(b"body"))
    plain = Encoder().put("q", msg)
    with_ext = Encoder().put("q", StoredMessage(msg.id, msg.state, msg.type, msg.retry, msg.content, MessageExt()))
    assert with_ext[8] == 10 and plain[8] == 4
    assert len(with_ext) - len(plain) == 10  # a 9-element array of nil, 0 and false
    timed = MessageExt(sent_at=1.0)
    with_time = Encoder().put("q", StoredMessage(msg.id, msg.state, msg.type, msg.retry, msg.content, timed))
    assert len(with_time) - len(with_ext) == 8  # a float64 instead of nil


def test_an_ext_frame_without_the_hard_field_reads_as_before_and_hard_adds_one_byte() -> None:
    """Frames written before ``hard`` existed hold 9 fields: they still read, as not hard."""
    ext = MessageExt(expires=70.0, sent_at=10.0)
    fields = (70.0, None, 0, False, 0, None, None, 10.0, None)
    payload = msgpack.packb(("q", 12.5, U1, 0, 0, 3, [[], b"b"], fields), use_bin_type=True)
    old = struct.pack("<II", len(payload) + 1, zlib.crc32(b"\x0a" + payload)) + b"\x0a" + payload
    msg = StoredMessage((12.5, U1), State.AVAILABLE, StoredMessageType.NORMAL, 3, ((), b"b"), ext)
    assert Encoder().put("q", msg) == old  # not hard: byte for byte what was written before
    records, _ = read_all(MAGIC + old)
    assert records == [PutRecord("q", msg)]
    hard = StoredMessage(msg.id, msg.state, msg.type, msg.retry, msg.content, MessageExt(70.0, sent_at=10.0, hard=True))
    assert len(Encoder().put("q", hard)) == len(old) + 1


@pytest.mark.parametrize(
    "more",
    [(1,), (False, 3, 1), (False, "g", "1"), (False, "g"), (False, "g", 1, 2)],
    ids=["hard-not-bool", "group-not-text", "seq-not-int", "11-fields", "13-fields"],
)
def test_an_ext_whose_later_fields_are_wrong_is_refused(more: tuple[object, ...]) -> None:
    fields = (70.0, None, 0, False, 0, None, None, 10.0, None, *more)
    payload = msgpack.packb(("q", 12.5, U1, 0, 0, 3, [[], b"b"], fields), use_bin_type=True)
    frame = struct.pack("<II", len(payload) + 1, zlib.crc32(b"\x0a" + payload)) + b"\x0a" + payload
    with pytest.raises(JournalFormatError, match="unreadable record of kind 10"):
        JournalReader().feed(MAGIC + frame)


def test_a_snapshot_holds_virtual_queues_and_ext_records() -> None:
    msg = StoredMessage((12.5, U1), State.AVAILABLE, StoredMessageType.NORMAL, 3, make_item(b"b"), EXT)
    data = MAGIC + b"".join(Encoder().state([("q", {}, [msg])], [], {"v": ["q", "r"]}))
    records, r = read_all(data)
    assert records[2:5] == [VirtualRecord("v", ["q", "r"]), QueueRecord("q", {}), PutRecord("q", msg)]
    assert r.snapshot_at is None


def test_a_format_1_segment_reads_as_before() -> None:
    enc = Encoder()
    msg = StoredMessage((12.5, U1), State.AVAILABLE, StoredMessageType.NORMAL, 3, make_item(b"body"))
    frames = enc.queue("q", {"retry": 1}) + enc.put("q", msg) + enc.delete("q", U1)
    records, r = read_all(MAGIC_V1 + frames)
    assert records == [QueueRecord("q", {"retry": 1}), PutRecord("q", msg), DeleteRecord("q", U1)]
    assert (r.version, r.offset) == (1, len(MAGIC_V1 + frames))
    assert [f.record for f in scan(MAGIC_V1 + frames) if isinstance(f, Frame)] == records


def test_a_dedup_record_round_trips_in_a_frame_and_a_snapshot_and_scans_after_damage() -> None:
    enc = Encoder()
    frame = enc.dedup("q.fifo", "g\nid-1", 1234.5, "m-1", "00000000000000000042")
    assert frame[8] == 14
    want = DedupRecord("q.fifo", "g\nid-1", 1234.5, "m-1", "00000000000000000042")
    assert read_all(MAGIC + frame)[0] == [want]
    snapshot = MAGIC + b"".join(
        Encoder().state([("q.fifo", {}, [])], [], {}, {"q.fifo": {"g\nid-1": (1234.5, "m-1", "00000000000000000042")}})
    )
    records, r = read_all(snapshot)
    assert records[-2:] == [want, SnapshotEnd()] and r.snapshot_at is None
    # Garbage before it: the scan resynchronises on the new kind as on the others.
    found = list(scan(MAGIC + b"\x07" * 13 + frame + enc.drop("q.fifo")))
    assert [type(f).__name__ for f in found] == ["Damage", "Frame", "Frame"]
    assert isinstance(found[1], Frame) and found[1].record == want


def test_a_dedup_record_with_malformed_fields_is_damage_not_a_crash() -> None:
    bad = Encoder()._frame(14, ("q", "k", "not a time", "m", "1"))
    with pytest.raises(JournalFormatError, match="unreadable record of kind 14"):
        JournalReader().feed(MAGIC + bad)
    assert [type(f).__name__ for f in scan(MAGIC + bad)] == ["Damage"]


@pytest.mark.parametrize("kind", ["put-ext", "transfer", "virtual", "dedup"])
def test_a_format_2_record_in_a_format_1_segment_is_refused_not_read(kind: str) -> None:
    enc = Encoder()
    msg = StoredMessage((12.5, U1), State.AVAILABLE, StoredMessageType.NORMAL, 3, make_item(b"body"), EXT)
    frame = {
        "put-ext": enc.put("q", msg),
        "transfer": enc.transfer("q", U2, "d", msg),
        "virtual": enc.virtual("v", ["q"]),
        "dedup": enc.dedup("q", "k", 1.0, "m", "1"),
    }[kind]
    with pytest.raises(JournalFormatError, match="is not in format 1"):
        JournalReader().feed(MAGIC_V1 + enc.drop("q") + frame)
    # The checker calls it damage, with records after it: never cut as a torn tail.
    report = check_buffer(MAGIC_V1 + frame + enc.drop("q"), Path("journal-00000001.log"), last=True)
    assert [d.reason for d in report.damages] == [f"record kind {frame[8]} is not in format 1"]
    assert report.problems


def test_a_segment_of_a_newer_format_is_refused_whole_not_judged_damaged() -> None:
    """What a format-1 pylmq does with a format-2 segment, one version on: its frames are not
    this reader's to cut."""
    newer = MAGIC[:-1] + bytes([MAGIC[-1] + 1]) + Encoder().drop("q") + bytes([0xEE]) * 40
    with pytest.raises(JournalFormatError, match="signature or version"):
        JournalReader().feed(newer)
    with pytest.raises(JournalFormatError, match="version 3 is not 1 or 2"):
        list(scan(newer))
    report = check_buffer(newer, Path("journal-00000001.log"), last=True)
    assert report.foreign and not report.damages and report.problems


@pytest.mark.parametrize(
    "ext_fields",
    [
        (None,) * 8,  # one field short
        (None, None, 0, 1, 0, None, None, None, None),  # once is not a boolean
        (None, None, 0, False, 0, "t", None, None, None),  # a time that is text
        (None, None, 0, False, 0, None, None, None, ("o", 1, None, 7)),  # an unknown reason
    ],
)
def test_a_whole_frame_with_a_bad_ext_is_refused_not_dropped(ext_fields: tuple[object, ...]) -> None:
    payload = msgpack.packb(("q", 1.0, U1, 0, 0, 1, ((), b"x"), ext_fields), use_bin_type=True)
    frame = struct.pack("<IIB", len(payload) + 1, zlib.crc32(b"\x0a" + payload), 10) + payload
    with pytest.raises(JournalFormatError, match="unreadable record of kind 10"):
        JournalReader().feed(MAGIC + frame)
