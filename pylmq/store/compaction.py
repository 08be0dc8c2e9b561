"""Compaction of the durable store's journal: the live state written as a new segment.

The store freezes its tables on the loop (:func:`freeze`: O(n) references), a thread writes
them as the next segment's ``.tmp`` file (:func:`write_snapshot`), and once the records made
meanwhile are appended the journal thread renames it into place and drops the old segment
(:func:`install`). Until that rename the old segment is the state; after it, the new one.
The policy (when to compact, how long to wait after a failure, how far the journal may grow
while compaction fails) is here too; the store owns the sequencing with its writes.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from pylmq.core.message import StoredMessage
from pylmq.core.props import DefaultList, RawProps
from pylmq.core.table import QueueTable
from pylmq.store.check import fsync_dir
from pylmq.store.journal import MAGIC, Encoder
from pylmq.store.journal_io import JournalIO
from pylmq.store.recovery import CHUNK, segment_name

__all__ = [
    "Frozen",
    "drop_snapshot",
    "freeze",
    "install",
    "is_due",
    "journal_limit",
    "next_check",
    "retry_delay",
    "write_snapshot",
]

Frozen = list[tuple[str, RawProps, Iterable[StoredMessage]]]


def is_due(segment_bytes: int, live_bytes: int, ratio: float) -> bool:
    """Compact once the segment holds more than ``ratio`` times the live data."""
    return segment_bytes > ratio * live_bytes


def next_check(min_bytes: int, ratio: float, size: int) -> int:
    """The segment size at which to look again after a segment of ``size`` bytes is written."""
    return max(min_bytes, int(ratio * size))


def retry_delay(initial: float, maximum: float, failures: int) -> float:
    """The back-off after ``failures`` failed compactions in a row."""
    return min(initial * 2.0 ** min(failures - 1, 30), maximum)


def journal_limit(journal_max_bytes: int, ratio: float, live_bytes: int) -> int:
    """How far the segment may grow while compaction fails: never below twice what a
    successful compaction would let it reach."""
    return max(journal_max_bytes, int(2 * ratio * live_bytes))


def freeze(
    tables: dict[str, QueueTable], props: dict[str, RawProps], defaults: DefaultList
) -> tuple[Frozen, DefaultList]:
    """The live state as it is now, cheap to take on the loop and safe to read in a thread."""
    frozen: Frozen = [(n, dict(props.get(n, {})), t.snapshot()) for n, t in tables.items()]
    return frozen, [(r, dict(p)) for r, p in defaults]


def write_snapshot(
    data_dir: Path,
    io: JournalIO,
    seq: int,
    frozen: Frozen,
    defaults: DefaultList,
    virtual: Mapping[str, Sequence[str]] | None = None,
    dedup: Mapping[str, Mapping[str, tuple[float, str, str]]] | None = None,
) -> tuple[int, int]:
    """Write the frozen state (and the virtual queues, a copy) as segment ``seq``'s ``.tmp``
    file, synced; (its fd, its size)."""
    tmp = data_dir / (segment_name(seq) + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    try:
        size = 0
        chunk = bytearray(MAGIC)
        write = io.write
        for frame in Encoder().state(frozen, defaults, virtual, dedup):
            chunk += frame
            if len(chunk) >= CHUNK:
                write(fd, chunk)
                size += len(chunk)
                chunk = bytearray()
        write(fd, chunk)
        size += len(chunk)
        io.fdatasync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    return fd, size


def install(data_dir: Path, io: JournalIO, seq: int, fd: int, tail: bytes, old_fd: int) -> None:
    """Append ``tail`` to snapshot ``seq``, sync, rename it into place, drop the old segment."""
    final = data_dir / segment_name(seq)
    io.write(fd, tail)
    io.fdatasync(fd)
    os.rename(final.with_name(final.name + ".tmp"), final)
    fsync_dir(data_dir)
    # Off the loop: dropping a big file can take a while on some file systems.
    os.close(old_fd)
    # Left behind, the old segment is deleted at the next recovery (the highest one wins).
    with contextlib.suppress(OSError):
        (data_dir / segment_name(seq - 1)).unlink()


def drop_snapshot(data_dir: Path, seq: int, fd: int) -> None:
    """A snapshot for segment ``seq`` that will not be installed: close it and delete its file."""
    os.close(fd)
    (data_dir / (segment_name(seq) + ".tmp")).unlink(missing_ok=True)
