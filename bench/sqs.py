"""Amazon SQS's API: pylmq's SQS endpoint against moto's server, the reference emulator.

Each target serves SQS on 127.0.0.1: pylmq nodes (``--sqs-stores``, memory and durable with
fsync ``interval`` by default) and moto's server (``python -m moto.server``, from the ``bench``
extra's ``moto[server]``), started and stopped by the run, measured in the same run. Two
workloads, each at C = 1, 16, 64 clients with a queue of their own:

- ``sqs_cycle``: SendMessage, ReceiveMessage (1, no wait), DeleteMessage: one message's life;
- ``sqs_batch10``: SendMessageBatch of 10, ReceiveMessage of up to 10, DeleteMessageBatch.

The generator is bench/pygen.py (uvloop, 2 processes, one keep-alive connection per client,
one request at a time, the JSON protocol unsigned: bench/drivers.py ``SqsDriver``). Each cell
reports messages/s, requests/s, the mean and p99 latency of one request, the server's CPU and
the generator's (in % of one core); as in bench/qs.py, a cell whose generator took most of
what the host left it is flagged, since it may measure the generator. moto's server
(Werkzeug's) closes the connection after each answer: its clients dial again, as boto3 does.

    python -m bench --sqs [--sqs-seconds 4] [--sqs-stores memory,durable]
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.cells import fmt, generator_bound, measure_lanes
from bench.model import Cell, Skip
from bench.procs import Proc, free_port, wait_port
from bench.pygen import BATCH, Lane
from bench.targets import Env, Pylmq, Target

__all__ = ["CONCURRENCY", "WORKLOADS", "Moto", "run_sqs", "summary_md"]

WORKLOADS = {"sqs_cycle": "cycle", "sqs_batch10": "batch"}  # workload -> pygen role
CONCURRENCY = (1, 16, 64)
_QUOTA = 10**9  # rounds per lane: the time bound ends a cell


class Moto(Target):
    """moto's server, SQS in memory (its only mode)."""

    name = "moto"
    kind = "sqs"

    def __init__(self, env: Env) -> None:
        self.env = env
        self.port = 0

    def start(self) -> None:
        try:
            import moto
        except ImportError as e:
            raise Skip(f"moto is not installed (pip install 'moto[server]'): {e}") from e
        self.version = moto.__version__
        self.port = free_port()
        argv = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self.proc = Proc(argv, name="moto", log=self.env.scratch / "moto" / "server.log", cwd=self.env.scratch)
        if not wait_port(self.port, time.monotonic() + 60, self.proc.popen):
            tail = self.proc.tail()
            self.stop()
            raise Skip(f"moto's server did not start: {tail[-400:]}")

    def addr(self, protocol: str) -> Any:
        return ["127.0.0.1", self.port]

    def info(self) -> dict[str, Any]:
        return {"server": "python -m moto.server (Werkzeug)", "moto": getattr(self, "version", None)}


def _pylmq(env: Env, store: str) -> Pylmq:
    target = Pylmq(env, store, "interval")
    target.name = f"pylmq-{store}" if store == "memory" else "pylmq-durable-interval"
    return target


def run_sqs(
    env: Env,
    *,
    seconds: float,
    log: Callable[[str], None],
    stores: tuple[str, ...] = ("memory", "durable"),
    concurrency: tuple[int, ...] = CONCURRENCY,
) -> tuple[list[Cell], dict[str, Any]]:
    targets: list[Target] = [*(_pylmq(env, s) for s in stores), Moto(env)]
    cells: list[Cell] = []
    info: dict[str, Any] = {"cpus": os.cpu_count(), "seconds_per_cell": seconds, "targets": {}}
    for target in targets:
        log(f"  {target.name}")
        try:
            target.start()
        except Skip as e:
            log(f"  {target.name} skipped: {e}")
            info["targets"][target.name] = {"skipped": str(e)}
            continue
        try:
            addr = target.addr("sqs")
            if isinstance(target, Pylmq):
                addr = ["127.0.0.1", target.sqs_port]
                if not wait_port(target.sqs_port, time.monotonic() + 10, target.proc.popen if target.proc else None):
                    raise Skip("the SQS port did not open")
            info["targets"][target.name] = target.info()
            for workload, role in WORKLOADS.items():
                for c in concurrency:
                    cells.append(_cell(target, addr, workload, role, c, seconds, log))
        except Skip as e:
            log(f"  {target.name} skipped: {e}")
            info["targets"][target.name] = {"skipped": str(e)}
        finally:
            target.stop()
    info["generator"] = "bench/pygen.py, 2 processes, SQS JSON protocol (bench/drivers.py SqsDriver)"
    return cells, info


def _cell(
    target: Target, addr: list[Any], workload: str, role: str, c: int, seconds: float, log: Callable[[str], None]
) -> Cell:
    cell = Cell(target.name, "sqs", workload, f"c={c}", generator="pygen")
    stamp = f"{role}-{c}-{int(time.time() * 1000) % 10**8}"
    lanes = [Lane(role, f"sqsb-{stamp}-{i}", quota=_QUOTA) for i in range(c)]
    per_round = BATCH if role == "batch" else 1
    # a round is three requests (send, receive, delete), of one message or of a batch
    if not measure_lanes(
        cell, target, "sqs", addr, lanes, seconds=seconds, requests=lambda res: 3 * (res.pushed / per_round)
    ):
        log(f"    {workload} c={c}: failed: {cell.error}")
        return cell
    log(
        f"    {workload:11} c={c:<3} {cell.msgs_per_s or 0:>9,.0f} msgs/s"
        f"  {cell.extra['requests_per_s'] or 0:>8,.0f} req/s"
        f"  mean {cell.extra['mean_ms']} ms  p99 {cell.p99_ms and round(cell.p99_ms, 2)} ms"
        f"  server {cell.server_cpu_pct}%  gen {cell.gen_cpu_pct}%"
    )
    return cell


def summary_md(cells: list[Cell], cpus: int | None = None) -> str:
    cpus = cpus or os.cpu_count() or 1

    mine = [c for c in cells if c.workload in WORKLOADS]
    moto = {(c.workload, c.param): c.msgs_per_s for c in mine if c.target == "moto"}
    rows = []
    for c in mine:
        ref = moto.get((c.workload, c.param))
        ratio = f"{c.msgs_per_s / ref:.1f}x" if c.target != "moto" and c.msgs_per_s and ref else ""
        note = c.error or ("generator-bound" if generator_bound(c, cpus) else "")
        rows.append(
            f"| {c.target} | {c.workload} | {c.param} | {fmt(c.msgs_per_s)} | {ratio} "
            f"| {fmt(c.extra.get('requests_per_s'))} | {fmt(c.extra.get('mean_ms'), 2)} | {fmt(c.p99_ms, 2)} "
            f"| {fmt(c.server_cpu_pct)} | {fmt(c.gen_cpu_pct)} | {note} |"
        )
    return (
        f"## Amazon SQS's API: pylmq against moto's server ({cpus} CPUs; sqs_cycle = SendMessage + "
        f"ReceiveMessage + DeleteMessage, sqs_batch10 = the batch actions with {BATCH} messages)\n\n"
        "| target | workload | clients | msgs/s | x moto | requests/s | mean ms | p99 ms | server CPU % "
        "| gen CPU % | note |\n"
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|\n" + "\n".join(rows) + "\n"
    )
