"""What a bench run is made of: budgets, and the measured cells that results are built from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = [
    "FULL",
    "LIGHT_DEPTHS",
    "LIGHT_WORKLOADS",
    "MIN_SERVER_CPU_S",
    "QUICK",
    "SATURATED",
    "Budget",
    "Cell",
    "Skip",
    "flag_saturated",
    "percentile",
    "saturation",
    "server_us_per_msg",
]


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
    cycle_concurrency: tuple[int, ...]  # C of workload 7 (the per-connection cycle)
    cycle_count: int  # workload 7 (per cell)
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
    cycle_concurrency=(16,),
    cycle_count=15_000,
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
    cycle_concurrency=(16, 64),
    cycle_count=50_000,
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
    server_cpu_s: float | None = None  # the server's CPU seconds over the cell
    server_us_per_msg: float | None = None  # server_cpu_s per completed message, in µs
    gen_cpu_pct: float | None = None  # the load generator's, of one core
    gen_units: int = 0  # generator processes (or wrk threads), each single-threaded
    generator: str = ""
    saturated: str | None = None  # why the generator bounded this cell (see saturation), or None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str]:
        return (self.workload, self.param)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


SATURATED = 0.90
"""A share of CPU that counts as all of it: a single-threaded generator process at 90 % of one
core is taken to be its own bottleneck (the rest goes to scheduling and the kernel's share of
its sockets that it does not see as its own time)."""


def saturation(gen_cpu_pct: float | None, gen_units: int, server_cpu_pct: float | None, cpus: int) -> str | None:
    """Why a cell's rate may be the load generator's rather than the server's, or None.

    A generator is saturated when either

    - its processes (or wrk threads, each single-threaded) used at least :data:`SATURATED` of
      every core they could run on: ``gen_cpu_pct >= 90 * min(gen_units, cpus)``; or
    - the host's CPU was full (generator + server >= 90 % of all cores) and the generator took
      more of it than the server: the server then waited for CPU the generator held, so the rate
      says more about the generator's cost per message than about the server's.

    ``gen_cpu_pct`` and ``server_cpu_pct`` are percentages of one core over the cell."""
    if gen_cpu_pct is None or gen_units <= 0 or cpus <= 0:
        return None
    usable = min(gen_units, cpus)
    if gen_cpu_pct >= SATURATED * 100 * usable:
        return f"generator saturated: {gen_cpu_pct:.0f}% CPU over {usable} core(s) its {gen_units} process(es) can use"
    if server_cpu_pct is not None:
        busy = gen_cpu_pct + server_cpu_pct
        if busy >= SATURATED * 100 * cpus and gen_cpu_pct > server_cpu_pct:
            return (
                f"host CPU full ({busy:.0f}% of {cpus * 100}%) and the generator took most of it "
                f"({gen_cpu_pct:.0f}% against the server's {server_cpu_pct:.0f}%)"
            )
    return None


MIN_SERVER_CPU_S = 0.1
"""Below this much server CPU over a cell, µs per message is not given: /proc counts CPU time in
clock ticks (10 ms), so a smaller total (workload 5's few hundred probes) is mostly rounding."""


def server_us_per_msg(server_cpu_s: float | None, msgs: int) -> float | None:
    """Microseconds of server CPU per completed message: what the server spends on one message
    whatever drove it (the generator's speed changes the rate, not this)."""
    if server_cpu_s is None or msgs <= 0 or server_cpu_s < MIN_SERVER_CPU_S:
        return None
    return round(server_cpu_s / msgs * 1e6, 1)


def flag_saturated(cell: Cell, cpus: int) -> Cell:
    """Set ``cell.saturated`` (and ``server_us_per_msg``) from the cell's own figures."""
    cell.server_us_per_msg = server_us_per_msg(cell.server_cpu_s, cell.msgs)
    cell.saturated = saturation(cell.gen_cpu_pct, cell.gen_units, cell.server_cpu_pct, cpus)
    return cell
