"""The durable store's record format, without I/O (encode to bytes, decode from bytes).

A journal segment file is ``MAGIC`` followed by frames. A frame is::

    u32 length | u32 crc32 | u8 kind | payload (msgpack array)

little-endian; ``length`` counts ``kind`` and ``payload``; ``crc32`` covers the same bytes. A
crash in the middle of a write leaves a frame that is short or fails its checksum: the reader
stops there and reports where the last whole frame ended, so the store can cut the torn tail
and keep everything before it. A frame whose checksum holds but whose content cannot be read is
not a torn write; the reader raises :class:`JournalFormatError` rather than drop data.

Records mirror :class:`~pylmq.core.table.Journal` (``put``, ``move``, ``append``, ``delete``,
``transfer``) plus the metadata (``queue`` create/props, ``drop``, ``defaults``, ``virtual``). A segment written by
compaction starts with the live state as ``queue``, ``defaults`` and ``put`` records between a
``snapshot-begin`` and a ``snapshot-end`` marker, so one segment alone always holds the whole
state, and a reader can tell a snapshot cut short (never a crash: compaction renames a segment
into place only once it is whole and synced) from a torn tail.

Damage: :func:`scan` walks a whole segment and reports each region where no valid frame starts
as a :class:`Damage`, then resynchronises on the next valid frame (a header whose length fits,
whose kind is known, whose CRC-32 holds and whose payload decodes). It first tries the end the
damaged frame's own header claims (a flipped payload byte leaves the length intact), and only
then searches byte by byte, so a damaged frame's payload is not mistaken for frames of its own.

Versions (docs/decisions/journal-v2.md). Format 1 has the kinds 1-9; format 2 adds records that
carry a :class:`~pylmq.core.message.MessageExt` (``put-ext``, ``move-ext``), ``transfer`` (a
record moved to another queue in one frame: a dead letter, a requeue) and ``virtual`` (a virtual
queue bound or removed), and ``dedup`` (an SQS FIFO send's deduplication id, replayed into
the store's map while inside SQS's window). Format 1's frames are byte for byte the same in format 2, and a record
without an ext is still written as one. The signature's last byte is the version: this reader
takes both, writes only format 2, and refuses a format-2 kind in a format-1 segment; a pylmq that
knows only format 1 refuses a format-2 segment whole (its signature) instead of judging the new
frames damage and cutting them.
"""

from __future__ import annotations

import mmap
import re
import struct
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import msgpack

from pylmq.core.message import DeadLetter, Item, MessageExt, Metadata, State, StoredMessage, StoredMessageType
from pylmq.core.props import DefaultList, RawProps

__all__ = [
    "MAGIC",
    "MAGIC_V1",
    "SEGMENT_NAME",
    "SNAPSHOT_BEGIN_FRAME",
    "VERSION",
    "AppendRecord",
    "Buffer",
    "Damage",
    "DedupRecord",
    "DefaultsRecord",
    "DeleteRecord",
    "DropRecord",
    "Encoder",
    "Frame",
    "JournalFormatError",
    "JournalReader",
    "MoveRecord",
    "PutRecord",
    "QueueRecord",
    "Record",
    "SnapshotBegin",
    "SnapshotEnd",
    "TransferRecord",
    "VirtualRecord",
    "damage_at",
    "scan",
    "segment_version",
]

VERSION = 2
MAGIC = b"PYLMQJ\x00\x02"
"""File signature and format version (the last byte): what this version writes."""
MAGIC_V1 = b"PYLMQJ\x00\x01"
"""The signature of format 1, still read (a journal of an earlier pylmq); never written."""
_MAGICS = {MAGIC_V1: 1, MAGIC: 2}

HEADER = struct.Struct("<IIB")
MAX_FRAME = 1 << 31
SEGMENT_NAME = re.compile(r"^journal-(\d{8})\.log$")
"""A segment's file name in the data directory; the highest number is the current segment."""

K_QUEUE, K_DROP, K_DEFAULTS, K_PUT, K_MOVE, K_APPEND, K_DELETE = 1, 2, 3, 4, 5, 6, 7
K_SNAPSHOT_BEGIN, K_SNAPSHOT_END = 8, 9
K_PUT_EXT, K_MOVE_EXT, K_TRANSFER, K_VIRTUAL, K_DEDUP = 10, 11, 12, 13, 14  # format 2
_LAST_KIND = {1: K_SNAPSHOT_END, 2: K_DEDUP}
"""The highest record kind of each format version."""

