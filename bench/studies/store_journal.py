"""Why the durable store is an append-only journal: measurements behind the choice
(docs/decisions/durable-journal.md).

    python -m bench.studies.store_journal                 # all sections (a few minutes)
    python -m bench.studies.store_journal commit mix      # group commit throughput; log vs SQLite
    python -m bench.studies.store_journal compaction --sizes 100000,1000000

Sections:

- ``commit``: clients each doing push + barrier in a loop, per fsync policy: operations per
  second, group commits, operations per group.
- ``mix``: the same push / pull / ack cycle on the in-process tables, made durable two ways:
  the journal (``DurableStore``) and SQLite in WAL mode with one transaction per group commit
  (``SqliteStore`` below: the same tables, each mutation an INSERT/UPDATE/DELETE executed in a
  worker thread). Both sync per group (``fdatasync`` / ``synchronous=FULL``) or not at all.
- ``compaction``: for a queue of N messages, the event loop stall while compaction freezes the
  state, the time the snapshot thread takes, the worst loop lateness seen meanwhile by a 1 ms
  ticker, and the time a restart takes to recover N messages.

Numbers depend on the disk and on how busy the machine is; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgpack

from pylmq.core.message import Item, StoredMessage, make_item
from pylmq.store.durable import DurableStore
from pylmq.store.local import LocalStore

BODY = b"x" * 100


# -- SQLite with group commit, for comparison --------------------------------------------------


class _SqlJournal:
    def __init__(self) -> None:
        self.ops: list[tuple[str, tuple[Any, ...]]] = []
        self.fut: asyncio.Future[None] | None = None
        self.wake = asyncio.Event()

    def put(self, queue: str, msg: StoredMessage) -> None:
        content = msgpack.packb(msg.content, use_bin_type=True)
        row = (queue, msg.uuid, msg.ts, msg.state.value, msg.type.value, msg.retry, content)
        self.ops.append(("INSERT INTO messages VALUES (?,?,?,?,?,?,?)", row))
        self.wake.set()

    def move(self, queue: str, old_uuid: bytes, msg: StoredMessage) -> None:
        row = (msg.uuid, msg.ts, msg.state.value, msg.retry, old_uuid)
        self.ops.append(("UPDATE messages SET uuid=?, ts=?, state=?, retry=? WHERE uuid=?", row))
        self.wake.set()

    def append(self, queue: str, uuid: bytes, item: Item) -> None:
        raise NotImplementedError("accumulation is not part of this benchmark")

    def delete(self, queue: str, uuid: bytes) -> None:
        self.ops.append(("DELETE FROM messages WHERE uuid=?", (uuid,)))
        self.wake.set()


class SqliteStore(LocalStore):
    """The same in-process tables, made durable by SQLite (WAL) with a transaction per group."""

    kind = "sqlite"

    def __init__(self, path: Path, sync: bool) -> None:
        self._j = _SqlJournal()
        super().__init__(None, self._j)
        self.path, self.sync = path, sync
        self.groups = 0

    async def open(self) -> None:
        self._io = ThreadPoolExecutor(1)
        self._db = await asyncio.get_running_loop().run_in_executor(self._io, self._connect)
        self._task = asyncio.get_running_loop().create_task(self._run())

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={'FULL' if self.sync else 'OFF'}")
        db.execute(
            "CREATE TABLE IF NOT EXISTS messages (queue TEXT, uuid BLOB PRIMARY KEY, ts REAL, state TEXT,"
            " type TEXT, retry INTEGER, content BLOB) WITHOUT ROWID"
        )
        return db

    def _commit(self, ops: list[tuple[str, tuple[Any, ...]]]) -> None:
        db = self._db
        db.execute("BEGIN")
        for sql, row in ops:
            db.execute(sql, row)
        db.execute("COMMIT")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        j = self._j
        while True:
            if not j.ops:
                j.wake.clear()
                await j.wake.wait()
                continue
            ops, fut = j.ops, j.fut or loop.create_future()
            j.ops, j.fut = [], None
            await loop.run_in_executor(self._io, self._commit, ops)
            self.groups += 1
            fut.set_result(None)

    async def barrier(self) -> None:
        j = self._j
        if j.ops:
            if j.fut is None:
                j.fut = asyncio.get_running_loop().create_future()
            await asyncio.shield(j.fut)

    async def close(self) -> None:
        while self._j.ops:
            await self.barrier()
        self._task.cancel()
        self._db.close()
        self._io.shutdown()


# -- workloads -----------------------------------------------------------------------------------


async def push_clients(store: LocalStore, clients: int, seconds: float) -> int:
    done = 0
    stop = time.monotonic() + seconds
    item = make_item(BODY)

    async def client() -> None:
        nonlocal done
        while time.monotonic() < stop:
            await store.enqueue("q", item, 2, 0)
            await store.barrier()
            done += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return done


async def cycle_clients(store: LocalStore, clients: int, seconds: float) -> int:
    """Each client: push (answered after barrier), pull (barrier), ack (barrier)."""
    done = 0
    stop = time.monotonic() + seconds
    item = make_item(BODY)

    async def client() -> None:
        nonlocal done
        while time.monotonic() < stop:
            await store.enqueue("q", item, 2, 0)
            await store.barrier()
            got = await store.dequeue("q", 30)
            await store.barrier()
            if got is not None:
                await store.done("q", got[0].uuid)
                await store.barrier()
            done += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return done


async def bench_commit(seconds: float) -> None:
    print("\n## group commit: clients doing push + barrier (100-byte bodies)\n")
    print("| fsync | clients | pushes/s | groups/s | pushes per group |")
    print("| --- | --- | --- | --- | --- |")
    for policy in ("always", "interval", "none"):
        for clients in (1, 16, 256):
            with tempfile.TemporaryDirectory() as d:
                s = DurableStore(d, fsync=policy)
                await s.open()
                n = await push_clients(s, clients, seconds)
                groups = s.stats.groups
                await s.close()
            print(f"| {policy} | {clients} | {n / seconds:,.0f} | {groups / seconds:,.0f} | {n / max(groups, 1):.1f} |")


def _io_bytes() -> tuple[int, int]:
    """(bytes passed to write calls, bytes sent to storage) by this process so far."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["wchar"]), int(fields["write_bytes"])


