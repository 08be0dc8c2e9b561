"""The journal's record format, byte for byte, and the reader's handling of torn input."""

from __future__ import annotations

import struct
import zlib

import pytest

from pylmq.core.message import State, StoredMessage, StoredMessageType, make_item
from pylmq.store.journal import (
    MAGIC,
    AppendRecord,
    DefaultsRecord,
    DeleteRecord,
    DropRecord,
    Encoder,
    JournalFormatError,
    JournalReader,
    MoveRecord,
    PutRecord,
    QueueRecord,
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