_STATE_CODE = {State.AVAILABLE: 0, State.PROCESSING: 1, State.ACCUM: 2}
_CODE_STATE = {v: k for k, v in _STATE_CODE.items()}
_TYPE_CODE = {StoredMessageType.NORMAL: 0, StoredMessageType.COMPOUND: 1}
_CODE_TYPE = {v: k for k, v in _TYPE_CODE.items()}
# crc32 of the kind byte, so a frame's checksum chains over the payload without concatenating.
_KIND_CRC = {k: zlib.crc32(bytes([k])) for k in range(1, K_DEDUP + 1)}
_PUT_CRC, _MOVE_CRC, _DELETE_CRC = _KIND_CRC[K_PUT], _KIND_CRC[K_MOVE], _KIND_CRC[K_DELETE]
_DEAD_REASON = {"retries": 0, "expired": 1}
_REASON_OF = ("retries", "expired")
_header = HEADER.pack
_crc32 = zlib.crc32
_AVAILABLE, _PROCESSING, _NORMAL = State.AVAILABLE, State.PROCESSING, StoredMessageType.NORMAL


class JournalFormatError(Exception):
    """A whole frame (checksum valid) that this version cannot read: never silently dropped."""


class QueueRecord(NamedTuple):
    """The queue exists with these own properties (create, or properties replaced)."""

    queue: str
    props: RawProps


class DropRecord(NamedTuple):
    queue: str


class DefaultsRecord(NamedTuple):
    defaults: DefaultList


class PutRecord(NamedTuple):
    queue: str
    message: StoredMessage


class MoveRecord(NamedTuple):
    """``old_uuid``'s record takes a new id, state, retry and ext; type and content stay. A
    move writes the new record's whole ext (None: it has none, format 1's move)."""

    queue: str
    old_uuid: bytes
    ts: float
    uuid: bytes
    state: State
    retry: int | None
    ext: MessageExt | None = None


class TransferRecord(NamedTuple):
    """``uuid``'s record leaves ``from_queue`` and joins ``to_queue`` as a new record (id, state,
    retry, ext given); type and content go with it, as in a move. One frame, so replay sees the
    move whole or not at all."""

    from_queue: str
    uuid: bytes
    to_queue: str
    ts: float
    new_uuid: bytes
    state: State
    retry: int | None
    ext: MessageExt | None


class VirtualRecord(NamedTuple):
    """The virtual queue ``name`` is bound to ``queues``; an empty list removes it."""

    name: str
    queues: list[str]


class DedupRecord(NamedTuple):
    """A FIFO send's deduplication key (SQS): who sent it when, answered with which MessageId
    and SequenceNumber; kept so that a resend within the window after a restart dedups."""

    queue: str
    key: str
    sent: float
    message_id: str
    sequence: str


class AppendRecord(NamedTuple):
    queue: str
    uuid: bytes
    item: Item


class DeleteRecord(NamedTuple):
    queue: str
    uuid: bytes


class SnapshotBegin(NamedTuple):
    """The frames up to :class:`SnapshotEnd` are a compaction's frozen state."""


class SnapshotEnd(NamedTuple):
    pass


Record = (
    QueueRecord
    | DropRecord
    | DefaultsRecord
    | PutRecord
    | MoveRecord
    | AppendRecord
    | DeleteRecord
    | SnapshotBegin
    | SnapshotEnd
    | TransferRecord
    | VirtualRecord
    | DedupRecord
)


def _ext_fields(ext: MessageExt | None) -> tuple[Any, ...] | None:
    """A MessageExt as a fixed array: a field left at its default costs one byte (nil, 0 or
    false), a time nine."""
    if ext is None:
        return None
    d = ext.dead
    dead = None if d is None else (d.origin, d.failures, d.last_at, _DEAD_REASON[d.reason])
    fields = (
        ext.expires,
        ext.interval,
        ext.priority,
        ext.once,
        ext.attempts,
        ext.first_at,
        ext.last_at,
        ext.sent_at,
        dead,
    )
    # The fields after the ninth only when set: frames without them (written before they
    # existed) stay valid, and records without them cost nothing more.
    if ext.group is not None:
        return (*fields, ext.hard, ext.group, ext.seq)
    return (*fields, True) if ext.hard else fields


