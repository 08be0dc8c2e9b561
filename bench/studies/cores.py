"""``python -m bench.studies.cores``: where a request's CPU goes, and what more processes could gain.

The figures behind docs/multi-core.md. One pylmq node (one process) serves wrk's per-connection
cycle (push, pull, ack on each connection: bench/lua/lmq.lua ``cycle``) at c=16 and c=64; the
study reads the CPU time the node and wrk spent (user and system, from /proc) and divides by
the cycles done. Then it times the same cycle with no sockets at all (``http_cpu``: httptools
parsing, routing, the queue manager, the answer's bytes). From these:

- ``server`` µs/cycle: what one cycle costs the node, all included.
- ``queue work`` µs/cycle: the part that needs the queue's state (the no-socket figure).
- ``sockets and loop``: the rest (system calls, the event loop's wake-ups, the transports):
  what front-end worker processes could take off the process that owns the queues.
- ``generator`` µs/cycle: wrk's own CPU, on the same machine.

and three bounds on cycles/s:

- ``host bound, any design``: cores / (server + generator). No split of the node over
  processes makes a cycle cost less CPU than one process spends on it, and the generator needs
  its share of the same cores: no design exceeds this on this host.
- ``owner bound, front-end workers``: 1 / queue work, for a design where workers parse and
  answer and one process owns every queue (no cost for the link between them counted, so the
  real ceiling is lower): the most such a design gives on any number of cores.
- the single process's measured rate.

    python -m bench.studies.cores [--store memory|durable-interval] [--seconds 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench.procs import Proc, free_port, wait_port
from bench.studies.http_cpu import measure
from bench.wrk import run_wrk

_TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> tuple[float, float]:
    """(user, system) seconds of one process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICK, int(fields[12]) / _TICK


def _node(store: str, scratch: Path) -> tuple[Proc, int]:
    port = free_port()
    argv = [
        sys.executable, "-m", "pylmq", "--http", f"127.0.0.1:{port}", "--rpc", f"127.0.0.1:{free_port()}",
        "--qs", "off", "--sqs", "off", "--statsd", "off", "--stats-interval", "0", "--log-level", "warning",
        "--store", store.partition("-")[0], "--data-dir", str(scratch / "data"),
    ]  # fmt: skip
    if store.startswith("durable-"):
        argv += ["--fsync", store.partition("-")[2]]
    proc = Proc(argv, name=f"pylmq-{store}", log=scratch / "node.log", cwd=scratch)
    if not wait_port(port, time.monotonic() + 30, proc.popen):
        proc.stop()
        raise SystemExit(f"the node did not start: {proc.tail()}")
    return proc, port


def cycle_costs(store: str, connections: int, seconds: float, wrk: str) -> dict[str, float]:
    """One node, one wrk run: cycles/s and µs of CPU per cycle (node user, node system, wrk)."""
    scratch = Path(tempfile.mkdtemp(prefix="bench-cores-"))
    proc, port = _node(store, scratch)
    try:
        url = f"http://127.0.0.1:{port}"
        queue = f"cores{connections}"
        run_wrk(wrk, url, mode="cycle", queue=queue, connections=connections, quota=10**9, pull_t="1", seconds=2)
        user0, sys0 = _cpu(proc.pid)
        run = run_wrk(
            wrk, url, mode="cycle", queue=queue, connections=connections, quota=10**9, pull_t="1", seconds=seconds
        )
        user1, sys1 = _cpu(proc.pid)
    finally:
        proc.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    cycles = int(run.stats["acked"])
    span = float(run.stats["span"])
    per = 1e6 / cycles
    return {
        "cycles_per_s": cycles / span,
        "server_user_us": (user1 - user0) * per,
        "server_sys_us": (sys1 - sys0) * per,
        "generator_us": run.cpu_s * per,
        "server_cpu_pct": 100 * ((user1 - user0) + (sys1 - sys0)) / span,
        "generator_cpu_pct": 100 * run.cpu_s / run.wall,
    }


def _host_idle() -> tuple[float, float]:
    """(idle, all) jiffies of the whole host so far."""
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    return cpu[3] + cpu[4], sum(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", default="memory", choices=("memory", "durable-interval"))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--wrk", default=shutil.which("wrk") or "wrk")
    args = parser.parse_args()
    import uvloop

    cores = os.cpu_count() or 1
    queue_work = 3 * (uvloop.run(measure(30_000, False, args.store)) or 0.0)
    print(f"{cores} CPUs, store {args.store}, wrk per-connection cycle, {args.seconds:.0f} s per cell")
    print(f"queue work (no sockets, one process): {queue_work:.0f} us/cycle")
    print()
    head = (
        "| c | cycles/s | server us/cycle (user + sys) | sockets and loop | generator us/cycle | "
        "server CPU % | generator CPU % | host idle % | host bound, any design | owner bound, front-end workers |"
    )
    print(head)
    print("|---:" * (head.count("|") - 1) + "|")
    for c in (16, 64):
        idle0, all0 = _host_idle()
        r = cycle_costs(args.store, c, args.seconds, args.wrk)
        idle1, all1 = _host_idle()
        idle = 100 * (idle1 - idle0) / max(1, all1 - all0)
        server = r["server_user_us"] + r["server_sys_us"]
        host_bound = cores * 1e6 / (server + r["generator_us"])
        owner_bound = 1e6 / queue_work if queue_work else float("inf")
        single = r["cycles_per_s"]
        print(
            f"| {c} | {single:,.0f} | {server:.0f} ({r['server_user_us']:.0f} + {r['server_sys_us']:.0f}) | "
            f"{server - queue_work:.0f} ({100 * (server - queue_work) / server:.0f}%) | {r['generator_us']:.0f} | "
            f"{r['server_cpu_pct']:.0f} | {r['generator_cpu_pct']:.0f} | {idle:.0f} | "
            f"{host_bound:,.0f} ({host_bound / single:.2f}x) | {owner_bound:,.0f} ({owner_bound / single:.2f}x) |"
        )


if __name__ == "__main__":
    main()
