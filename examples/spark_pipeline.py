"""A streaming pipeline on pylmq queues: JSON events in, per-key windowed totals out.

    queue EVENTS ──readStream "lmq"──▶ parse JSON ──▶ watermark ──▶ per (key, 1-minute window):
        events, total ──foreachBatch──▶ Parquet (one directory per micro-batch)
                                   └──▶ queue RESULTS (one JSON message per window)

Delivery, end to end:

* An event is acked in EVENTS only after the micro-batch that read it is committed by Spark,
  which happens after ``write_results`` returned, i.e. after *both* the Parquet files and the
  result messages were written. A failure anywhere before that leaves the event in the queue
  (in processing; redelivered when the query is gone).
* The windows' running counts live in the checkpoint's state store, committed with the batch, so
  an event acked there is never needed again.
* A micro-batch re-run after a failure rewrites its own Parquet directory (``batch=N``, mode
  overwrite): Parquet holds each window once. The results queue may get a window twice (LMQ has
  no idempotent push): consumers key results by ``(key, window_start)``.
* An event whose body is not JSON with ``key``, ``value`` and ``time`` is dropped from the totals
  (and still acked): route such data to a dead-letter queue upstream if it matters.

Run against a node::

    python examples/spark_pipeline.py --url http://127.0.0.1:9980 --events events \\
        --results results --out /tmp/pipeline

or on generated data with a node of its own (``--demo``), which exits 0 when Parquet and the
results queue both hold exactly the expected totals.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.functions import col, count, from_json, lit, struct, to_json, window
from pyspark.sql.functions import sum as sum_
from pyspark.sql.streaming import StreamingQuery

from pylmq.spark import register, stop

EVENT_SCHEMA = "key STRING, value DOUBLE, time TIMESTAMP"
WINDOW = "1 minute"
LATENESS = "30 seconds"


@dataclass(frozen=True)
class Pipeline:
    url: str
    events: str
    results: str
    out: str
    """Directory for ``parquet/`` (results) and ``checkpoint/`` (Spark's)."""

    @property
    def parquet(self) -> str:
        return os.path.join(self.out, "parquet")

    @property
    def checkpoint(self) -> str:
        return os.path.join(self.out, "checkpoint")


def totals(events: DataFrame) -> DataFrame:
    """Per key and 1-minute event-time window: how many events and the sum of their values.
    A window is emitted once the watermark (latest event time - 30 s) has passed its end."""
    parsed = events.select(from_json(col("body").cast("string"), EVENT_SCHEMA).alias("e")).select("e.*")
    valid = parsed.where(col("key").isNotNull() & col("time").isNotNull() & col("value").isNotNull())
    return (
        valid.withWatermark("time", LATENESS)
        .groupBy(window("time", WINDOW), "key")
        .agg(count("*").alias("events"), sum_("value").alias("total"))
        .select(
            col("key"),
            col("window.start").alias("window_start"),
            col("window.end").alias("window_end"),
            col("events"),
            col("total"),
        )
    )


def result_writer(p: Pipeline) -> Callable[[DataFrame, int], None]:
    def write_results(batch: DataFrame, batch_id: int) -> None:
        batch.persist()
        try:
            if batch.isEmpty():
                return
            # Parquet first, per batch and overwritten on a re-run: a replay leaves no duplicate.
            batch.write.mode("overwrite").parquet(os.path.join(p.parquet, f"batch={batch_id}"))
            messages = batch.select(
                to_json(struct("key", "window_start", "window_end", "events", "total")).alias("body"),
                lit("application/json").alias("content_type"),
            )
            messages.write.format("lmq").option("url", p.url).option("queue", p.results).mode("append").save()
        finally:
            batch.unpersist()

    return write_results


def start(spark: SparkSession, p: Pipeline, *, max_per_trigger: int = 1000) -> StreamingQuery:
    # An installed pylmq needs no register() (Spark finds pyspark_lmq); run from a checkout, it does.
    register(spark)
    events = (
        spark.readStream.format("lmq")
        .option("url", p.url)
        .option("queue", p.events)
        .option("maxMessagesPerTrigger", str(max_per_trigger))
        .option("timeout", "0.5")
        .load()
    )
    return (
        totals(events)
        .writeStream.outputMode("append")
        .foreachBatch(result_writer(p))
        .option("checkpointLocation", p.checkpoint)
        .queryName(f"lmq-pipeline-{p.events}")
        .start()
    )


# -- generated data -------------------------------------------------------------------------------


Expected = dict[tuple[str, int], tuple[int, float]]
"""(key, window start in Unix seconds) -> (events, total)."""


def generate_events(keys: int, windows: int, per_window: int, seed: int = 0) -> tuple[list[str], Expected]:
    """Events for ``keys`` keys over ``windows`` consecutive minutes, out of order by up to 20 s
    (less than the 30 s lateness, so none is dropped as late), then one event minutes later
    whose only job is to move the watermark past every generated window (its own window stays
    open, so it is not expected back), and one body that is not JSON (dropped)."""
    rng = random.Random(seed)
    base = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    timed: list[tuple[float, str]] = []
    expected: Expected = {}
    for w in range(windows):
        start = base + timedelta(minutes=w)
        for k in range(keys):
            key = f"sensor-{k}"
            values = [round(rng.uniform(0, 10), 2) for _ in range(per_window)]
            expected[(key, int(start.timestamp()))] = (per_window, round(sum(values), 6))
            for v in values:
                at = start + timedelta(seconds=rng.uniform(0, 59.9))
                event = json.dumps({"key": key, "value": v, "time": at.isoformat(timespec="milliseconds")})
                timed.append((at.timestamp() + rng.uniform(0, 20), event))
    events = [e for _, e in sorted(timed)]
    closing = base + timedelta(minutes=windows + 5)
    events.append(json.dumps({"key": "clock", "value": 0, "time": closing.isoformat(timespec="milliseconds")}))
    events.append("not json: dropped from the totals")
    return events, expected


def read_parquet(spark: SparkSession, p: Pipeline) -> Expected:
    if not Path(p.parquet).exists():
        return {}
    rows = spark.read.parquet(p.parquet).select(
        "key", col("window_start").cast("long").alias("start"), "events", "total"
    )
    return {(r.key, r.start): (r.events, round(r.total, 6)) for r in rows.collect()}


def parse_result(body: bytes) -> tuple[tuple[str, int], tuple[int, float]]:
    doc: dict[str, Any] = json.loads(body)
    start = datetime.fromisoformat(doc["window_start"])
    return (doc["key"], int(start.timestamp())), (int(doc["events"]), round(float(doc["total"]), 6))


# -- command line ---------------------------------------------------------------------------------


def demo(spark: SparkSession, out: str, *, keys: int, windows: int, per_window: int, deadline: float) -> int:
    from pylmq.client import HttpClient
    from pylmq.node.testing import NodeThread

    events, expected = generate_events(keys, windows, per_window)
    with NodeThread() as node:
        p = Pipeline(node.http_url, "events", "results", out)
        with HttpClient(p.url) as http:
            # A count redeliveries cannot use up; "infinity" would do here, not in a mixed cluster.
            http.update_props(p.events, {"retry": 1_000_000})
            for e in events:
                http.push(p.events, e, "application/json")
            query = start(spark, p, max_per_trigger=max(1, len(events) // 3))
            got: Expected = {}
            end = time.monotonic() + deadline
            try:
                while len(got) < len(expected) and time.monotonic() < end:
                    msg = http.pull(p.results, 0.5)
                    if msg is not None:
                        key, value = parse_result(msg.body)
                        got[key] = value
                        http.ack(msg.queue, msg.id)
                if query.exception() is not None:
                    print(f"query failed: {query.exception()}", file=sys.stderr)
                    return 1
            finally:
                stop(query)  # between batches: query.stop() would kill the one running
        in_parquet = read_parquet(spark, p)
    ok = got == expected and in_parquet == expected
    print(
        f"{len(events)} events -> {len(got)} windows in the results queue, {len(in_parquet)} in Parquet "
        f"({'as expected' if ok else 'NOT as expected'})"
    )
    return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", help="node URL(s), comma separated (http://host:9980)")
    ap.add_argument("--events", default="events")
    ap.add_argument("--results", default="results")
    ap.add_argument("--out", help="directory for parquet/ and checkpoint/ (default: a new temporary one)")
    ap.add_argument("--demo", action="store_true", help="start a local node and run on generated events")
    ap.add_argument("--keys", type=int, default=3)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--per-window", type=int, default=20)
    ap.add_argument(
        "--shuffle-partitions", type=int, default=4, help="state partitions (fixed by the first checkpoint)"
    )
    ap.add_argument("--deadline", type=float, default=120.0, help="demo: seconds to wait for the results")
    args = ap.parse_args(argv)
    if not args.demo and not args.url:
        ap.error("give --url, or --demo to run on generated data")
    out = args.out or tempfile.mkdtemp(prefix="lmq-pipeline-")
    # Spark's Python workers must import pylmq: run them with this interpreter unless told otherwise.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName("lmq-pipeline")
    spark = builder.config("spark.sql.shuffle.partitions", str(args.shuffle_partitions)).getOrCreate()
    if args.demo:
        return demo(
            spark, out, keys=args.keys, windows=args.windows, per_window=args.per_window, deadline=args.deadline
        )
    query = start(spark, Pipeline(args.url, args.events, args.results, out))
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    sys.exit(main())
