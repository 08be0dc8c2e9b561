"""Checking and repairing a durable store's journal, with the node stopped.

What start-up does with damage (:class:`~pylmq.store.durable.DurableStore` recovery), and what
:func:`check_segment` reports, follow one rule, :func:`refusal`: the only damage that may be
cut automatically is a *torn tail*, what a crash in the middle of a write leaves: damage that
reaches the end of the *last* segment with no valid frame after it, outside a compaction
snapshot. Anything else (valid records after the damage, damage in a segment that is not the
last, inside a snapshot, or a snapshot without its end marker) makes start-up refuse with
:class:`~pylmq.errors.JournalCorrupt`, naming the file and the byte offset.

:func:`repair` is then the operator's decision: it keeps every valid frame before and after
each damaged region (byte for byte), saves the damaged bytes aside in files of their own and
rewrites the segment through a temporary file and a rename. Running it again finds nothing
to do. Bytes saved aside never overwrite earlier ones (:func:`save_aside`).
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pylmq.errors import JournalCorrupt, StoreError
from pylmq.store.journal import (
    MAGIC,
    SEGMENT_NAME,
    SNAPSHOT_BEGIN_FRAME,
    Buffer,
    Damage,
    Frame,
    JournalFormatError,
    SnapshotBegin,
    SnapshotEnd,
    scan,
    segment_version,
)

__all__ = [
    "Repaired",
    "SegmentReport",
    "check",
    "check_buffer",
    "check_segment",
    "fsync_dir",
    "mapped",
    "refusal",
    "repair",
    "save_aside",
    "segment_paths",
    "unterminated_snapshot",
    "write_all",
]


def segment_paths(data_dir: Path) -> list[Path]:
    """The journal's segments, oldest first (the last is the current one)."""
    found = [(int(m.group(1)), p) for p in data_dir.iterdir() if (m := SEGMENT_NAME.match(p.name))]
    return [p for _, p in sorted(found)]


def refusal(damage: Damage, buf: Buffer, *, last: bool, snapshot_at: int | None) -> str | None:
    """Why start-up must refuse this damage in segment ``buf``, or None for a torn tail it may cut.

    ``snapshot_at`` is the offset of a snapshot's begin marker read before the damage and not
    yet closed by its end marker.
    """
    if damage.end < len(buf):
        return f"{damage.reason}; valid records follow at offset {damage.end}"
    if snapshot_at is not None:
        return f"{damage.reason} inside the compaction snapshot that begins at offset {snapshot_at}"
    if damage.offset == len(MAGIC) and SNAPSHOT_BEGIN_FRAME.startswith(bytes(buf[damage.offset : damage.end])):
        # Only compaction writes this frame, and only into a segment it installs once whole.
        return f"{damage.reason} in the begin marker of a compaction snapshot"
    if not last:
        return f"{damage.reason} in a segment that is not the last"
    return None


def unterminated_snapshot(begin: int) -> str:
    return f"the compaction snapshot that begins at offset {begin} has no end marker (the segment was cut short)"


_CHUNK = 1 << 20


def write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    """``data`` whole into ``fd``: os.write may take only part of it."""
    n = os.write(fd, data)
    if n == len(data):
        return  # a regular file takes it all at once but for a full disk or a signal
    view = memoryview(data)[n:]
    while view:
        n = os.write(fd, view)
        view = view[n:]


def save_aside(path: Path, tag: str, offset: int, data: bytes) -> Path:
    """Write ``data`` (bytes cut from ``path`` at ``offset``) to a new file next to it and sync
    it. The name holds the time and offset, and a counter if that name exists already: earlier
    salvage is never overwritten."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = f"{path.name}.{tag}-{stamp}-at{offset}"
    for n in range(10_000):
        aside = path.with_name(base if n == 0 else f"{base}.{n}")
        try:
            fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        return aside
    raise StoreError(f"cannot find a free name to save damaged bytes of {path} aside ({base}.N)")


@dataclass(slots=True)
class SegmentReport:
    """What :func:`check_segment` found in one segment."""

    path: Path
    size: int
    last: bool
    records: int = 0
    damages: list[Damage] = field(default_factory=list)
    # What start-up would refuse, first one first (it raises that one).
    problems: list[JournalCorrupt] = field(default_factory=list)
    # A snapshot's begin marker with no end marker after it: (offset, end) of that frame.
    open_snapshot: tuple[int, int] | None = None
    # Contiguous runs of valid frames, (offset, end), what repair keeps.
    kept: list[tuple[int, int]] = field(default_factory=list)
    # Written by another format version: not ours to judge, let alone repair.
    foreign: bool = False

    @property
    def clean(self) -> bool:
        return not self.damages and self.open_snapshot is None and not self.foreign

    @property
    def torn_tail(self) -> Damage | None:
        """The damage start-up cuts by itself, if that is all there is."""
        return self.damages[0] if self.damages and not self.problems else None


@contextlib.contextmanager
def mapped(path: Path) -> Iterator[bytes | mmap.mmap]:
    """A file's bytes without reading them all into memory (a segment can be gigabytes)."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            yield b""  # mmap refuses an empty file
            return
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            yield m


