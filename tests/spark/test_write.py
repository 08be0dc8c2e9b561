"""Batch writes with ``df.write.format("lmq")`` into a real node, from a real local Spark."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)
from pyspark.sql import SparkSession
from pyspark.sql.functions import col, lit, when

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread
from tests.spark.spark_helpers import drain, queue_size

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_writing_10000_rows_pushes_exactly_10000_messages(
    spark: SparkSession, url: str, queue: str, lmq_node: NodeThread
) -> None:
    df = spark.range(10_000).selectExpr("cast(id AS string) AS body").repartition(4)
    df.write.format("lmq").option("url", url).option("queue", queue).mode("append").save()
    messages = drain(url, queue)
    bodies = Counter(m.body for m in messages)
    assert len(messages) == 10_000, f"expected 10000 messages, found {len(messages)}"
    assert bodies == Counter(str(i).encode() for i in range(10_000))
    assert queue_size(lmq_node, queue) == 0


def test_queue_column_routes_rows_and_content_type_is_kept(spark: SparkSession, url: str, queue: str) -> None:
    rows = [(f"{queue}-a", b"1", "application/json"), (f"{queue}-b", b"2", None), (None, b"3", "text/csv")]
    df = spark.createDataFrame(rows, "queue STRING, body BINARY, content_type STRING")
    df.write.format("lmq").option("url", url).option("queue", f"{queue}-default").mode("append").save()
    got = {
        name: sorted((m.body, m.content_type) for m in drain(url, name))
        for name in (f"{queue}-a", f"{queue}-b", f"{queue}-default")
    }
    assert got == {
        f"{queue}-a": [(b"1", "application/json")],
        f"{queue}-b": [(b"2", "application/octet-stream")],
        f"{queue}-default": [(b"3", "text/csv")],
    }


def test_write_over_msgpack_rpc(spark: SparkSession, url: str, rpc_url: str, queue: str) -> None:
    df = spark.createDataFrame([(b"\x00\x01",), (b"two",)], "body BINARY")
    df.write.format("lmq").option("url", rpc_url).option("queue", queue).mode("append").save()
    assert len(drain(url, queue)) == 2


def test_fan_out_write_with_qre_reaches_every_existing_matching_queue(
    spark: SparkSession, url: str, queue: str, http: HttpClient
) -> None:
    for suffix in ("x", "y"):
        http.update_props(f"{queue}.{suffix}", {"retry": 1})
    df = spark.createDataFrame([("hello",)], "body STRING")
    df.write.format("lmq").option("url", url).option("qre", f"^{queue}\\.").mode("append").save()
    assert [m.body for m in drain(url, f"{queue}.x")] == [b"hello"]
    assert [m.body for m in drain(url, f"{queue}.y")] == [b"hello"]


def test_extra_columns_fail_before_anything_is_pushed(
    spark: SparkSession, url: str, queue: str, lmq_node: NodeThread
) -> None:
    df = spark.createDataFrame([("k", "v")], "key STRING, body STRING")
    with pytest.raises(Exception, match="select away key"):
        df.write.format("lmq").option("url", url).option("queue", queue).mode("append").save()
    assert queue_size(lmq_node, queue) == 0


def test_overwrite_is_refused(spark: SparkSession, url: str, queue: str, lmq_node: NodeThread) -> None:
    df = spark.createDataFrame([("v",)], "body STRING")
    with pytest.raises(Exception, match="cannot be overwritten"):
        df.write.format("lmq").option("url", url).option("queue", queue).mode("overwrite").save()
    assert queue_size(lmq_node, queue) == 0


def test_unreachable_node_fails_the_job_with_the_addresses_tried(spark: SparkSession, queue: str) -> None:
    from pylmq.node.testing import refused_url

    dead = refused_url()
    df = spark.createDataFrame([("v",)], "body STRING")
    with pytest.raises(Exception, match="no node could be connected to") as info:
        df.write.format("lmq").option("url", dead).option("queue", queue).mode("append").save()
    assert dead in str(info.value)


def test_a_partition_that_fails_midway_loses_nothing_and_its_rerun_duplicates_the_pushed_rows(
    spark: SparkSession, url: str, queue: str
) -> None:
    """A write task that fails after pushing part of its rows leaves those rows pushed (a push
    cannot be taken back) and loses none: running the write again (as Spark runs a failed task
    again) pushes every row, those of the first attempt a second time. The failure here is a
    row whose queue name the node refuses, in the middle of the only partition."""
    rows = spark.range(1000).coalesce(1)
    target = when(col("id") == 700, lit("schema")).otherwise(lit(queue))
    bad = rows.select(target.alias("queue"), col("id").cast("string").alias("body"))
    with pytest.raises(Exception, match="reserved"):
        bad.write.format("lmq").option("url", url).option("pipeline", "8").mode("append").save()
    first = Counter(m.body for m in drain(url, queue))
    # Rows go in batches per queue: the failed task's batches to the good queue may have been
    # pushed whole, rows after the bad one included, but none twice.
    assert set(first.values()) <= {1}, "no row may be pushed twice by one attempt"

    fixed = rows.select(lit(queue).alias("queue"), col("id").cast("string").alias("body"))
    fixed.write.format("lmq").option("url", url).mode("append").save()
    second = Counter(m.body for m in drain(url, queue))
    assert second == Counter(str(i).encode() for i in range(1000)), "the second attempt must push every row"


def test_an_aborted_write_says_failed_tasks_may_have_pushed(caplog: pytest.LogCaptureFixture) -> None:
    # A failed task pushes whole batches before it fails, and reports no count: the abort must
    # not tell "0 messages stay pushed" when a failed task left messages in the queue.
    from pylmq.spark._batch import LmqCommit, LmqStreamWriter, LmqWriter
    from pylmq.spark._options import write_options
    from pylmq.spark._rows import push_columns

    opts = write_options({"url": "http://127.0.0.1:1", "queue": "q"})
    cols = push_columns([("body", "string")], api=opts.api, default_queue="q", qre=None)
    with caplog.at_level("WARNING", logger="pylmq.spark"):
        LmqWriter(opts, cols).abort([LmqCommit(3), None])
        LmqStreamWriter(opts, cols).abort([None], 7)
    batch, stream = (r.getMessage() for r in caplog.records)
    assert "3 messages pushed by 1 finished tasks" in batch
    assert "the 1 failed tasks may have pushed any of their rows too" in batch
    assert "batch 7 aborted" in stream and "the 1 failed tasks may have pushed" in stream
