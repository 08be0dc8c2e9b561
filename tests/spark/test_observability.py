"""What a streaming query shows and how it ends: the source's counts in every progress report, and
a stop that lets the running batch finish."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)
from pyspark.sql import DataFrame, SparkSession

from pylmq.client import HttpClient
from pylmq.spark import stop
from tests.spark.spark_helpers import wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def stream(spark: SparkSession, url: str, queue: str, **options: str) -> DataFrame:
    return spark.readStream.format("lmq").option("url", url).option("queue", queue).options(**options).load()


def source_report(query: Any) -> dict[str, Any]:
    """The source's ``latestOffset`` in the last progress report (Spark gives it as JSON text)."""
    progress = query.lastProgress
    if not progress or not progress["sources"] or not progress["sources"][0].get("latestOffset"):
        return {}
    report: dict[str, Any] = json.loads(progress["sources"][0]["latestOffset"])
    return report


def test_progress_reports_backlog_in_flight_acked_and_redelivered(
    spark: SparkSession, url: str, queue: str, http: HttpClient, tmp_path: Path
) -> None:
    http.push_many(queue, [f"m{i}" for i in range(40)])
    df = stream(spark, url, queue, timeout="0.2", maxMessagesPerTrigger="15")

    def count(batch: DataFrame, _: int) -> None:
        batch.count()

    writer = df.writeStream.foreachBatch(count)
    query = writer.option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        wait_until("the third batch's progress", lambda: source_report(query).get("seq") == 40)
        report = source_report(query)
    finally:
        stop(query)
    # Batches of 15, 15 and 10: when the third was pulled, the first two were acked (each on the
    # trigger after it) and the third's 10 were in flight, all the queue still held.
    assert report["run"], report
    assert (report["acked"], report["inFlight"], report["backlog"], report["redelivered"]) == (30, 10, 10, 0), report


def test_stop_lets_the_running_batch_finish_and_commit(
    spark: SparkSession, url: str, queue: str, http: HttpClient, tmp_path: Path
) -> None:
    http.push_many(queue, [f"m{i}" for i in range(10)])
    started, finished = threading.Event(), threading.Event()

    def slow_sink(batch: DataFrame, batch_id: int) -> None:
        started.set()
        batch.count()  # a Spark job inside the batch, as a real sink runs
        threading.Event().wait(2.0)
        batch.count()
        finished.set()

    checkpoint = tmp_path / "ck"
    df = stream(spark, url, queue, timeout="0.2")
    query = df.writeStream.foreachBatch(slow_sink).option("checkpointLocation", str(checkpoint)).start()
    assert started.wait(60), "the first batch never started"
    stop(query)
    assert finished.is_set(), "stop() returned before the running batch finished"
    assert query.exception() is None
    assert (checkpoint / "commits" / "0").exists(), "the batch that was running must be committed"
