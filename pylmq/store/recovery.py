"""Recovery: the durable store's tables rebuilt from its journal when it opens.

The highest-numbered segment holds the whole state (compaction installs a new one only once it
is complete), so recovery replays that one: ``.tmp`` files are unfinished snapshots and go, older
segments are deleted once the newest replays, a torn tail (a crash mid-write) is cut and saved
aside, and any other damage makes the store refuse to start (:mod:`pylmq.store.check` judges
which is which, with the same rules as the offline checker). It runs in the journal thread
before anything else touches the store.
"""

from __future__ import annotations

import gc
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pylmq.core.message import StoredMessage
from pylmq.core.props import DefaultList, RawProps
from pylmq.core.store import MAX_DEDUP, DedupIds
from pylmq.core.table import Journal, QueueTable
from pylmq.errors import JournalCorrupt
from pylmq.store.check import (
    check_segment,
    fsync_dir,
    mapped,
    orphaned_current,
    refusal,
    save_aside,
    segment_paths,
    unterminated_snapshot,
    write_all,
)
from pylmq.store.journal import (
    MAGIC,
    SEGMENT_NAME,
    VERSION,
    AppendRecord,
    DedupRecord,
    DefaultsRecord,
    DeleteRecord,
    DropRecord,
    JournalFormatError,
    JournalReader,
    MoveRecord,
    PutRecord,
    QueueRecord,
    Record,
    TransferRecord,
    VirtualRecord,
    damage_at,
)

__all__ = ["CHUNK", "Recovered", "ReplayTarget", "create_segment", "recover", "segment_name"]

log = logging.getLogger("pylmq.store.durable")

CHUNK = 1 << 20  # bytes read (replay) or written (snapshot) at a time


def segment_name(seq: int) -> str:
    return f"journal-{seq:08d}.log"


