"""The workloads, run against one target at a time; each measured run is a :class:`Cell`.

Over HTTP the load comes from wrk (bench/lua/lmq.lua), over every other protocol from the
Python generator (bench/pygen.py) in ``Target.gen_procs`` processes; workload 5 (a few hundred
timed pull+ack pairs) and the idle clients of workload 6 use the Python generator over HTTP too.

Every cell records the server's CPU seconds over the measured window (from the moment the
generator is released to its last answer), hence ``server_us_per_msg``, and is checked for a
saturated generator (:func:`bench.model.saturation`) by :func:`run_target`.

Adding a workload: write ``def wN(ctx: Ctx, protocol: str) -> list[Cell]`` and add it to
:data:`WORKLOADS`.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.model import Budget, Cell, Skip, flag_saturated, percentile
from bench.pygen import Lane, LaneSet, Workers, run_lanes
from bench.targets import Target
from bench.wrk import WrkRun, run_wrk

__all__ = ["WORKLOADS", "Ctx", "run_target"]

GEN_PROCS = 2  # Python generator processes of a pre-fill (one per core of the 2-core reference machine)
RPC_WINDOW = 8  # pipelined requests per RPC connection where order does not matter
_seq = itertools.count(1)


@dataclass
class Ctx:
    target: Target
    budget: Budget
    wrk: str | None
    log: Callable[[str], None]
    deadline: float = float("inf")  # the run's: a pre-fill never runs past it


def _queue(tag: str) -> str:
    return f"b{next(_seq)}-{tag}"


# -- measuring ----------------------------------------------------------------------------------------


class _Meter:
    """Server CPU and RSS around a cell."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.restart()

    def restart(self) -> None:
        """Start the window again (once the generator is connected, just before it is released)."""
        self.u0 = self.target.usage()
        self.t0 = time.monotonic()

    def fill(self, cell: Cell) -> Cell:
        u1 = self.target.usage()
        wall = time.monotonic() - self.t0
        if u1 is not None:
            cell.server_rss_mb = round(u1.rss_bytes / 2**20, 1)
            if self.u0 is not None and wall > 0:
                cell.server_cpu_s = round(u1.cpu_s - self.u0.cpu_s, 3)
                cell.server_cpu_pct = round(cell.server_cpu_s / wall * 100, 1)
        return cell


def _ms(us: float) -> float:
    return round(us / 1000.0, 3)


def _from_wrk(cell: Cell, run: WrkRun, counted: str) -> Cell:
    s = run.stats
    cell.msgs = int(s[counted])
    cell.seconds = round(s["span"], 3)
    cell.msgs_per_s = round(cell.msgs / s["span"], 1) if s["span"] > 0 and cell.msgs else None
    cell.p50_ms, cell.p99_ms, cell.p999_ms = _ms(s["p50_us"]), _ms(s["p99_us"]), _ms(s["p999_us"])
    cell.gen_cpu_pct = round(run.cpu_s / run.wall * 100, 1) if run.wall > 0 else None
    cell.gen_units = int(s["threads"])  # one connection per wrk thread
    cell.generator = f"wrk -t{cell.gen_units}"
    cell.extra.update(requests=s["requests"], bad=s["bad"] + s["wrk_errors"], completed=run.done)
    if s["bad"] + s["wrk_errors"]:
        cell.error = f"{s['bad'] + s['wrk_errors']} failed requests"
    return cell


def _from_lanes(cell: Cell, res: LaneSet, counted: str, wall: float) -> Cell:
    cell.msgs = res.acked if counted == "acked" else res.pushed
    span = res.last - res.first
    cell.seconds = round(span, 3)
    cell.msgs_per_s = round(cell.msgs / span, 1) if span > 0 and cell.msgs else None
    lat = sorted(res.lat)
    cell.p50_ms, cell.p99_ms, cell.p999_ms = (
        None if (v := percentile(lat, p)) is None else round(v, 3) for p in (50, 99, 99.9)
    )
    cell.gen_cpu_pct = round(res.cpu_s / wall * 100, 1) if wall > 0 else None
    cell.gen_units = len(res.proc_cpu_s)
    if wall > 0:
        cell.extra["gen_cpu_pct_per_proc"] = [round(c / wall * 100, 1) for c in res.proc_cpu_s]
    cell.generator = f"python x{cell.gen_units}"
    if res.errors:
        cell.error = f"{res.errors} lanes failed: {res.error_text}"
    return cell


