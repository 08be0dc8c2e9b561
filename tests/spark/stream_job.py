"""A streaming query in a process of its own, for the tests that kill its driver with SIGKILL
(and the same query on the tests' own session, to restart it there).

    python stream_job.py CONFIG_JSON

CONFIG: url, queue, checkpoint, out (a directory), job (``windows``: a watermarked one-minute
window count, by the window's start in epoch seconds, of the events ``"<epoch seconds>,<n>"``,
output mode update; ``bodies``: the bodies as they come), ackOn, maxMessagesPerTrigger,
stall_from (the first batch with output whose id is at least this one stalls for ever after
writing ``stalled-<id>``, to be killed; -1: none),
hold (once caught up, write ``idle`` and wait for ever, to be killed).

Each batch's output goes to ``out/batch-<id>.json`` (written whole, then renamed: a re-run batch
replaces its file, as an idempotent sink would). The process runs until every available message
was processed, then writes ``out/finished`` and stops the query cleanly.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery


def write_json(path: Path, doc: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def start_query(spark: SparkSession, config: dict[str, Any]) -> StreamingQuery:
    """The query of ``config`` on ``spark``, started."""
    from pyspark.sql import functions as F

    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    df = (
        spark.readStream.format("lmq")
        .option("url", config["url"])
        .option("queue", config["queue"])
        .option("timeout", "0.2")
        .option("ackOn", config.get("ackOn", "trigger"))
        .option("maxMessagesPerTrigger", str(config["maxMessagesPerTrigger"]))
        .load()
    )
    if config["job"] == "windows":
        fields = F.split(F.col("body").cast("string"), ",")
        events = df.select(F.timestamp_seconds(fields.getItem(0).cast("double")).alias("ts"))
        result = events.withWatermark("ts", "30 seconds").groupBy(F.window("ts", "1 minute")).count()
        rows = result.select(F.unix_timestamp("window.start").alias("w"), "count")
        mode = "update"
    else:
        rows = df.select(F.col("body").cast("string").alias("b"))
        mode = "append"
    stall_from = int(config.get("stall_from", -1))

    def sink(batch: DataFrame, batch_id: int) -> None:
        got = [list(r) for r in batch.collect()]
        if got and 0 <= stall_from <= batch_id:
            (out / f"stalled-{batch_id}").touch()
            threading.Event().wait()  # until SIGKILL
        write_json(out / f"batch-{batch_id}.json", got)

    writer = rows.writeStream.outputMode(mode).foreachBatch(sink)
    return writer.option("checkpointLocation", config["checkpoint"]).start()


def main(config: dict[str, Any]) -> None:
    from pylmq.spark import local_session

    spark = local_session(
        "pylmq-stream-job",
        {"spark.driver.memory": "512m", "spark.sql.streaming.stateStore.maintenanceInterval": "600s"},
    )
    out = Path(config["out"])
    query = start_query(spark, config)
    query.processAllAvailable()
    if config.get("hold"):
        (out / "idle").touch()
        threading.Event().wait()  # until SIGKILL
    query.stop()
    (out / "finished").touch()
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