def check_segment(path: Path, *, last: bool) -> SegmentReport:
    """Read a whole segment and judge its damage as start-up would."""
    with mapped(path) as buf:
        return check_buffer(buf, path, last=last)


def check_buffer(buf: Buffer, path: Path, *, last: bool) -> SegmentReport:
    """:func:`check_segment` on the bytes of ``path``."""
    report = SegmentReport(path, len(buf), last)
    snapshot: tuple[int, int] | None = None
    try:
        for item in scan(buf):
            if isinstance(item, Frame):
                report.records += 1
                if report.kept and report.kept[-1][1] == item.offset:
                    report.kept[-1] = (report.kept[-1][0], item.end)
                else:
                    report.kept.append((item.offset, item.end))
                if isinstance(item.record, SnapshotBegin):
                    snapshot = (item.offset, item.end)
                elif isinstance(item.record, SnapshotEnd):
                    snapshot = None
                continue
            report.damages.append(item)
            why = refusal(item, buf, last=last, snapshot_at=None if snapshot is None else snapshot[0])
            if why is not None:
                report.problems.append(JournalCorrupt(str(path), item.offset, item.end, why))
    except JournalFormatError as e:
        report.problems.append(JournalCorrupt(str(path), 0, report.size, str(e)))
        report.foreign = True
        return report
    if snapshot is not None:
        report.open_snapshot = snapshot
        report.problems.append(JournalCorrupt(str(path), snapshot[0], report.size, unterminated_snapshot(snapshot[0])))
    return report


def orphaned_current(paths: list[Path]) -> JournalCorrupt | None:
    """With older segments present, the current one must be a compaction's (begin with a
    snapshot): start-up replays it alone and deletes the older ones. A current segment that
    does not (a file copied or renamed by hand) would drop every record they hold."""
    if len(paths) < 2:
        return None
    current = paths[-1]
    with open(current, "rb") as f:
        head = f.read(len(MAGIC) + len(SNAPSHOT_BEGIN_FRAME))
    if not segment_version(head) or head[len(MAGIC) :] == SNAPSHOT_BEGIN_FRAME:
        return None  # another format version, or a compaction's segment: judged elsewhere
    older = ", ".join(p.name for p in paths[:-1])
    return JournalCorrupt(
        str(current),
        len(MAGIC),
        len(MAGIC),
        f"the current segment does not begin with a compaction snapshot, yet older segments ({older}) exist: "
        "it is not their successor, and replaying it alone would drop their records; "
        "keep the segment that holds the state and move the other away",
    )


def check(data_dir: Path) -> list[SegmentReport]:
    """Every segment of the journal in ``data_dir``, oldest first."""
    paths = segment_paths(data_dir)
    reports = [check_segment(p, last=i == len(paths) - 1) for i, p in enumerate(paths)]
    orphan = orphaned_current(paths)
    if orphan is not None:
        reports[-1].problems.append(orphan)
    return reports


@dataclass(slots=True)
class Repaired:
    """What :func:`repair` did to one segment."""

    report: SegmentReport
    saved: list[Path] = field(default_factory=list)
    dropped_marker: bool = False


def fsync_dir(path: Path) -> None:
    """Sync a directory, so that a rename or a new file in it survives a crash (the durable store
    uses it too)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rewrite(report: SegmentReport) -> Repaired:
    path = report.path
    done = Repaired(report)
    if report.foreign:
        raise StoreError(f"{path} was written by another journal format version: not repaired")
    keep = report.kept
    if report.open_snapshot is not None:
        # A begin marker whose end is gone marks nothing any more: keep what is around it.
        begin, after = report.open_snapshot
        keep = [part for a, b in keep for part in (((a, begin), (after, b)) if a <= begin < b else ((a, b),))]
        keep = [(a, b) for a, b in keep if b > a]
        done.dropped_marker = True
    tmp = path.with_name(path.name + ".repair-tmp")
    with mapped(path) as buf:
        # Salvage first: once the rewritten segment replaces the file, this is all that is left
        # of the damaged bytes.
        for d in report.damages:
            if d.end > d.offset:
                done.saved.append(save_aside(path, "damaged", d.offset, buf[d.offset : d.end]))
        # The segment keeps its format version: a format-1 segment holds no format-2 kind.
        magic = bytes(buf[: len(MAGIC)]) if segment_version(buf) else MAGIC
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, magic)
            for a, b in keep:
                for at in range(a, b, _CHUNK):
                    write_all(fd, buf[at : min(b, at + _CHUNK)])
            os.fsync(fd)
        finally:
            os.close(fd)
    os.rename(tmp, path)
    fsync_dir(path.parent)
    return done


def repair(data_dir: Path) -> list[Repaired]:
    """Rewrite every damaged segment of the journal in ``data_dir`` (the node must be stopped:
    this takes the directory's lock, as a node does)."""
    try:
        lock = os.open(data_dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise StoreError(f"cannot open data directory {data_dir}: {e.strerror or e}") from e
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StoreError(f"data directory {data_dir} is in use by a running pylmq node: stop it first") from None
        for stale in data_dir.glob("journal-*.log.repair-tmp"):
            stale.unlink()  # an earlier repair stopped before its rename: the segment is intact
        return [_rewrite(r) if not r.clean else Repaired(r) for r in check(data_dir)]
    finally:
        os.close(lock)
