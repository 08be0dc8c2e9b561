"""The batch API's guard rails: consume()/process() ack only after the work succeeded, and ack(df)
refuses what would ack messages nothing has processed."""

from __future__ import annotations

import pytest
from spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)
from pyspark.sql import DataFrame, SparkSession
from spark_helpers import queue_size

from pylmq.client import HttpClient
from pylmq.client.testing import NodeThread
from pylmq.spark import ack, consume, process

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def read(spark: SparkSession, url: str, queue: str, **options: str) -> DataFrame:
    return spark.read.format("lmq").option("url", url).option("queue", queue).options(**options).load()


def test_ack_refuses_a_cache_that_was_never_filled(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    # The misuse: ack() would fill the cache (pull) and ack before any processing.
    http.push_many(queue, ["a", "b", "c"])
    df = read(spark, url, queue).cache()
    with pytest.raises(Exception, match=r"ack\(df\) refused: its cache\(\) was never filled"):
        ack(df)
    assert queue_size(lmq_node, queue) == 3, "nothing may be acked"
    assert len(http.pull_many(queue, 10, 0)) == 3, "nothing may even be pulled"
    df.unpersist()


def test_ack_refuses_a_lazy_checkpoint_not_yet_written(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.push(queue, "a")
    with pytest.raises(Exception, match=r"localCheckpoint\(eager=False\) was never written"):
        ack(read(spark, url, queue).localCheckpoint(eager=False))
    assert queue_size(lmq_node, queue) == 1


def test_ack_accepts_a_cache_filled_by_the_processing(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.push_many(queue, ["a", "b"])
    df = read(spark, url, queue).cache()
    assert sorted(r.body for r in df.select("body").collect()) == [b"a", b"b"]
    assert ack(df).done == 2
    assert queue_size(lmq_node, queue) == 0
    df.unpersist()


def test_consume_acks_once_the_block_succeeded(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.push_many(queue, [f"m{i}" for i in range(50)])
    with consume(read(spark, url, queue)) as held:
        assert queue_size(lmq_node, queue) == 50, "nothing is acked while the block runs"
        first = sorted(r.body for r in held.select("body").collect())
        again = sorted(r.body for r in held.select("body").collect())
    assert first == again == sorted(f"m{i}".encode() for i in range(50)), "held is read once, not pulled again"
    assert queue_size(lmq_node, queue) == 0


def test_consume_gives_the_messages_back_when_the_block_fails(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.update_props(queue, {"timeout": 300})
    http.push_many(queue, ["x", "y"])
    with pytest.raises(RuntimeError, match="the sink is down"), consume(read(spark, url, queue)) as held:
        held.count()
        raise RuntimeError("the sink is down")
    back = http.pull_many(queue, 10, 0)
    assert sorted(m.body for m in back) == [b"x", b"y"], "nacked at once, not after the queue's 300 s timeout"


def test_process_runs_the_action_then_acks_and_says_how_many(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.push_many(queue, ["a", "b", "c"])
    seen: list[int] = []
    counted = process(read(spark, url, queue), lambda held: seen.append(held.count()))
    assert (seen, counted.done, counted.not_found) == ([3], 3, 0)
    assert queue_size(lmq_node, queue) == 0


def test_consume_refuses_a_read_without_ids_before_pulling(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.push(queue, "a")
    df = spark.read.format("lmq").option("url", url).option("queue", queue).schema("body STRING").load()
    with pytest.raises(Exception, match="needs the columns queue and id"), consume(df):
        pass
    assert http.pull(queue, 0) is not None, "nothing may have been pulled"


def test_a_read_without_max_messages_reads_the_queue_to_empty(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.push_many(queue, [f"m{i}" for i in range(2500)])  # more than the former silent cap of 1,000
    counted = process(read(spark, url, queue), lambda held: None)
    assert counted.done == 2500
    assert queue_size(lmq_node, queue) == 0