def _lanes(ctx: Ctx, protocol: str, lanes: list[Lane], meter: _Meter, *, body: int = 100,
           seconds: float | None = None, pull_t: float = 1.0) -> tuple[LaneSet, float]:  # fmt: skip
    """Run ``lanes`` in the target's generator processes; ``meter``'s window and the returned
    wall time start when the connected workers are released, so neither counts their start-up."""
    w = Workers(
        protocol, ctx.target.addr(protocol), lanes, procs=ctx.target.gen_procs,
        seconds=seconds or ctx.budget.cell_seconds, body=body, pull_t=pull_t, rpc_oldspec=ctx.target.rpc_oldspec,
    )  # fmt: skip
    try:
        w.ready()
        meter.restart()
        t0 = time.monotonic()
        w.go()
        res = w.results()
        return res, time.monotonic() - t0
    finally:
        w.kill()


def _need_wrk(ctx: Ctx) -> str:
    if ctx.wrk is None:
        raise Skip("wrk is not installed")
    return ctx.wrk


def prefill(ctx: Ctx, queue: str, n: int, seconds: float) -> int:
    """Push n 100-byte messages as fast as the target takes them (not measured); returns how many."""
    t = ctx.target
    if n <= 0 or t.kind == "ceiling":
        return n
    if t.kind == "lmq" and "rpc" not in t.protocols:
        per = -(-n // 16)
        run = run_wrk(_need_wrk(ctx), t.url(), mode="push", queue=queue, connections=16, quota=per, seconds=seconds)
        return int(run.stats["pushed"])
    proto = t.protocols[0] if t.kind != "lmq" else "rpc"
    lanes, window = 4, 32
    quotas = [n // lanes + (1 if i < n % lanes else 0) for i in range(lanes)]
    res = run_lanes(proto, t.addr(proto), [Lane("push", queue, q, window) for q in quotas], procs=GEN_PROCS,
                    seconds=seconds, rpc_oldspec=t.rpc_oldspec)  # fmt: skip
    return res.pushed


def cleanup(ctx: Ctx, protocol: str, queue: str) -> None:
    """Drop what a cell left behind so later cells run against the same small server."""
    if ctx.target.kind == "ceiling":
        return
    proto = protocol if protocol != "http" or ctx.target.kind != "lmq" else "http"
    import asyncio

    from bench.drivers import make_driver

    async def go() -> None:
        d = make_driver(proto, ctx.target.addr(proto), rpc_oldspec=ctx.target.rpc_oldspec)
        await d.connect()
        try:
            await d.delete(queue)
        finally:
            await d.close()

    try:
        asyncio.run(asyncio.wait_for(go(), 30))
    except Exception as e:
        ctx.log(f"  cleanup of {queue} failed: {e!r}")


def _cell(ctx: Ctx, protocol: str, workload: str, param: str = "") -> Cell:
    return Cell(ctx.target.name, protocol, workload, param)


# -- the workloads -----------------------------------------------------------------------------------


def w1_push(ctx: Ctx, protocol: str) -> list[Cell]:
    b, q, c = ctx.budget, _queue("push"), 16
    cell = _cell(ctx, protocol, "w1_push", f"c={c}")
    m = _Meter(ctx.target)
    if protocol == "http":
        run = run_wrk(_need_wrk(ctx), ctx.target.url(), mode="push", queue=q, connections=c,
                      quota=b.push_count // c, seconds=b.cell_seconds)  # fmt: skip
        m.fill(_from_wrk(cell, run, "pushed"))
    else:
        lanes = [Lane("push", q, b.push_count // c, RPC_WINDOW) for _ in range(c)]
        res, wall = _lanes(ctx, protocol, lanes, m)
        m.fill(_from_lanes(cell, res, "pushed", wall))
        cell.extra["window"] = RPC_WINDOW
    cleanup(ctx, protocol, q)
    return [cell]


def w2_drain(ctx: Ctx, protocol: str) -> list[Cell]:
    b, q, c = ctx.budget, _queue("drain"), 16
    cell = _cell(ctx, protocol, "w2_drain", f"c={c}")
    filled = prefill(ctx, q, b.drain_count, b.prefill_seconds)
    cell.extra["prefilled"] = filled
    m = _Meter(ctx.target)
    if protocol == "http":
        run = run_wrk(_need_wrk(ctx), ctx.target.url(), mode="drain", queue=q, connections=c,
                      quota=-(-filled // c), pull_t="0", seconds=b.cell_seconds)  # fmt: skip
        m.fill(_from_wrk(cell, run, "acked"))
    else:
        lanes = [Lane("drain", q, -(-filled // c), 1) for _ in range(c)]
        res, wall = _lanes(ctx, protocol, lanes, m)
        m.fill(_from_lanes(cell, res, "acked", wall))
    cleanup(ctx, protocol, q)
    return [cell]


def _steady(ctx: Ctx, protocol: str, workload: str, c: int, body: int, count: int, q: str) -> Cell:
    cell = _cell(ctx, protocol, workload, f"c={c}")
    per = max(1, count // c)
    m = _Meter(ctx.target)
    if protocol == "http":
        run = run_wrk(_need_wrk(ctx), ctx.target.url(), mode="steady", queue=q, connections=2 * c, quota=per,
                      body=body, pull_t="1", producers=c, seconds=ctx.budget.cell_seconds)  # fmt: skip
        m.fill(_from_wrk(cell, run, "acked"))
        cell.extra["pushed"] = run.stats["pushed"]
    else:
        lanes = [Lane("push", q, per, 1) for _ in range(c)] + [Lane("consume", q, per, 1) for _ in range(c)]
        res, wall = _lanes(ctx, protocol, lanes, m, body=body)
        m.fill(_from_lanes(cell, res, "acked", wall))
        cell.extra["pushed"] = res.pushed
    return cell


def w3_steady(ctx: Ctx, protocol: str) -> list[Cell]:
    cells = []
    for c in ctx.budget.concurrency:
        q = _queue("steady")
        cells.append(_steady(ctx, protocol, "w3_steady", c, 100, ctx.budget.steady_count, q))
        cleanup(ctx, protocol, q)
    return cells


def w4_steady_10k(ctx: Ctx, protocol: str) -> list[Cell]:
    cells = []
    for c in ctx.budget.concurrency:
        q = _queue("big")
        cells.append(_steady(ctx, protocol, "w4_steady_10k", c, 10 * 1024, ctx.budget.big_count, q))
        cleanup(ctx, protocol, q)
    return cells


def w7_cycle(ctx: Ctx, protocol: str) -> list[Cell]:
    """Each connection repeats push, pull and ack on one queue shared by all (one acked message
    a cycle): over HTTP wrk's ``cycle`` mode, elsewhere ``cycle_wait`` lanes. Unlike workload 3
    no connection only pushes, so the original LMQ's queue process is never kept busy by pushes
    while pulls wait (there it answers pulls empty); pulls wait up to 1 s, so one that lost the
    race for the message just pushed takes the next."""
    cells = []
    for c in ctx.budget.cycle_concurrency:
        q = _queue("cycle")
        cell = _cell(ctx, protocol, "w7_cycle", f"c={c}")
        per = max(1, ctx.budget.cycle_count // c)
        m = _Meter(ctx.target)
        if protocol == "http":
            run = run_wrk(_need_wrk(ctx), ctx.target.url(), mode="cycle", queue=q, connections=c, quota=per,
                          pull_t="1", seconds=ctx.budget.cell_seconds)  # fmt: skip
            m.fill(_from_wrk(cell, run, "acked"))
        else:
            res, wall = _lanes(ctx, protocol, [Lane("cycle_wait", q, per) for _ in range(c)], m)
            m.fill(_from_lanes(cell, res, "acked", wall))
            cell.extra["empties"] = res.empties
        cells.append(cell)
        cleanup(ctx, protocol, q)
    return cells


def w6_fanin(ctx: Ctx, protocol: str) -> list[Cell]:
    """Workload 3 (C = fanin_c) on one queue while idle long polls wait on many others."""
    b = ctx.budget
    if ctx.target.kind == "ceiling":
        raise Skip("a no-op responder has no long polls")
    tag = _queue("idle")
    idle = Workers(
        protocol, ctx.target.addr(protocol),
        [Lane("idle", f"{tag}-{i}") for i in range(b.idle_clients)],
        procs=1, seconds=b.cell_seconds + 60, rpc_oldspec=ctx.target.rpc_oldspec,
    )  # fmt: skip
    try:
        idle.ready(timeout=60)
        idle.go()
        time.sleep(0.5)
        q = _queue("fanin")
        cell = _steady(ctx, protocol, "w6_fanin", b.fanin_c, 100, b.steady_count, q)
        cell.param = f"c={b.fanin_c},idle={b.idle_clients}"
    finally:
        idle.stop_idle()
    try:
        res = idle.results()
        cell.extra["idle_wakeups"] = res.acked
        cell.extra["idle_gen_cpu_s"] = round(res.cpu_s, 2)
        if res.errors:
            cell.error = f"idle clients failed: {res.error_text}"
    except RuntimeError as e:
        cell.error = f"idle clients: {e}"
    cleanup(ctx, protocol, q)
    return [cell]


def w5_depth(ctx: Ctx, protocols: tuple[str, ...]) -> list[Cell]:
    """Pull+ack of one message at a time from queues pre-filled to each depth."""
    t, b = ctx.target, ctx.budget
    if t.kind == "ceiling":
        raise Skip("a no-op responder has no queue depth")
    if t.proc is not None and t.kind == "lmq":
        t.restart()  # a fresh server, so that RSS is the queue's and not earlier cells'
    base = t.usage()
    q = _queue("depth")
    filled, cells = 0, []
    deadline = min(time.monotonic() + b.prefill_seconds, ctx.deadline)
    for depth in b.depths:
        left = deadline - time.monotonic()
        if left > 1:
            filled += prefill(ctx, q, depth - filled, left)
        u = t.usage()
        reached = filled
        for protocol in protocols:
            cell = _cell(ctx, protocol, "w5_depth", f"depth={depth}")
            if reached < depth * 0.99:
                cell.error = f"pre-fill reached {reached} of {depth} in its time bound"
            m = _Meter(t)
            res, wall = _lanes(ctx, protocol, [Lane("probe", q, b.probes)], m, seconds=b.cell_seconds * 3)
            m.fill(_from_lanes(cell, res, "acked", wall))
            pull, ack = sorted(res.pull_lat), sorted(res.ack_lat)
            cell.extra.update(
                depth=filled,
                pull_p50_ms=_r(percentile(pull, 50)),
                ack_p50_ms=_r(percentile(ack, 50)),
                ack_p99_ms=_r(percentile(ack, 99)),
            )
            cell.generator = "python x1 (sequential)"
            if u is not None:
                cell.extra["rss_mb"] = round(u.rss_bytes / 2**20, 1)
                if base is not None:
                    cell.extra["rss_delta_mb"] = round((u.rss_bytes - base.rss_bytes) / 2**20, 1)
            cells.append(cell)
            filled -= res.acked
    cleanup(ctx, protocols[0], q)
    return cells


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 4)


WORKLOADS: dict[str, Callable[[Ctx, str], list[Cell]]] = {
    "w1_push": w1_push,
    "w2_drain": w2_drain,
    "w3_steady": w3_steady,
    "w4_steady_10k": w4_steady_10k,
    "w6_fanin": w6_fanin,
    "w7_cycle": w7_cycle,
}
"""Per-protocol workloads; workload 5 (``w5_depth``) runs once per target over all protocols."""


def run_target(ctx: Ctx, workloads: list[str], deadline: float) -> list[Cell]:
    t = ctx.target
    cells: list[Cell] = []
    for protocol in t.protocols:
        for name in workloads:
            if name == "w5_depth":
                continue
            if time.monotonic() > deadline:
                cells.append(_skipped(t, protocol, name, "the run's time budget was spent"))
                continue
            ctx.log(f"  {t.name} {protocol} {name}")
            try:
                got = WORKLOADS[name](ctx, protocol)
            except Skip as e:
                got = [_skipped(t, protocol, name, str(e))]
            except Exception as e:
                got = [_skipped(t, protocol, name, f"failed: {e!r}"[:500])]
            for c in got:
                flag_saturated(c, os.cpu_count() or 1)
                ctx.log(f"    {_line(c)}")
            cells += got
    if "w5_depth" in workloads:
        if time.monotonic() > deadline:
            cells.append(_skipped(t, "*", "w5_depth", "the run's time budget was spent"))
        else:
            ctx.log(f"  {t.name} w5_depth")
            try:
                got = w5_depth(ctx, t.protocols)
            except Skip as e:
                got = [_skipped(t, "*", "w5_depth", str(e))]
            except Exception as e:
                got = [_skipped(t, "*", "w5_depth", f"failed: {e!r}"[:500])]
            for c in got:
                flag_saturated(c, os.cpu_count() or 1)
                ctx.log(f"    {_line(c)}")
            cells += got
    return cells


def _skipped(t: Target, protocol: str, workload: str, reason: str) -> Cell:
    c = Cell(t.name, protocol, workload, "")
    c.error = reason
    return c


def _line(c: Cell) -> str:
    if c.msgs_per_s is None:
        return f"{c.protocol} {c.workload} {c.param}: {c.error}"
    return (
        f"{c.protocol} {c.workload} {c.param}: {c.msgs_per_s:,.0f} msg/s p50 {c.p50_ms} p99 {c.p99_ms} ms"
        f" rss {c.server_rss_mb} MB srv {c.server_cpu_pct}% {c.server_us_per_msg} us/msg"
        f" gen {c.gen_cpu_pct}% ({c.generator}{_per_proc(c)})"
        + (f" [{c.error}]" if c.error else "")
        + (f" [{c.saturated}]" if c.saturated else "")
    )


def _per_proc(c: Cell) -> str:
    per = c.extra.get("gen_cpu_pct_per_proc")
    return f": {'/'.join(f'{v:.0f}' for v in per)}% each" if per else ""
