"""``pylmq journal check|repair --data-dir DIR``: the durable store's journal, node stopped.

``check`` reads every segment and reports each damaged region (file, offset, bytes) and what
start-up does about it: cut a torn tail, or refuse. Exit status 0 when the journal is clean, 1
when damage was found, 2 when it could not be checked.

``repair`` keeps every valid record before and after each damaged region, saves the damaged
bytes aside next to the segment (``journal-NNNNNNNN.log.damaged-<time>-at<offset>``, never
overwriting earlier ones) and rewrites the segment. Exit status 0 once the journal is clean
(running it again changes nothing), 2 when it could not be repaired. It takes the data
directory's lock: a running node makes it refuse.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from pylmq.core.store import DEFAULT_DATA_DIR
from pylmq.errors import LMQError
from pylmq.store.check import Repaired, SegmentReport, check, repair

__all__ = ["describe", "main", "run_check", "run_repair"]

CLEAN, DAMAGED, FAILED = 0, 1, 2


def describe(report: SegmentReport) -> list[str]:
    """Lines about one segment: its size and records, then each damaged region."""
    role = "current segment" if report.last else "superseded segment"
    lines = [f"{report.path}: {report.size} bytes, {report.records} valid records ({role})"]
    refused = {(p.offset, p.end): p.what for p in report.problems}
    for d in report.damages:
        where = f"offset {d.offset}..{d.end} ({d.end - d.offset} bytes)"
        why = refused.pop((d.offset, d.end), None)
        if why is not None:
            lines.append(f"  damaged at {where}: {why} -> the node refuses to start")
        else:
            lines.append(f"  torn tail at {where}: {d.reason} -> the node cuts it at start and saves it aside")
    for (offset, _), why in refused.items():  # not a damaged region: a snapshot cut short, another format
        lines.append(f"  at offset {offset}: {why} -> the node refuses to start")
    return lines


def run_check(data_dir: Path, out: TextIO) -> int:
    reports = check(data_dir)
    if not reports:
        print(f"{data_dir}: no journal segments (an empty store)", file=out)
        return CLEAN
    for r in reports:
        for line in describe(r):
            print(line, file=out)
    if all(r.clean and not r.problems for r in reports):
        print(f"{data_dir}: journal is clean", file=out)
        return CLEAN
    repair = f"pylmq journal repair --data-dir {data_dir}"
    print(f"{data_dir}: journal is damaged; `{repair}` keeps every valid record", file=out)
    return DAMAGED


def _describe_repair(done: Repaired) -> list[str]:
    r = done.report
    if r.clean:
        return [f"{r.path}: clean, left alone ({r.records} records)"]
    lost = sum(d.end - d.offset for d in r.damages)
    lines = [f"{r.path}: repaired: kept {r.records} valid records, {lost} damaged bytes in {len(r.damages)} region(s)"]
    lines += [f"  saved aside: {p}" for p in done.saved]
    if done.dropped_marker:
        lines.append("  dropped the begin marker of a snapshot whose end was lost")
    return lines


def run_repair(data_dir: Path, out: TextIO) -> int:
    done = repair(data_dir)
    if not done:
        print(f"{data_dir}: no journal segments, nothing to repair", file=out)
    for d in done:
        for line in _describe_repair(d):
            print(line, file=out)
    return CLEAN


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pylmq journal", description="Check or repair the durable store's journal.")
    p.add_argument(
        "action",
        choices=("check", "repair"),
        help="check: report the damage (exit 0 clean, 1 damaged, 2 error); repair: keep every valid record, "
        "save the damaged bytes aside (exit 0 once clean, 2 error)",
    )
    p.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, help=f"the durable store's directory (default {DEFAULT_DATA_DIR})"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    data_dir = Path(args.data_dir)
    return run(args.action, data_dir)


def run(action: str, data_dir: Path, out: TextIO | None = None) -> int:
    """Run ``check`` or ``repair`` on ``data_dir``; errors go to stderr with status 2."""
    out = out or sys.stdout
    if not data_dir.is_dir():
        print(f"pylmq journal: {data_dir} is not a directory", file=sys.stderr)
        return FAILED
    try:
        return run_check(data_dir, out) if action == "check" else run_repair(data_dir, out)
    except (LMQError, OSError) as e:
        print(f"pylmq journal {action}: {e}", file=sys.stderr)
        return FAILED
