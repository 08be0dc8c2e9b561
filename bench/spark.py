"""Spark target: rows per second through the ``lmq`` data source, with Parquet as the yardstick.

    python -m bench --spark                      # alone (about a minute); make bench SPARK=1
    python bench/spark.py --rows 200000 --out x  # the same, as a script (see "before" below)

One Spark session (``local[2]``) and one pylmq node (durable store, fsync ``interval``, its own
process, so its CPU is its own) on this machine. Each round, on fresh queues:

- ``generator``: the rows (``spark.range(N)`` as ``body`` strings ``event-<n>``) written to
  Spark's ``noop`` sink: what making the rows costs, to show it is not the bottleneck;
- ``write``: the same rows into a queue (``df.write.format("lmq")``);
- ``read+ack``: every message read back (``spark.read.format("lmq")``, checkpointed locally,
  counted) and acked (``ack(df)``);
- ``parquet write`` / ``parquet read``: the same rows to and from Parquet, in the same session.

Reported per step: rows/s (best of the rounds: other load on a shared host only slows a run
down) and the node's CPU over the step as a share of one core (100 % = one core busy). Only the
public data source API is used (``maxMessages`` is given, ``ack`` follows an action), so the
script also measures an older pylmq: put that checkout first on PYTHONPATH and run the file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a file (to measure another checkout's pylmq): bench/ is not a package then.
    sys.path.append(str(Path(__file__).resolve().parent.parent))

from bench.procs import Proc, free_port, wait_port

__all__ = ["run_spark"]

STEPS = ("generator", "write", "read+ack", "  read", "  ack", "parquet write", "parquet read")


@contextmanager
def _node(scratch: Path) -> Iterator[tuple[Proc, str]]:
    port = free_port()
    data = scratch / "spark-node"
    shutil.rmtree(data, ignore_errors=True)
    data.mkdir(parents=True)
    argv = [
        sys.executable, "-m", "pylmq", "--http", f"127.0.0.1:{port}", "--rpc", f"127.0.0.1:{free_port()}",
        "--qs", "off",
        "--store", "durable", "--data-dir", str(data / "data"), "--fsync", "interval",
        "--log-level", "warning", "--statsd", "off", "--stats-interval", "0",
    ]  # fmt: skip
    proc = Proc(argv, name="pylmq-spark", log=data / "server.log", cwd=data)
    try:
        if not wait_port(port, time.monotonic() + 30, proc.popen):
            raise RuntimeError(f"the pylmq node did not start: {proc.tail()[-400:]}")
        yield proc, f"http://127.0.0.1:{port}"
    finally:
        proc.stop()


def _session() -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pylmq.spark import local_session

    spark = local_session("pylmq-bench-spark", {"spark.driver.memory": "2g"})
    return spark


def _timed(proc: Proc, fn: Callable[[], Any]) -> tuple[float, float]:
    """(seconds, node CPU seconds) of ``fn()``."""
    cpu0 = proc.usage().cpu_s
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0, proc.usage().cpu_s - cpu0


def _round(spark: Any, proc: Proc, url: str, rows: int, scratch: Path, n: int) -> dict[str, tuple[float, float]]:
    from pyspark.sql import functions as F

    from pylmq.spark import ack

    queue = f"bench-{n}"
    body = F.concat(F.lit("event-"), F.col("id").cast("string")).alias("body")
    source = spark.range(rows, numPartitions=2).select(body)
    lmq = {"url": url, "queue": queue}
    out: dict[str, tuple[float, float]] = {}
    out["generator"] = _timed(proc, lambda: source.write.format("noop").mode("overwrite").save())
    out["write"] = _timed(proc, lambda: source.write.format("lmq").options(**lmq).mode("append").save())

    held: list[Any] = []

    def read() -> None:
        df = spark.read.format("lmq").options(**lmq).option("maxMessages", str(rows)).load().localCheckpoint()
        got = df.count()
        if got != rows:
            raise RuntimeError(f"read {got} of {rows} rows")
        held.append(df)

    def ack_all() -> None:
        counted = ack(held[0])
        if counted.done != rows:
            raise RuntimeError(f"acked {counted.done} of {rows} rows")

    (r_s, r_cpu), (a_s, a_cpu) = _timed(proc, read), _timed(proc, ack_all)
    out["read+ack"] = (r_s + a_s, r_cpu + a_cpu)
    out["  read"] = (r_s, r_cpu)
    out["  ack"] = (a_s, a_cpu)
    path = str(scratch / f"parquet-{n}")
    out["parquet write"] = _timed(proc, lambda: source.write.mode("overwrite").parquet(path))
    out["parquet read"] = _timed(proc, lambda: spark.read.parquet(path).write.format("noop").mode("overwrite").save())
    return out


def run_spark(
    scratch: Path, rows: int = 200_000, rounds: int = 2, log: Callable[[str], None] = print
) -> dict[str, Any]:
    """Measure; the result holds per step the best rate and the node's CPU share in that run."""
    spark = _session()
    best: dict[str, dict[str, float]] = {}
    try:
        with _node(scratch) as (proc, url):
            for n in range(rounds):
                for step, (secs, cpu) in _round(spark, proc, url, rows, scratch, n).items():
                    rate = rows / secs
                    log(f"  round {n + 1} {step}: {rate:,.0f} rows/s, node CPU {cpu / secs:.0%} of a core")
                    if step not in best or rate > best[step]["rows_per_s"]:
                        best[step] = {"rows_per_s": rate, "seconds": secs, "node_cpu": cpu / secs}
    finally:
        spark.stop()
    import pyspark

    return {"rows": rows, "rounds": rounds, "pyspark": pyspark.__version__, "cpus": os.cpu_count(), "steps": best}


def summary_md(result: dict[str, Any]) -> str:
    steps = result["steps"]
    lines = [
        f"### Spark `lmq` data source ({result['rows']:,} rows, best of {result['rounds']} rounds, "
        f"pyspark {result['pyspark']}, local[2], {result['cpus']} CPUs)",
        "",
        "| step | rows/s | node CPU (share of one core) | vs Parquet |",
        "|---|---:|---:|---:|",
    ]
    ref = {"write": "parquet write", "read+ack": "parquet read"}
    for step in STEPS:
        if step not in steps:
            continue
        s = steps[step]
        vs = ""
        if step in ref and ref[step] in steps:
            vs = f"{steps[ref[step]]['rows_per_s'] / s['rows_per_s']:.1f}x slower"
        cpu = f"{s['node_cpu']:.0%}" if step in ("write", "read+ack", "  read", "  ack") else "-"
        lines.append(f"| {step} | {s['rows_per_s']:,.0f} | {cpu} | {vs} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.partition("\n\n")[0])
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--out", type=Path, help="write spark.json and spark.md there")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="pylmq-bench-spark-") as scratch:
        result = run_spark(Path(scratch), args.rows, args.rounds)
    md = summary_md(result)
    print(md)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "spark.json").write_text(json.dumps(result, indent=2))
        (args.out / "spark.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
