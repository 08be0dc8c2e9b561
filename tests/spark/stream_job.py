"""A streaming query in a process of its own, for the tests that kill its driver with SIGKILL.

    python stream_job.py CONFIG_JSON

CONFIG: url, queue, checkpoint, out (a directory), job (``windows``: a watermarked one-minute
window count of the events ``"<epoch seconds>,<n>"``, output mode update; ``bodies``: the
bodies as they come), ackOn, maxMessagesPerTrigger, stall_from (the first batch with output whose
id is at least this one stalls for ever after writing ``stalled-<id>``, to be killed; -1: none),
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
from typing import Any


def write_json(path: Path, doc: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def main(config: dict[str, Any]) -> None:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql import functions as F

    from pylmq.spark import register

    out = Path(config["out"])
    out.mkdir(parents=True, exist_ok=True)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pylmq-stream-job")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.streaming.stateStore.maintenanceInterval", "600s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
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
        rows = result.select(F.date_format("window.start", "HH:mm").alias("w"), "count")
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

    query = (
        rows.writeStream.outputMode(mode).foreachBatch(sink).option("checkpointLocation", config["checkpoint"]).start()
    )
    query.processAllAvailable()
    if config.get("hold"):
        (out / "idle").touch()
        threading.Event().wait()  # until SIGKILL
    query.stop()
    (out / "finished").touch()
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