def _time(x: Any) -> float | None:
    if x is None:
        return None
    if type(x) is bool or not isinstance(x, (int, float)):
        raise ValueError(f"a time, not {x!r}")
    return float(x)


def _sent(x: Any) -> float:
    t = _time(x)
    if t is None:
        raise ValueError("a deduplication record has no time")
    return t


def _int(x: Any) -> int:
    if type(x) is not int:
        raise ValueError(f"an integer, not {x!r}")
    return x


def _ext(f: Any) -> MessageExt | None:
    if f is None:
        return None
    expires, interval, priority, once, attempts, first_at, last_at, sent_at, dead, *more = f
    hard: Any = False
    group: Any = None
    seq: Any = 0
    if len(more) == 1:
        (hard,) = more
    elif len(more) == 3:
        hard, group, seq = more
    elif more:
        raise ValueError(f"an ext has 9, 10 or 12 fields, not {9 + len(more)}")
    if type(once) is not bool or type(hard) is not bool:
        raise ValueError(f"once and hard are booleans (hard optional), not {once!r}, {more!r}")
    if group is not None and (type(group) is not str or type(seq) is not int):
        raise ValueError(f"a group is text and its seq an integer, not {more!r}")
    letter = None
    if dead is not None:
        origin, failures, dead_last, reason = dead
        if type(origin) is not str:
            raise ValueError(f"a dead letter's origin is a queue name, not {origin!r}")
        letter = DeadLetter(origin, _int(failures), _time(dead_last), _REASON_OF[_int(reason)])  # type: ignore[arg-type]
    return MessageExt(
        _time(expires),
        _time(interval),
        _int(priority),
        once,
        _int(attempts),
        _time(first_at),
        _time(last_at),
        _time(sent_at),
        letter,
        hard,
        group,
        seq,
    )


class Encoder:
    """Frames records. Holds a msgpack packer, so use one encoder per thread."""

    __slots__ = ("_pack",)

    def __init__(self) -> None:
        self._pack = msgpack.Packer(use_bin_type=True).pack

    def _frame(self, kind: int, fields: tuple[Any, ...]) -> bytes:
        payload: bytes = self._pack(fields)
        return HEADER.pack(len(payload) + 1, zlib.crc32(payload, _KIND_CRC[kind]), kind) + payload

    def queue(self, name: str, props: RawProps) -> bytes:
        return self._frame(K_QUEUE, (name, props))

    def drop(self, name: str) -> bytes:
        return self._frame(K_DROP, (name,))

    def defaults(self, defaults: DefaultList) -> bytes:
        return self._frame(K_DEFAULTS, (defaults,))

    # put, move and delete are a push, pull and ack: framed inline, with the codes of
    # _STATE_CODE and _TYPE_CODE found by identity (an Enum's hash runs Python code).

    def put(self, queue: str, msg: StoredMessage) -> bytes:
        ts, uuid = msg.id
        if msg.ext is not None:
            return self._frame(
                K_PUT_EXT,
                (
                    queue,
                    ts,
                    uuid,
                    _STATE_CODE[msg.state],
                    _TYPE_CODE[msg.type],
                    msg.retry,
                    msg.content,
                    _ext_fields(msg.ext),
                ),
            )
        st = msg.state
        state = 0 if st is _AVAILABLE else 1 if st is _PROCESSING else 2
        payload: bytes = self._pack((queue, ts, uuid, state, 0 if msg.type is _NORMAL else 1, msg.retry, msg.content))
        return _header(len(payload) + 1, _crc32(payload, _PUT_CRC), K_PUT) + payload

    def move(self, queue: str, old_uuid: bytes, msg: StoredMessage) -> bytes:
        ts, uuid = msg.id
        if msg.ext is not None:
            fields = (queue, old_uuid, ts, uuid, _STATE_CODE[msg.state], msg.retry, _ext_fields(msg.ext))
            return self._frame(K_MOVE_EXT, fields)
        st = msg.state
        state = 0 if st is _AVAILABLE else 1 if st is _PROCESSING else 2
        payload: bytes = self._pack((queue, old_uuid, ts, uuid, state, msg.retry))
        return _header(len(payload) + 1, _crc32(payload, _MOVE_CRC), K_MOVE) + payload

    def append(self, queue: str, uuid: bytes, item: Item) -> bytes:
        return self._frame(K_APPEND, (queue, uuid, item))

    def transfer(self, from_queue: str, uuid: bytes, to_queue: str, msg: StoredMessage) -> bytes:
        """``uuid`` leaves ``from_queue`` and becomes ``msg`` in ``to_queue``; ``msg``'s type
        and content are not written: they are the old record's (replay takes them from it)."""
        ts, new_uuid = msg.id
        fields = (from_queue, uuid, to_queue, ts, new_uuid, _STATE_CODE[msg.state], msg.retry, _ext_fields(msg.ext))
        return self._frame(K_TRANSFER, fields)

    def virtual(self, name: str, queues: Iterable[str]) -> bytes:
        return self._frame(K_VIRTUAL, (name, list(queues)))

    def dedup(self, queue: str, key: str, sent: float, message_id: str, sequence: str) -> bytes:
        return self._frame(K_DEDUP, (queue, key, sent, message_id, sequence))

    def delete(self, queue: str, uuid: bytes) -> bytes:
        payload: bytes = self._pack((queue, uuid))
        return _header(len(payload) + 1, _crc32(payload, _DELETE_CRC), K_DELETE) + payload

    def state(
        self,
        queues: Iterable[tuple[str, RawProps, Iterable[StoredMessage]]],
        defaults: DefaultList,
        virtual: Mapping[str, Sequence[str]] | None = None,
        dedup: Mapping[str, Mapping[str, tuple[float, str, str]]] | None = None,
    ) -> Iterable[bytes]:
        """The frames of a whole state (a compaction snapshot), queue by queue, between the
        snapshot markers."""
        yield self._frame(K_SNAPSHOT_BEGIN, ())
        yield self.defaults(defaults)
        for name, members in (virtual or {}).items():
            yield self.virtual(name, members)
        for name, props, messages in queues:
            yield self.queue(name, props)
            for msg in messages:
                yield self.put(name, msg)
        for name, ids in (dedup or {}).items():
            for key, (sent, message_id, sequence) in ids.items():
                yield self.dedup(name, key, sent, message_id, sequence)
        yield self._frame(K_SNAPSHOT_END, ())


