"""Batch reads with ``spark.read.format("lmq")``, and ack/nack of what was read."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgpack
import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)
from pyspark.sql import DataFrame, SparkSession

from pylmq.client import HttpClient, RpcClient
from pylmq.node.testing import NodeThread
from pylmq.spark import ack, nack
from tests.spark.spark_helpers import drain, queue_size, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def read(spark: SparkSession, url: str, queue: str, **options: str) -> DataFrame:
    reader = spark.read.format("lmq").option("url", url).option("queue", queue)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_read_gives_message_rows(spark: SparkSession, url: str, queue: str, http: HttpClient) -> None:
    http.update_props(queue, {"retry": 5})
    http.push(queue, b'{"n": 1}', "application/json")
    [row] = read(spark, url, queue).collect()
    assert (row.queue, row.type, row.retry_remaining, row.content_type, row.body, row.parts) == (
        queue,
        "normal",
        5,
        "application/json",
        b'{"n": 1}',
        None,
    )
    assert len(row.id) == 36


def test_compound_message_is_read_as_parts(spark: SparkSession, url: str, queue: str, http: HttpClient) -> None:
    http.update_props(queue, {"accum": 0.2})
    http.push(queue, b"a", "text/plain")
    http.push(queue, b"b")
    time.sleep(0.4)  # the accumulation window closes
    [row] = read(spark, url, queue, timeout="2").collect()
    assert row.type == "compound"
    assert (row.body, row.content_type) == (None, None)
    assert [(p.content_type, p.body) for p in row.parts] == [("text/plain", b"a"), ("application/octet-stream", b"b")]


def test_read_takes_at_most_max_messages_across_partitions(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    for i in range(50):
        http.push(queue, str(i))
    df = read(spark, url, queue, maxMessages="30", numPartitions="3").cache()
    assert df.count() == 30
    assert df.rdd.getNumPartitions() == 3
    assert ack(df).done == 30
    assert queue_size(lmq_node, queue) == 20


def test_read_and_ack_drains_a_queue(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    for i in range(300):
        http.push(queue, f"m{i}")
    seen: set[bytes] = set()
    while True:
        df = read(spark, url, queue, maxMessages="120").cache()
        bodies = [r.body for r in df.select("body").collect()]
        if not bodies:
            break
        seen.update(bodies)
        counted = ack(df)
        assert (counted.done, counted.not_found) == (len(bodies), 0)
        df.unpersist()
    assert seen == {f"m{i}".encode() for i in range(300)}
    assert queue_size(lmq_node, queue) == 0


def test_read_messages_stay_in_processing_until_acked(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.push(queue, b"x")
    df = read(spark, url, queue).cache()
    assert df.count() == 1
    assert http.pull(queue, 0) is None, "a pulled message must not be delivered to anyone else"
    assert queue_size(lmq_node, queue) == 1, "an unacked message must stay in the queue"
    ack(df)
    assert queue_size(lmq_node, queue) == 0


def test_a_failed_job_loses_nothing_messages_come_back_by_timeout(
    spark: SparkSession, url: str, queue: str, http: HttpClient
) -> None:
    http.update_props(queue, {"timeout": 1, "retry": "infinity"})
    for i in range(20):
        http.push(queue, str(i))
    df = read(spark, url, queue)

    def boom(_: object) -> None:
        raise RuntimeError("the job failed")

    with pytest.raises(Exception, match="the job failed"):
        df.foreach(boom)
    # Never acked: the queue delivers every message again after its timeout.
    got: list[bytes] = []

    def all_back() -> bool:
        got.extend(m.body for m in drain(url, queue, timeout=0.2))
        return len(got) >= 20

    wait_until("the 20 messages to come back", all_back)
    assert sorted(got) == sorted(str(i).encode() for i in range(20))


def test_nack_gives_messages_back_at_once(spark: SparkSession, url: str, queue: str, http: HttpClient) -> None:
    http.update_props(queue, {"timeout": 300})
    for i in range(10):
        http.push(queue, str(i))
    df = read(spark, url, queue).cache()
    assert df.count() == 10  # the processing that failed: nack's own job never pulls
    assert nack(df).done == 10
    assert len(drain(url, queue)) == 10, "nacked messages must be available now, not after the timeout"


def test_ack_refuses_a_dataframe_that_would_pull_again(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    for i in range(5):
        http.push(queue, str(i))
    with pytest.raises(Exception, match="would pull new messages"):
        ack(read(spark, url, queue))
    assert queue_size(lmq_node, queue) == 5, "nothing may be pulled or acked by a refused ack"


def test_ack_after_redelivery_counts_not_found(spark: SparkSession, url: str, queue: str, http: HttpClient) -> None:
    http.update_props(queue, {"timeout": 0.5, "retry": "infinity"})
    http.push(queue, b"late")
    df = read(spark, url, queue).cache()
    assert df.count() == 1
    time.sleep(1.0)  # past the timeout: the message is due again, with a new id
    assert len(drain(url, queue)) == 1
    counted = ack(df)
    assert (counted.done, counted.not_found) == (0, 1)


def test_read_with_qre_pulls_from_every_matching_queue(
    spark: SparkSession, url: str, queue: str, http: HttpClient
) -> None:
    http.push(f"{queue}.a", b"1")
    http.push(f"{queue}.b", b"2")
    rows = spark.read.format("lmq").option("url", url).option("qre", f"^{queue}\\.").load().collect()
    assert sorted((r.queue, r.body) for r in rows) == [(f"{queue}.a", b"1"), (f"{queue}.b", b"2")]


def test_read_over_msgpack_rpc_gives_pushed_values_as_bodies(
    spark: SparkSession, rpc_url: str, queue: str, lmq_node: NodeThread
) -> None:
    with RpcClient(*lmq_node.rpc_address) as rpc:
        rpc.push(queue, {"k": [1, 2]})
        rpc.push(queue, "text")
    rows = read(spark, rpc_url, queue).collect()
    assert sorted((r.content_type, r.body) for r in rows) == [
        ("application/x-msgpack", msgpack.packb({"k": [1, 2]})),
        ("text/plain; charset=utf-8", b"text"),
    ]


def test_read_without_queue_fails_clearly(spark: SparkSession, url: str) -> None:
    with pytest.raises(Exception, match="needs option 'queue'"):
        spark.read.format("lmq").option("url", url).load().collect()


def slow_pulls(monkeypatch: pytest.MonkeyPatch, lmq_node: NodeThread, queue: str, delay: float) -> None:
    """Pulls of ``queue`` are slow (a slow network, a busy node): each message taken costs
    ``delay`` seconds before it is taken, and a pull-many takes at most 10, so that a read takes
    its messages over many requests, spread in time, as one-at-a-time pulls would."""
    manager = lmq_node.node.manager
    pull, pull_many = manager.pull, manager.pull_many

    async def slow(name: str, timeout: float | None) -> Any:
        if name == queue:
            await asyncio.sleep(delay)
        return await pull(name, timeout)

    async def slow_many(name: str, count: int, timeout: float | None, *args: Any, **kwargs: Any) -> Any:
        if name == queue:
            count = min(count, 10)
            await asyncio.sleep(delay * count)
        return await pull_many(name, count, timeout, *args, **kwargs)

    monkeypatch.setattr(manager, "pull", slow)
    monkeypatch.setattr(manager, "pull_many", slow_many)


def test_a_read_longer_than_the_queue_timeout_keeps_its_messages(
    spark: SparkSession,
    url: str,
    queue: str,
    http: HttpClient,
    lmq_node: NodeThread,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    http.update_props(queue, {"timeout": 2, "retry": 5})
    for i in range(300):
        http.push(queue, str(i))
    slow_pulls(monkeypatch, lmq_node, queue, 0.012)  # 300 pulls one at a time: 3.6 s, 1.8 timeouts
    df = read(spark, url, queue, maxMessages="300", numPartitions="1", pipeline="1").cache()
    rows = df.collect()
    assert sorted(int(r.body) for r in rows) == list(range(300)), "each message once"
    assert {r.retry_remaining for r in rows} == {5}, "none was delivered twice"
    # Straight from the node (a Spark job would take longer than the timeout on a busy machine):
    # the task ended with every message still in processing under the id the DataFrame holds.
    extended = lmq_node.call(lmq_node.node.manager.reply_many(queue, "ext", [r.id for r in rows]))
    assert extended.not_found == []
    count = ack(df)
    assert (count.done, count.not_found) == (300, 0)
    assert queue_size(lmq_node, queue) == 0


def test_a_read_whose_messages_were_redelivered_meanwhile_fails_loudly_and_loses_nothing(
    spark: SparkSession,
    url: str,
    queue: str,
    http: HttpClient,
    lmq_node: NodeThread,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    http.update_props(queue, {"timeout": 1, "retry": 5})
    for i in range(100):
        http.push(queue, str(i))
    slow_pulls(monkeypatch, lmq_node, queue, 0.03)
    # extendInterval=0: no extension while pulling, so the task pulls its own expired messages again.
    df = read(spark, url, queue, maxMessages="150", numPartitions="1", pipeline="1", extendInterval="0")
    with pytest.raises(Exception, match="delivered again before the task ended; raise the queue's timeout"):
        df.collect()
    monkeypatch.undo()
    back = drain(url, queue, timeout=1.5)  # the failed task nacked what it held
    assert sorted(int(m.body) for m in back) == list(range(100)), "every message still there, once"


def test_nack_of_a_cache_never_filled_is_refused_without_pulling(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    # Filling it inside the nack's job would pull only to give back, a retry spent for nothing.
    http.push_many(queue, ["a", "b"])
    df = read(spark, url, queue).cache()
    with pytest.raises(Exception, match=r"nack\(df\) refused: its cache\(\) was never filled"):
        nack(df)
    assert len(http.pull_many(queue, 10, 0)) == 2, "nothing was pulled"
    df.unpersist()
