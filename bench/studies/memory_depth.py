"""``python -m bench.studies.memory_depth``: what a deep queue costs in the memory store.

Fills one queue of the memory store with N 100-byte messages through the QueueManager (as the
HTTP push does: content-type ``application/octet-stream``) and prints the process RSS before
and after, per message, and the time of the last full GC. Then times push, pull and ack per
operation on the table itself (no event loop), at a small and at the full depth, and through
the manager.

Each measurement runs in a fresh subprocess (``--part``), so freed memory of one part never
flatters the next. Times are the process's CPU time (best of 3 rounds); compare runs made back
to back, as caches and memory bandwidth are still shared with whatever else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import subprocess
import sys
import time

from pylmq.core.clock import ManualClock
from pylmq.core.manager import QueueManager
from pylmq.core.message import make_item
from pylmq.core.table import QueueTable
from pylmq.store.memory import MemoryStore

BODY = 100
# CPU time of this process, not wall time: the machines this runs on are shared, and time spent
# waiting for a core says nothing about the code.
_cpu = time.process_time


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def _body(i: int) -> bytes:
    return (b"%010d" % i) * (BODY // 10)


def fill(n: int) -> dict[str, float]:
    """RSS of n messages pushed through the manager into the memory store."""

    async def go() -> dict[str, float]:
        store = MemoryStore()
        await store.open()
        m = QueueManager(store)
        await m.start()
        await m.push("warm", make_item(b"x", b"application/octet-stream"))
        gc.collect()
        before = _rss_mb()
        t0 = _cpu()
        for i in range(n):
            await m.push("depth", make_item(_body(i), b"application/octet-stream"))
        fill_s = _cpu() - t0
        gc.collect()
        t0 = _cpu()
        gc.collect()
        gc_ms = (_cpu() - t0) * 1000
        after = _rss_mb()
        assert store.size("depth") == n
        return {
            "n": n,
            "rss_before_mb": round(before, 1),
            "rss_after_mb": round(after, 1),
            "rss_delta_mb": round(after - before, 1),
            "bytes_per_message": round((after - before) * 2**20 / n, 1),
            "push_us_during_fill": round(fill_s / n * 1e6, 2),
            "full_gc_ms": round(gc_ms, 1),
            "memory_stat_mb": round(store.memory("depth") / 2**20, 1),
        }

    return asyncio.run(go())


def ops(depth: int, count: int) -> dict[str, float]:
    """µs per push, pull and ack on a table already holding ``depth`` messages: ``count`` of
    each in turn, then ``count`` pulls each followed by its ack."""
    clock = ManualClock()
    t = QueueTable("q")
    items = [make_item(_body(i), b"application/octet-stream") for i in range(1000)]
    # Operations at increasing times 1 µs apart, as a live queue gets them; pushes all due by
    # the time of the first pull.
    seq = 0
    base = clock.now()
    for seq in range(depth):
        t.enqueue(items[seq % 1000], 2, 0, base + seq * 1e-6)
    now = base + 10 + seq * 1e-6
    step = 1e-6
    gc.collect()
    best: dict[str, float] = {}
    for _ in range(3):
        t0 = _cpu()
        for i in range(seq + 1, seq + 1 + 2 * count):
            t.enqueue(items[i % 1000], 2, 0, base + i * step)
        seq += 2 * count
        now = base + 10 + seq * step
        t1 = _cpu()
        got = [t.dequeue(30, now + i * step) for i in range(count)]
        t2 = _cpu()
        for g in got:
            assert g is not None
            t.done(g[0].uuid, now)
        t3 = _cpu()
        # As workload 5 does: one delivery at a time, acked before the next pull.
        for i in range(count):
            g = t.dequeue(30, now + i * step)
            assert g is not None
            t.done(g[0].uuid, now + i * step)
        t4 = _cpu()
        laps = (("push_us", (t1 - t0) / 2), ("pull_us", t2 - t1), ("ack_us", t3 - t2), ("pull_ack_us", t4 - t3))
        for k, v in laps:
            best[k] = min(best.get(k, 1e9), v / count * 1e6)
    return {"depth": depth, **{k: round(v, 3) for k, v in best.items()}}


def manager_ops(count: int) -> dict[str, float]:
    """µs per push and per pull+ack through the QueueManager and the memory store."""

    async def go() -> dict[str, float]:
        store = MemoryStore()
        m = QueueManager(store)
        await m.start()
        item = make_item(_body(0), b"application/octet-stream")
        best: dict[str, float] = {}
        for _ in range(3):
            t0 = _cpu()
            for _ in range(count):
                await m.push("q", item)
            t1 = _cpu()
            for _ in range(count):
                d = await m.pull("q", 0)
                assert d is not None
                await m.ack("q", d.message.uuid)
            t2 = _cpu()
            for k, v in (("mgr_push_us", t1 - t0), ("mgr_pull_ack_us", t2 - t1)):
                best[k] = min(best.get(k, 1e9), v / count * 1e6)
        return {k: round(v, 3) for k, v in best.items()}

    return asyncio.run(go())


def _part(args: list[str]) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-m", "bench.studies.memory_depth", "--part", *args],
                         check=True, capture_output=True, text=True, timeout=600)  # fmt: skip
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.studies.memory_depth", description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=1_000_000, help="messages to fill (default 1M)")
    ap.add_argument("--ops", type=int, default=100_000, help="operations per timing round")
    ap.add_argument("--part", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.part:
        kind, *rest = a.part
        if kind == "fill":
            r = fill(int(rest[0]))
        elif kind == "ops":
            r = ops(int(rest[0]), int(rest[1]))
        else:
            r = manager_ops(int(rest[0]))
        print(json.dumps(r))
        return
    print(f"python {sys.version.split()[0]}, pid {os.getpid()}")
    print(json.dumps(_part(["fill", str(a.n)])))
    print(json.dumps(_part(["ops", "1000", str(a.ops)])))
    print(json.dumps(_part(["ops", str(a.n), str(a.ops)])))
    print(json.dumps(_part(["mgr", str(a.ops)])))


if __name__ == "__main__":
    main()