SNAPSHOT_BEGIN_FRAME = Encoder()._frame(K_SNAPSHOT_BEGIN, ())
"""The first frame of every segment that compaction writes (always the same bytes)."""


# Identical metadata is shared by many records; decoding would otherwise allocate it per record.
_md_cache: dict[Metadata, Metadata] = {}


def _metadata(md: Metadata) -> Metadata:
    shared = _md_cache.get(md)
    if shared is None:
        shared = md
        if len(_md_cache) < 1024:
            _md_cache[md] = md
    return shared


def _item(raw: Any) -> Item:
    md, body = raw
    return (_metadata(md), body)


def _decode(kind: int, f: Any) -> Record:
    if kind == K_PUT:
        queue, ts, uuid, state, type_code, retry, content = f
        mtype = _CODE_TYPE[type_code]
        content = [_item(i) for i in content] if mtype is StoredMessageType.COMPOUND else _item(content)
        return PutRecord(queue, StoredMessage((float(ts), uuid), _CODE_STATE[state], mtype, retry, content))
    if kind == K_MOVE:
        queue, old_uuid, ts, uuid, state, retry = f
        return MoveRecord(queue, old_uuid, float(ts), uuid, _CODE_STATE[state], retry)
    if kind == K_DELETE:
        return DeleteRecord(*f)
    if kind == K_APPEND:
        queue, uuid, raw = f
        return AppendRecord(queue, uuid, _item(raw))
    if kind == K_QUEUE:
        name, props = f
        return QueueRecord(name, dict(props))
    if kind == K_DROP:
        return DropRecord(f[0])
    if kind == K_DEFAULTS:
        return DefaultsRecord([(regex, dict(props)) for regex, props in f[0]])
    if kind == K_PUT_EXT:
        queue, ts, uuid, state, type_code, retry, content, ext = f
        mtype = _CODE_TYPE[type_code]
        content = [_item(i) for i in content] if mtype is StoredMessageType.COMPOUND else _item(content)
        return PutRecord(queue, StoredMessage((float(ts), uuid), _CODE_STATE[state], mtype, retry, content, _ext(ext)))
    if kind == K_MOVE_EXT:
        queue, old_uuid, ts, uuid, state, retry, ext = f
        return MoveRecord(queue, old_uuid, float(ts), uuid, _CODE_STATE[state], retry, _ext(ext))
    if kind == K_TRANSFER:
        from_queue, uuid, to_queue, ts, new_uuid, state, retry, ext = f
        return TransferRecord(from_queue, uuid, to_queue, float(ts), new_uuid, _CODE_STATE[state], retry, _ext(ext))
    if kind == K_VIRTUAL:
        name, queues = f
        if not all(type(q) is str for q in queues):
            raise ValueError(f"virtual queue members are names, not {queues!r}")
        return VirtualRecord(name, list(queues))
    if kind == K_DEDUP:
        queue, key, sent, message_id, sequence = f
        texts = (queue, key, message_id, sequence)
        if not all(isinstance(t, str) for t in texts):
            raise ValueError(f"a deduplication record's names and numbers are text, not {texts!r}")
        return DedupRecord(queue, key, _sent(sent), message_id, sequence)
    if kind == K_SNAPSHOT_BEGIN and f == ():
        return SnapshotBegin()
    if kind == K_SNAPSHOT_END and f == ():
        return SnapshotEnd()
    raise JournalFormatError(f"unknown record kind {kind}")