async def _mix_once(kind: str, sync: bool, clients: int, seconds: float) -> tuple[float, int, float, float]:
    with tempfile.TemporaryDirectory() as d:
        store: DurableStore | SqliteStore
        if kind == "journal":
            store = DurableStore(d, fsync="always" if sync else "none")
        else:
            store = SqliteStore(Path(d) / "q.db", sync)
        await store.open()
        w0, b0 = _io_bytes()
        n = await cycle_clients(store, clients, seconds)
        w1, b1 = _io_bytes()
        groups = store.stats.groups if isinstance(store, DurableStore) else store.groups
        await store.close()
    return n / seconds, groups, (w1 - w0) / max(n, 1), (b1 - b0) / max(n, 1)


async def bench_mix(seconds: float, reps: int = 3) -> None:
    print("\n## push/pull/ack cycles, journal vs SQLite WAL (one transaction per group)\n")
    print(f"Median of {reps} interleaved runs of {seconds} s; bytes are per cycle (3 mutations).\n")
    print("| store | sync per group | clients | cycles/s (median) | runs | written per cycle | to storage per cycle |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for sync in (True, False):
        for clients in (1, 64):
            runs: dict[str, list[tuple[float, int, float, float]]] = {"journal": [], "sqlite": []}
            for _ in range(reps):
                for kind in runs:
                    runs[kind].append(await _mix_once(kind, sync, clients, seconds))
            for kind, rs in runs.items():
                rate = statistics.median(r[0] for r in rs)
                wchar = statistics.median(r[2] for r in rs)
                wbytes = statistics.median(r[3] for r in rs)
                spread = ", ".join(f"{r[0]:,.0f}" for r in rs)
                print(f"| {kind} | {sync} | {clients} | {rate:,.0f} | {spread} | {wchar:,.0f} B | {wbytes:,.0f} B |")


async def ticker(lateness: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(0.001)
        lateness.append(loop.time() - t - 0.001)


class GcWatch:
    """The longest cyclic-GC pass: with millions of live objects a full pass holds the GIL
    for a long time, whatever thread triggered it."""

    def __init__(self) -> None:
        self.longest = 0.0
        self._t = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t = time.perf_counter()
        else:
            self.longest = max(self.longest, time.perf_counter() - self._t)


async def bench_compaction(sizes: list[int]) -> None:
    print("\n## compaction and recovery of a queue of N messages (100-byte bodies)\n")
    print("Loop lateness: a 1 ms ticker with light push traffic, during compaction and, for reference,")
    print("during 1 s of the same traffic without it.\n")
    print("| N | freeze (loop) | snapshot thread | worst lateness | p99 | worst w/o | longest GC | segment | recover |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n in sizes:
        d = tempfile.mkdtemp()
        try:
            s = DurableStore(d, fsync="none", compact_min_bytes=1 << 40)
            await s.open()
            item = make_item(BODY, "text/plain")
            for i in range(n):
                await s.enqueue("q", item, 2, 0)
                if i % 10000 == 0:
                    await s.barrier()
            await s.barrier()
            gc.collect()
            lateness: list[float] = []
            stop = asyncio.Event()
            tick = asyncio.create_task(ticker(lateness, stop))
            await asyncio.sleep(0.05)
            lateness.clear()
            # The same light traffic without compaction first: the machine's own noise.
            until = time.monotonic() + 1.0
            while time.monotonic() < until:
                await s.enqueue("q", item, 2, 0)
                await s.barrier()
                await asyncio.sleep(0.001)
            base = max(lateness)
            lateness.clear()
            watch = GcWatch()
            gc.callbacks.append(watch)
            t0 = time.perf_counter()
            s.start_compaction()
            freeze = time.perf_counter() - t0
            # Light traffic meanwhile: it must go on being answered.
            while s.stats.compactions == 0:
                await s.enqueue("q", item, 2, 0)
                await s.barrier()
                await asyncio.sleep(0.001)
            stop.set()
            await tick
            gc.callbacks.remove(watch)
            snap = s.stats.last_compaction_seconds
            seg = s.stats.segment_bytes
            await s.close()
            del s
            gc.collect()
            t0 = time.perf_counter()
            s2 = DurableStore(d)
            await s2.open()
            recovery = time.perf_counter() - t0
            assert s2.size("q") >= n
            await s2.close()
            del s2
            gc.collect()
            p99 = statistics.quantiles(lateness, n=100)[98] if len(lateness) > 100 else max(lateness)
            print(
                f"| {n:,} | {freeze * 1000:.1f} ms | {snap:.2f} s | {max(lateness) * 1000:.1f} ms "
                f"| {p99 * 1000:.1f} ms | {base * 1000:.1f} ms | {watch.longest * 1000:.1f} ms "
                f"| {seg / 1e6:.0f} MB | {recovery:.2f} s |"
            )
        finally:
            shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.studies.store_journal", description=__doc__.split("\n\n")[0])
    p.add_argument("sections", nargs="*", default=["commit", "mix", "compaction"])
    p.add_argument("--seconds", type=float, default=2.0, help="per measurement (default %(default)s)")
    p.add_argument("--sizes", default="100000,1000000", help="queue sizes for compaction")
    args = p.parse_args(argv)
    env = f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} cpus"
    print(f"{env}, load average {os.getloadavg()[0]:.1f}, files in {tempfile.gettempdir()}")

    async def run() -> None:
        if "commit" in args.sections:
            await bench_commit(args.seconds)
        if "mix" in args.sections:
            await bench_mix(args.seconds)
        if "compaction" in args.sections:
            await bench_compaction([int(x) for x in args.sizes.split(",")])

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
