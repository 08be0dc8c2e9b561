"""The batch API's guard rails: consume()/process() ack only after the work succeeded, and ack(df)
refuses what would ack messages nothing has processed."""

from __future__ import annotations

from typing import Any

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)
from pyspark.sql import DataFrame, SparkSession

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread
from pylmq.spark import ack, consume, process
from tests.spark.spark_helpers import queue_size

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


def test_ack_of_a_cache_that_lost_blocks_refuses_before_pulling_and_acks_nothing(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    # Spark keeps calling a cache "filled" after its blocks are gone (an executor lost, dynamic
    # allocation): ack() would recompute the lost partitions, i.e. pull NEW messages, and ack them
    # unprocessed. Block loss is simulated by removing the cached RDD's blocks.
    http.update_props(queue, {"timeout": 30})
    http.push_many(queue, ["a", "b", "c"])
    df = read(spark, url, queue).cache()
    assert sorted(r.body for r in df.select("body").collect()) == [b"a", b"b", b"c"]
    relations = [
        n for n in _logical_nodes(df._jdf.queryExecution().withCachedData()) if n.nodeName() == "InMemoryRelation"
    ]
    assert relations
    for relation in relations:
        spark.sparkContext._jsc.sc().unpersistRDD(relation.cacheBuilder().cachedColumnBuffers().id(), True)
    http.push_many(queue, ["new1", "new2"])  # arrive after the processing: nobody processed them
    with pytest.raises(Exception, match=r"the cache lost data.*nothing acked"):
        ack(df)
    assert queue_size(lmq_node, queue) == 5, "nothing may be acked"
    assert sorted(m.body for m in http.pull_many(queue, 10, 0)) == [b"new1", b"new2"], "nor pulled"
    df.unpersist()


def _logical_nodes(plan: Any) -> list[Any]:
    # Any: the plan's nodes are py4j proxies of JVM objects, typed by nothing on this side.
    out, stack = [], [plan]
    while stack:
        node = stack.pop()
        out.append(node)
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return out


def test_consume_of_a_limited_read_is_refused_before_pulling(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    # A limit keeps 5 of the 100 rows a pull-many brought: the other 95 would be pulled but never
    # acked nor given back (lost after the timeout on a retry-0 queue).
    http.update_props(queue, {"timeout": 30, "retry": 0})
    http.push_many(queue, [f"m{i}" for i in range(100)])
    df = read(spark, url, queue)
    with pytest.raises(Exception, match=r"consume\(df\) refused: .*GlobalLimit.*maxMessages"), consume(df.limit(5)):
        pass
    with pytest.raises(Exception, match=r"process\(df\) refused: .*Sample.*maxMessages"):
        process(df.sample(0.5), lambda held: None)
    # A global sort runs a sampling job over the read first: it would pull messages of its own.
    with pytest.raises(Exception, match=r"consume\(df\) refused: .*Sort"), consume(df.orderBy("id")):
        pass
    with (
        pytest.raises(Exception, match=r"consume\(df\) refused: .*Filter.*held\.filter"),
        consume(df.filter("body IS NOT NULL")),
    ):
        pass
    assert len(http.pull_many(queue, 1000, 0)) == 100, "nothing was pulled"


def test_consume_with_max_messages_acks_exactly_what_it_read(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    # The fix the refusal names; operators that keep every row once are accepted after the read.
    http.push_many(queue, [f"m{i}" for i in range(100)])
    df = read(spark, url, queue, maxMessages="5")
    with consume(df.withColumn("n", df["body"]).repartition(3)) as held:
        assert held.count() == 5
    assert queue_size(lmq_node, queue) == 95
    assert len(http.pull_many(queue, 1000, 0)) == 95, "the other 95 were never pulled"


def test_ack_of_a_limited_cache_is_refused(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.push_many(queue, ["a", "b", "c"])
    df = read(spark, url, queue).cache()
    assert df.count() == 3
    with pytest.raises(Exception, match=r"ack\(df\) refused: .*GlobalLimit"):
        ack(df.limit(1))
    assert queue_size(lmq_node, queue) == 3
    assert ack(df).done == 3
    df.unpersist()
