"""What a bench run is made of: budgets, and the measured cells that results are built from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["FULL", "LIGHT_DEPTHS", "LIGHT_WORKLOADS", "QUICK", "Budget", "Cell", "Skip", "percentile"]


class Skip(Exception):
    """A target or cell that cannot run here; the reason is recorded, the run goes on."""


@dataclass(frozen=True)
class Budget:
    """Counts and time bounds. Every cell stops at its count or its time, whichever is first."""

    cell_seconds: float  # time bound of one measured cell
    push_count: int  # workload 1
    drain_count: int  # workload 2 (pre-filled)
    steady_count: int  # workload 3 (per cell)
    big_count: int  # workload 4 (10 KB bodies)
    concurrency: tuple[int, ...]  # C of workloads 3 and 4
    depths: tuple[int, ...]  # workload 5
    probes: int  # pull+ack samples per depth in workload 5
    prefill_seconds: float  # time bound to fill the deepest queue of workload 5
    idle_clients: int  # workload 6
    fanin_c: int  # C of the active part of workload 6


QUICK = Budget(
    cell_seconds=2.5,
    push_count=20_000,
    drain_count=10_000,
    steady_count=15_000,
    big_count=3_000,
    concurrency=(16,),
    depths=(1_000, 100_000),
    probes=100,
    prefill_seconds=15.0,
    idle_clients=1_000,
    fanin_c=16,
)

FULL = Budget(
    cell_seconds=6.0,
    push_count=100_000,
    drain_count=50_000,
    steady_count=50_000,
    big_count=15_000,
    concurrency=(1, 16, 64),
    depths=(1_000, 100_000, 1_000_000),
    probes=500,
    prefill_seconds=75.0,
    idle_clients=1_000,
    fanin_c=16,
)

LIGHT_WORKLOADS = ("w1_push", "w3_steady", "w5_depth")
"""What the secondary targets of a full run (the other fsync policies) measure, to fit 15 min."""
LIGHT_DEPTHS = (1_000, 100_000)


def percentile(sorted_values: list[float], p: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(p / 100.0 * (len(sorted_values) - 1))))
    return sorted_values[k]


@dataclass
class Cell:
    """One measurement: a workload with one parameter, against one target over one protocol."""

    target: str
    protocol: str
    workload: str  # w1_push, w2_drain, w3_steady, w4_steady_10k, w5_depth, w6_fanin
    param: str  # "c=16", "depth=1000", ""
    msgs: int = 0
    seconds: float = 0.0
    msgs_per_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    p999_ms: float | None = None
    server_rss_mb: float | None = None
    server_cpu_pct: float | None = None  # of one core, over the cell
    gen_cpu_pct: float | None = None  # the load generator's, of one core
    generator: str = ""
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.workload, self.param)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