class JournalReader:
    """Feed a segment's bytes in any chunks; get whole records back.

    ``offset`` is where the last whole frame ends (the length to keep); ``torn`` says that
    input after it was short or failed its checksum, and the reader ignores further input.
    Whether that is a torn tail or damage with valid frames after it, only a look at the rest
    of the file tells (:func:`damage_at`). ``snapshot_at`` is the offset of a snapshot's
    begin marker while its end marker has not been read yet, else None.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0  # into _buf
        self.offset = 0  # into the file
        self.torn = False
        self.snapshot_at: int | None = None
        self.version = 0  # the segment's format version, once its signature is read
        self._last_kind = 0

    def feed(self, data: bytes) -> list[Record]:
        if self.torn:
            return []
        self._buf += data
        out: list[Record] = []
        if not self.version:
            if len(self._buf) < len(MAGIC):
                return out
            version = _MAGICS.get(bytes(self._buf[: len(MAGIC)]), 0)
            if not version:
                raise JournalFormatError("not a pylmq journal segment (bad signature or version)")
            self.version, self._last_kind = version, _LAST_KIND[version]
            self._pos = self.offset = len(MAGIC)
        buf, pos, end = self._buf, self._pos, len(self._buf)
        hsize, last = HEADER.size, self._last_kind
        while end - pos >= hsize:
            length, crc, kind = HEADER.unpack_from(buf, pos)
            if length == 0 or length > MAX_FRAME:
                self.torn = True
                break
            if end - pos < 8 + length:
                break
            payload = bytes(buf[pos + hsize : pos + 8 + length])
            if zlib.crc32(payload, zlib.crc32(bytes([kind]))) != crc:
                self.torn = True
                break
            if last < kind <= K_DEDUP:
                raise JournalFormatError(f"record kind {kind} at offset {self.offset} is not in format {self.version}")
            try:
                fields = msgpack.unpackb(payload, raw=False, use_list=False, strict_map_key=False)
                out.append(_decode(kind, fields))
            except JournalFormatError:
                raise
            except Exception as e:
                raise JournalFormatError(f"unreadable record of kind {kind} at offset {self.offset}: {e!r}") from e
            if K_SNAPSHOT_BEGIN <= kind <= K_SNAPSHOT_END:
                self.snapshot_at = self.offset if kind == K_SNAPSHOT_BEGIN else None
            pos += 8 + length
            self.offset += 8 + length
        # Drop consumed bytes now and then, not per frame (that would make feeding quadratic).
        if pos > 1 << 20 or pos == end:
            del buf[:pos]
            pos = 0
        self._pos = pos
        return out


# -- damage: finding it and resynchronising after it ------------------------------------------------

Buffer = bytes | bytearray | memoryview | mmap.mmap
"""A whole segment's bytes."""


class Frame(NamedTuple):
    """A valid frame: bytes ``[offset, end)`` of the segment."""

    offset: int
    end: int
    record: Record


class Damage(NamedTuple):
    """Bytes ``[offset, end)`` hold no valid frame; ``end`` is the next valid frame or the end
    of the segment. ``reason`` says what was wrong at ``offset``."""

    offset: int
    end: int
    reason: str


