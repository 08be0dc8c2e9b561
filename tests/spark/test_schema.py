"""A schema given to an lmq read: honoured when it fits the messages, refused clearly when not."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)
from pyspark.sql import SparkSession

from pylmq.client import HttpClient
from pylmq.errors import BadRequest
from pylmq.node.testing import NodeThread
from pylmq.spark._shape import read_shape
from tests.spark.spark_helpers import queue_size, wait_until

pytestmark = [pytest.mark.spark]


# -- the check itself (no Spark session) -----------------------------------------------------------


def test_a_subset_of_columns_in_any_order_is_accepted() -> None:
    shape = read_shape([("body", "string"), ("id", "string"), ("retry_remaining", "int")])
    assert (shape.names, shape.indexes) == (("body", "id", "retry_remaining"), (5, 1, 3))


def test_every_mistake_of_a_schema_is_named_at_once() -> None:
    with pytest.raises(BadRequest) as e:
        read_shape([("payload", "binary"), ("body", "int"), ("id", "string"), ("id", "string")])
    detail = e.value.detail
    assert "unknown column 'payload'" in detail
    assert "column 'body' must be binary or string, got int" in detail
    assert "column 'id' given twice" in detail
    assert "body BINARY | STRING" in detail, "the message says which columns there are"


def test_a_body_that_is_not_utf8_is_refused_as_text_naming_the_message() -> None:
    shape = read_shape([("body", "string")])
    row = ("q", "the-id", "normal", 2, "application/octet-stream", b"\xff\xfe", None)
    with pytest.raises(BadRequest, match=r"body of message the-id of queue 'q' is not UTF-8"):
        shape.rows([row])


# -- through Spark ------------------------------------------------------------------------------------


def test_body_as_string_is_the_decoded_text_not_a_python_repr(
    spark: SparkSession, url: str, queue: str, http: HttpClient
) -> None:
    http.push_many(queue, ["m0", "é1"])
    df = spark.read.format("lmq").option("url", url).option("queue", queue).schema("body STRING").load()
    assert sorted(r.body for r in df.collect()) == ["m0", "é1"]


def test_a_partial_schema_gives_those_columns_in_that_order(
    spark: SparkSession, url: str, queue: str, http: HttpClient
) -> None:
    http.update_props(queue, {"retry": 7})
    http.push(queue, b"\x00\x01", "application/octet-stream")
    reader = spark.read.format("lmq").option("url", url).option("queue", queue)
    [row] = reader.schema("retry_remaining INT, body BINARY, queue STRING").load().collect()
    assert tuple(row) == (7, b"\x00\x01", queue)


def test_parts_as_text_decode_each_part(spark: SparkSession, url: str, queue: str, http: HttpClient) -> None:
    http.update_props(queue, {"accum": 0.1})
    http.push_many(queue, ["a", "b"])
    time.sleep(0.3)  # the accumulation window closes
    reader = spark.read.format("lmq").option("url", url).option("queue", queue).option("timeout", "2")
    schema = "type STRING, parts ARRAY<STRUCT<content_type: STRING, body: STRING>>"
    [row] = reader.schema(schema).load().collect()
    assert row.type == "compound" and [p.body for p in row.parts] == ["a", "b"]


def test_an_incompatible_schema_is_refused_before_anything_is_pulled(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.push(queue, b"x")
    reader = spark.read.format("lmq").option("url", url).option("queue", queue)
    with pytest.raises(Exception, match="unknown column 'payload'"):
        reader.schema("payload BINARY").load().collect()
    assert http.pull(queue, 0) is not None, "the message must not have been pulled"


def test_a_binary_body_read_as_string_fails_the_read_and_gives_the_message_back(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread
) -> None:
    http.update_props(queue, {"timeout": 300})
    http.push(queue, b"\xff\xfe")
    df = spark.read.format("lmq").option("url", url).option("queue", queue).schema("body STRING").load()
    with pytest.raises(Exception, match="is not UTF-8"):
        df.collect()
    got = http.pull(queue, 5)
    assert got is not None and got.body == b"\xff\xfe", "nacked at once, not held until the queue's timeout"


def test_a_streaming_read_honours_the_schema(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread, tmp_path: Path
) -> None:
    http.push_many(queue, ["s0", "s1", "s2"])
    df = (
        spark.readStream.format("lmq").option("url", url).option("queue", queue).option("timeout", "0.2")
        .schema("body STRING").load()
    )  # fmt: skip
    name = queue.replace("-", "_").replace(".", "_")
    query = df.writeStream.format("memory").queryName(name).option("checkpointLocation", str(tmp_path)).start()
    try:
        wait_until("three rows", lambda: spark.table(name).count() >= 3 and queue_size(lmq_node, queue) == 0)
    finally:
        query.stop()
    assert sorted(r.body for r in spark.table(name).collect()) == ["s0", "s1", "s2"]