def create_segment(data_dir: Path, seq: int) -> int:
    """A new, empty segment (its signature only), durable under its final name; its fd."""
    final = data_dir / segment_name(seq)
    tmp = final.with_name(final.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    write_all(fd, MAGIC)
    os.fsync(fd)
    os.rename(tmp, final)
    fsync_dir(data_dir)
    return fd


class ReplayTarget(Protocol):
    """The state a replay fills: a store's tables, queue properties, default properties and
    virtual queues."""

    tables: dict[str, QueueTable]
    props: dict[str, RawProps]
    defaults: DefaultList
    virtual: dict[str, list[str]]
    dedup: dict[str, DedupIds]


@dataclass(slots=True)
class Recovered:
    """What recovery leaves: the current segment, open for appending, and what it found."""

    seq: int
    fd: int
    size: int  # bytes of whole records in the segment: where writing goes on
    records: int = 0
    torn_bytes: int = 0
    version: int = VERSION  # the segment's format version: a format-1 one is to be rewritten


def recover(data_dir: Path, into: ReplayTarget, journal: Journal) -> Recovered:
    """Replay the journal of ``data_dir`` into ``into``; new tables record into ``journal``.

    Raises JournalCorrupt for damage that is not a torn tail, JournalFormatError / OSError
    as they come."""
    for tmp in data_dir.glob("journal-*.log.tmp"):
        tmp.unlink()
    paths = segment_paths(data_dir)  # the list the checker judges (pylmq.store.check)
    if not paths:
        return Recovered(1, create_segment(data_dir, 1), len(MAGIC))
    *older, path = paths
    m = SEGMENT_NAME.match(path.name)
    assert m is not None, "segment_paths lists segment names only"
    seq = int(m.group(1))
    for old in older:
        # Superseded (a crash came between installing a compacted segment and deleting the
        # one before): deleted below, but not with damage in it, which says the disk fails.
        problems = check_segment(old, last=False).problems
        if problems:
            raise problems[0]
    orphan = orphaned_current(paths)
    if orphan is not None:
        raise orphan
    reader = JournalReader()
    replay = _Replay(into, journal)
    count = 0
    # Replay allocates millions of long-lived objects and frees none in cycles: the cyclic
    # collector would only rescan them over and over.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        with open(path, "rb") as f:
            while chunk := f.read(CHUNK):
                for rec in reader.feed(chunk):
                    replay.apply(rec)
                    count += 1
    except JournalFormatError as e:
        raise JournalCorrupt(str(path), reader.offset, reader.offset, str(e)) from e
    finally:
        if gc_was_enabled:
            gc.enable()
    for table in into.tables.values():
        table.recovered()  # replay looked records up by uuid; serving never does
    size = path.stat().st_size
    torn = 0
    if reader.offset < len(MAGIC):
        raise JournalCorrupt(str(path), 0, size, "shorter than its signature")
    if reader.offset < size:
        torn = _judge_damage(path, reader, size)
    elif reader.snapshot_at is not None:
        raise JournalCorrupt(str(path), reader.snapshot_at, size, unterminated_snapshot(reader.snapshot_at))
    for old in older:
        old.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    log.info("recovered %d records from %s (%d queues)", count, path, len(into.tables))
    return Recovered(seq, fd, reader.offset, count, torn, reader.version)


def _judge_damage(path: Path, reader: JournalReader, size: int) -> int:
    """The reader stopped at a bad frame: cut it if it is a torn tail (returns the bytes cut),
    else refuse."""
    with mapped(path) as buf:
        damage = damage_at(buf, reader.offset)
        assert damage is not None, "the reader stops only at a bad frame"
        why = refusal(damage, buf, last=True, snapshot_at=reader.snapshot_at)
    if why is not None:
        raise JournalCorrupt(str(path), damage.offset, damage.end, why)
    return _cut_tail(path, reader.offset, size)


def _cut_tail(path: Path, keep: int, size: int) -> int:
    """A torn write (crash mid-write): keep every whole record, save the rest aside."""
    with open(path, "r+b") as f:
        f.seek(keep)
        tail = f.read()
        torn = save_aside(path, "torn", keep, tail)
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    log.warning("%s: cut a torn tail of %d bytes at offset %d (saved as %s)", path, size - keep, keep, torn)
    return size - keep


class _Replay:
    """Applies journal records to the state, in their order."""

    def __init__(self, into: ReplayTarget, journal: Journal) -> None:
        self.into = into
        self.journal = journal

    def _table(self, name: str) -> QueueTable:
        tables = self.into.tables
        table = tables.get(name)
        if table is None:
            table = tables[name] = QueueTable(name, self.journal)
            self.into.props.setdefault(name, {})
        return table

    def apply(self, rec: Record) -> None:
        tables = self.into.tables
        match rec:
            case PutRecord(queue, msg):
                self._table(queue).restore(msg)
            case MoveRecord(queue, old_uuid, ts, uuid, state, retry, move_ext):
                table = tables.get(queue)
                old = None if table is None else table.get(old_uuid)
                if table is not None and old is not None:
                    moved = StoredMessage((ts, uuid), state, old.type, retry, old.content, move_ext)
                    table.restore_move(old_uuid, moved)
            case TransferRecord(from_queue, uuid, to_queue, ts, new_uuid, state, retry, ext):
                # Delete and insert from one frame: a crash leaves the record in one queue.
                source = tables.get(from_queue)
                old = None if source is None else source.get(uuid)
                if source is not None and old is not None:
                    source.restore_delete(uuid)
                    arrived = StoredMessage((ts, new_uuid), state, old.type, retry, old.content, ext)
                    self._table(to_queue).restore(arrived)
            case VirtualRecord(name, queues):
                if queues:
                    self.into.virtual[name] = queues
                else:
                    self.into.virtual.pop(name, None)
            case DeleteRecord(queue, uuid):
                table = tables.get(queue)
                if table is not None:
                    table.restore_delete(uuid)
            case AppendRecord(queue, uuid, item):
                table = tables.get(queue)
                if table is not None:
                    table.restore_append(uuid, item)
            case QueueRecord(queue, props):
                self._table(queue)
                self.into.props[queue] = props
            case DropRecord(queue):
                tables.pop(queue, None)
                self.into.props.pop(queue, None)
                self.into.dedup.pop(queue, None)
            case DedupRecord(queue, key, sent, message_id, sequence):
                ids = self.into.dedup.setdefault(queue, {})
                ids.pop(key, None)  # a key sent again is the newest
                ids[key] = (sent, message_id, sequence)
                if len(ids) > MAX_DEDUP:
                    del ids[next(iter(ids))]
            case DefaultsRecord(defaults):
                self.into.defaults = defaults