# How many fields each kind's payload array has (all fit msgpack's one-byte fixarray header).
_FIELDS = {K_QUEUE: 2, K_DROP: 1, K_DEFAULTS: 1, K_PUT: 7, K_MOVE: 6, K_APPEND: 3, K_DELETE: 2}
_FIELDS |= {K_SNAPSHOT_BEGIN: 0, K_SNAPSHOT_END: 0, K_PUT_EXT: 8, K_MOVE_EXT: 7, K_TRANSFER: 8, K_VIRTUAL: 2}
_FIELDS[K_DEDUP] = 5
# A frame can only start where the byte after its length and CRC is a known kind and the next
# one the array header of that kind's payload: the regex engine finds those positions in C
# (about 1 in 7,000 positions of random bytes), so only they cost a checksum.
_CANDIDATE = re.compile(
    b"(?=[\\x00-\\xff]{8}(?:" + b"|".join(re.escape(bytes([k, 0x90 + n])) for k, n in _FIELDS.items()) + b"))"
)


def segment_version(buf: Buffer) -> int:
    """The format version a segment's signature names (0: no signature of ours)."""
    return _MAGICS.get(bytes(buf[: len(MAGIC)]), 0)


def frame_at(buf: Buffer, pos: int) -> Frame | tuple[str, int | None]:
    """The valid frame starting at ``pos``, or why there is none and where the frame's header
    says it would end (None when the header itself is unusable). A kind that the segment's
    format version does not have is no frame (with a damaged signature, any kind of ours)."""
    size = len(buf)
    if size - pos < HEADER.size:
        return f"short frame header ({size - pos} of {HEADER.size} bytes)", None
    length, crc, kind = HEADER.unpack_from(buf, pos)
    if length == 0 or length > MAX_FRAME:
        return f"impossible frame length {length}", None
    end = pos + 8 + length
    if end > size:
        return f"short frame ({size - pos} of {8 + length} bytes)", None
    payload = bytes(buf[pos + HEADER.size : end])
    if zlib.crc32(payload, zlib.crc32(bytes([kind]))) != crc:
        return "checksum mismatch", end
    version = segment_version(buf)
    if kind > _LAST_KIND[version or VERSION]:
        return f"record kind {kind} is not in format {version}", end
    try:
        record = _decode(kind, msgpack.unpackb(payload, raw=False, use_list=False, strict_map_key=False))
    except Exception as e:  # any failure to decode makes it no frame of ours
        return f"unreadable record of kind {kind} ({e})", end
    return Frame(pos, end, record)


def _next_frame(buf: Buffer, pos: int, claimed_end: int | None) -> int | None:
    """The first valid frame after damage at ``pos``."""
    if claimed_end == len(buf):
        return None  # the frame's own length reaches the end exactly: nothing follows it
    if claimed_end is not None and isinstance(frame_at(buf, claimed_end), Frame):
        return claimed_end
    for m in _CANDIDATE.finditer(buf, pos + 1):
        at = m.start()
        length = int.from_bytes(buf[at : at + 4], "little")
        if 0 < length <= len(buf) - at - 8 and isinstance(frame_at(buf, at), Frame):
            return at
    return None


def damage_at(buf: Buffer, pos: int) -> Damage | None:
    """The damage starting at ``pos`` (where a reader stopped), or None if a valid frame or
    the very end of the segment is there."""
    if pos >= len(buf):
        return None
    got = frame_at(buf, pos)
    if isinstance(got, Frame):
        return None
    reason, claimed_end = got
    nxt = _next_frame(buf, pos, claimed_end)
    return Damage(pos, len(buf) if nxt is None else nxt, reason)


def scan(buf: Buffer) -> Iterator[Frame | Damage]:
    """Every valid frame and every damaged region of a segment, in file order.

    A signature of a format version this reader does not know raises
    :class:`JournalFormatError` (its frames are not ours to judge); a damaged signature is
    reported as damage at offset 0.
    """
    pos = len(MAGIC)
    if not segment_version(buf):
        if len(buf) >= pos and bytes(buf[: pos - 1]) == MAGIC[:-1]:
            known = " or ".join(str(v) for v in _MAGICS.values())
            raise JournalFormatError(f"journal format version {buf[pos - 1]} is not {known} (a newer pylmq?)")
        nxt = _next_frame(buf, 0, None)
        pos = len(buf) if nxt is None else nxt
        yield Damage(0, pos, "bad signature")
    while pos < len(buf):
        got = frame_at(buf, pos)
        if isinstance(got, Frame):
            yield got
            pos = got.end
            continue
        damage = damage_at(buf, pos)
        assert damage is not None
        yield damage
        pos = damage.end
