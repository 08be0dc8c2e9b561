"""One cell of pygen lanes against a started target, shared by the sections that measure a cycle
(bench/qs.py, bench/sqs.py): they differ in their lanes, their count of requests and their log
line, not in how a run becomes a Cell's figures."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from bench.model import Cell, percentile
from bench.pygen import Lane, LaneSet, run_lanes
from bench.targets import Target

__all__ = ["fmt", "generator_bound", "measure_lanes"]


def measure_lanes(
    cell: Cell,
    target: Target,
    driver: str,
    addr: list[Any],
    lanes: list[Lane],
    *,
    seconds: float,
    requests: Callable[[LaneSet], float],
) -> bool:
    """Run ``lanes`` on ``target`` and fill ``cell`` with the figures of the run.

    ``requests`` counts the requests the run made, from which ``extra["requests_per_s"]``.
    False (``cell.error`` set) when the generator itself failed; True once the figures are in,
    even when the run counted errors (they are in ``cell.error`` then)."""
    u0 = target.usage()
    t0 = time.monotonic()
    try:
        res = run_lanes(driver, addr, lanes, procs=min(2, len(lanes)), seconds=seconds)
    except RuntimeError as e:
        cell.error = str(e)[:300]
        return False
    wall = time.monotonic() - t0
    u1 = target.usage()
    span = (res.last - res.first) if res.last > res.first else seconds
    lat = sorted(res.lat)
    cell.msgs = res.acked
    cell.seconds = round(span, 3)
    cell.msgs_per_s = round(res.acked / span, 1) if span > 0 else None
    cell.p50_ms = percentile(lat, 50)
    cell.p99_ms = percentile(lat, 99)
    cell.p999_ms = percentile(lat, 99.9)
    if u0 is not None and u1 is not None:
        cell.server_cpu_pct = round((u1.cpu_s - u0.cpu_s) / wall * 100, 1)
        cell.server_rss_mb = round(u1.rss_bytes / 2**20, 1)
    cell.gen_cpu_pct = round(res.cpu_s / span * 100, 1) if span > 0 else None
    cell.extra = {
        "requests_per_s": round(requests(res) / span, 1) if span > 0 else None,
        "mean_ms": round(statistics.fmean(lat), 3) if lat else None,
        "empties": res.empties,
    }
    if res.errors:
        cell.error = res.error_text
    return True


def generator_bound(cell: Cell, cpus: int) -> bool:
    """The generator took most of what the host left it: the cell may measure the generator."""
    if cell.gen_cpu_pct is None or cell.server_cpu_pct is None:
        return False
    return cell.gen_cpu_pct >= 0.8 * (cpus * 100 - cell.server_cpu_pct)


def fmt(v: float | None, d: int = 0) -> str:
    """A figure of a summary table: thousands separated, ``d`` decimals, ``-`` where none."""
    return "-" if v is None else f"{v:,.{d}f}"
