"""queue_server's protocol beside LMQ's: the produce -> consume -> confirm cycle on one node.

One pylmq node (``--store``, memory by default) serves HTTP, MessagePack-RPC and queue_server's
protocol; for each protocol (``qs-udp``, ``qs-tcp``, ``http``, ``rpc``) and each concurrency
C (1, 8, 64), C clients each repeat, on a queue of their own, a push (a produce with a retry
interval), a pull that answers at once (consume) and an ack (confirm): one cycle is three
requests and one message's whole life. The generator is bench/pygen.py (uvloop, 2 processes,
one connection or socket per client, one request at a time on it).

Each cell reports cycles/s, requests/s, the mean and p99 latency of one request, the node's
CPU and the generator's (both in % of one core). The generator is not the bottleneck when its
CPU stays well under what the machine leaves it: on a host with N cores, a generator near
(N - server) x 100 % measures itself; the summary flags such cells. queue_server's published
figure (about 14k requests/s at 0.6 ms mean, 8 PHP clients, produce only, one connection per
request, on a 4-core VM) is not the same workload: compare protocols within one run.

    python -m bench --qs [--qs-seconds 5] [--qs-store memory|durable]
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from bench.cells import fmt, generator_bound, measure_lanes
from bench.model import Cell, Skip
from bench.procs import wait_port
from bench.pygen import Lane
from bench.targets import Env, Pylmq

__all__ = ["CONCURRENCY", "PROTOCOLS", "WORKLOAD", "run_qs", "summary_md"]

WORKLOAD = "qs_cycle"
PROTOCOLS = ("qs-udp", "qs-tcp", "http", "rpc")
CONCURRENCY = (1, 8, 64)
_QUOTA = 10**9  # rounds per lane: the time bound ends a cell


def _addr(target: Pylmq, protocol: str) -> list[Any]:
    if protocol.startswith("qs-"):
        return ["127.0.0.1", target.qs_port]
    addr: list[Any] = target.addr(protocol)
    return addr


def run_qs(
    env: Env,
    *,
    seconds: float,
    log: Callable[[str], None],
    store: str = "memory",
    fsync: str = "interval",
    protocols: tuple[str, ...] = PROTOCOLS,
    concurrency: tuple[int, ...] = CONCURRENCY,
) -> tuple[list[Cell], dict[str, Any]]:
    target = Pylmq(env, store, fsync)
    target.name = f"pylmq-{store}" if store == "memory" else f"pylmq-{store}-{fsync}"
    target.start()
    cells: list[Cell] = []
    try:
        if not wait_port(target.qs_port, time.monotonic() + 10, target.proc.popen if target.proc else None):
            raise Skip("queue_server's port did not open")
        for protocol in protocols:
            for c in concurrency:
                cells.append(_cell(target, protocol, c, seconds, log))
    finally:
        target.stop()
    info = {
        **target.info(),
        "cpus": os.cpu_count(),
        "seconds_per_cell": seconds,
        "generator": "bench/pygen.py, 2 processes",
    }
    return cells, info


def _cell(target: Pylmq, protocol: str, c: int, seconds: float, log: Callable[[str], None]) -> Cell:
    cell = Cell(target.name, protocol, WORKLOAD, f"c={c}", generator="pygen")
    stamp = f"{protocol}-{c}-{int(time.time() * 1000) % 10**8}"
    lanes = [Lane("cycle", f"qsb-{stamp}-{i}", quota=_QUOTA) for i in range(c)]
    # a cycle is three requests: produce, consume, confirm
    if not measure_lanes(
        cell, target, protocol, _addr(target, protocol), lanes, seconds=seconds, requests=lambda res: 3 * res.acked
    ):
        log(f"  {protocol} c={c}: failed: {cell.error}")
        return cell
    log(
        f"  {protocol:7} c={c:<3} {cell.msgs_per_s or 0:>9,.0f} cycles/s"
        f"  {cell.extra['requests_per_s'] or 0:>9,.0f} req/s"
        f"  mean {cell.extra['mean_ms']} ms  p99 {cell.p99_ms and round(cell.p99_ms, 2)} ms"
        f"  server {cell.server_cpu_pct}%  gen {cell.gen_cpu_pct}%"
    )
    return cell


def summary_md(cells: list[Cell], cpus: int | None = None) -> str:
    cpus = cpus or os.cpu_count() or 1

    rows = []
    for c in cells:
        if c.workload != WORKLOAD:
            continue
        note = c.error or ("generator-bound" if generator_bound(c, cpus) else "")
        rows.append(
            f"| {c.protocol} | {c.param} | {fmt(c.msgs_per_s)} | {fmt(c.extra.get('requests_per_s'))} "
            f"| {fmt(c.extra.get('mean_ms'), 3)} | {fmt(c.p99_ms, 2)} | {fmt(c.server_cpu_pct)} | {fmt(c.gen_cpu_pct)} "
            f"| {note} |"
        )
    return (
        f"## queue_server's protocol beside HTTP and RPC ({cpus} CPUs; one cycle = produce/push + consume/pull + "
        "confirm/ack)\n\n"
        "| protocol | clients | cycles/s | requests/s | mean ms | p99 ms | server CPU % | gen CPU % | note |\n"
        "|---|---|---:|---:|---:|---:|---:|---:|---|\n" + "\n".join(rows) + "\n"
    )
