"""The data source ``lmq`` and the helpers that go with it (register, ack, nack)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from pylmq.errors import BadRequest
from pylmq.spark._batch import LmqBatchReader, LmqStreamWriter, LmqWriter
from pylmq.spark._node import Node, Reply, reply_all
from pylmq.spark._options import read_options, write_options
from pylmq.spark._rows import PushColumns, push_columns
from pylmq.spark._stream import LmqStreamReader

__all__ = ["URL_METADATA_KEY", "LmqDataSource", "ReplyCount", "ack", "message_schema", "nack", "register"]

log = logging.getLogger("pylmq.spark")

URL_METADATA_KEY = "lmq.url"
"""Column metadata of ``id`` naming the node(s) the rows were pulled from, so ``ack(df)`` needs
no URL."""


def message_schema(url: str = "") -> StructType:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        LongType,
        StringType,
        StructField,
    )

    meta = {URL_METADATA_KEY: url} if url else {}
    part = StructType([StructField("content_type", StringType()), StructField("body", BinaryType())])
    return StructType(
        [
            StructField("queue", StringType(), nullable=False),
            StructField("id", StringType(), nullable=False, metadata=meta),
            StructField("type", StringType(), nullable=False),
            StructField("retry_remaining", LongType()),
            StructField("content_type", StringType()),
            StructField("body", BinaryType()),
            StructField("parts", ArrayType(part)),
        ]
    )


class LmqDataSource(DataSource):
    """``spark.read.format("lmq")``, ``readStream``, ``write`` and ``writeStream``.

    Options: ``url`` (one or more node URLs, comma separated, tried in turn: ``http://h:9980``
    or ``rpc://h:18800``), ``queue`` or ``qre``; reads: ``maxMessages`` (batch, 1000),
    ``numPartitions`` (batch 2, stream 1), ``timeout`` (seconds a pull waits when the queue is
    empty: batch 0, stream 1), ``maxMessagesPerTrigger`` (1000), ``extendInterval`` (seconds;
    default a third of the queue's timeout), ``ackOn`` (``trigger`` or ``commit``); writes:
    ``pipeline`` (pushes in flight per task, 64); all: ``requestTimeout`` (30 s).
    """

    @classmethod
    def name(cls) -> str:
        return "lmq"

    def schema(self) -> StructType:
        return message_schema(str(self.options.get("url", "")))

    def reader(self, schema: StructType) -> DataSourceReader:
        return LmqBatchReader(read_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return LmqStreamReader(read_options(self.options, stream=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = write_options(self.options)
        _no_overwrite(overwrite)
        return LmqWriter(opts, _columns(schema, opts.api, opts.queue, opts.qre))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = write_options(self.options)
        _no_overwrite(overwrite)
        return LmqStreamWriter(opts, _columns(schema, opts.api, opts.queue, opts.qre))


def _no_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise BadRequest("lmq write: a queue cannot be overwritten, only appended to: use mode('append')")


def _columns(schema: StructType, api: str, queue: str | None, qre: str | None) -> PushColumns:
    fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    return push_columns(fields, api=api, default_queue=queue, qre=qre)


def register(spark: SparkSession) -> None:
    """Make ``format("lmq")`` known to this session."""
    spark.dataSource.register(LmqDataSource)


# -- ack / nack of a batch read ------------------------------------------------------------------


class ReplyCount:
    """What :func:`ack` / :func:`nack` did: ``done`` messages answered, ``not_found`` already
    redelivered (their timeout passed) or answered before."""

    def __init__(self, done: int, not_found: int) -> None:
        self.done = done
        self.not_found = not_found

    def __repr__(self) -> str:
        return f"ReplyCount(done={self.done}, not_found={self.not_found})"


def _pulls_again(df: DataFrame) -> bool:
    """Whether evaluating ``df`` would scan the ``lmq`` source again (i.e. pull new messages)
    rather than read cached or checkpointed rows."""
    plan = df._jdf.queryExecution().executedPlan()
    stack = [plan]
    while stack:
        node = stack.pop()
        name = node.nodeName()
        if name == "AdaptiveSparkPlan":
            stack.append(node.executedPlan())
            continue
        if name.startswith("BatchScan") and node.toString().startswith("BatchScan lmq"):
            return True
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return False


def _reply(df: DataFrame, reply: Reply, url: str | None) -> ReplyCount:
    missing = [c for c in ("queue", "id") if c not in df.columns]
    if missing:
        raise BadRequest(f"{reply}(df) needs the columns queue and id of an lmq read; missing {', '.join(missing)}")
    if url is None:
        url = df.schema["id"].metadata.get(URL_METADATA_KEY) or None
    if url is None:
        raise BadRequest(f"{reply}(df): the id column does not say which node it came from: pass url=...")
    targets = df.select("queue", "id")
    if _pulls_again(targets):
        raise BadRequest(
            f"{reply}(df) would pull new messages: an lmq DataFrame pulls each time it is evaluated. "
            "cache() or localCheckpoint() it, process that, then pass it here"
        )
    opts = write_options({"url": url})
    sc = df.sparkSession.sparkContext
    done = sc.accumulator(0)
    not_found = sc.accumulator(0)

    def answer(rows: Iterator[Any]) -> None:
        async def go() -> tuple[int, int]:
            async with Node(opts) as node:
                return await reply_all(node, reply, ((r[0], r[1]) for r in rows))

        d, m = asyncio.run(go())
        done.add(d)
        not_found.add(m)

    targets.foreachPartition(answer)
    count = ReplyCount(done.value, not_found.value)
    if count.not_found:
        log.warning("%s(df): %d messages were not found (redelivered or answered before)", reply, count.not_found)
    return count


def ack(df: DataFrame, url: str | None = None) -> ReplyCount:
    """Ack (delete) the messages of a batch read, on the executors, after the job using them
    succeeded. ``df`` must be cached or checkpointed: see :func:`_pulls_again`."""
    return _reply(df, "ack", url)


def nack(df: DataFrame, url: str | None = None) -> ReplyCount:
    """Give the messages of a batch read back to their queues now (instead of after the timeout)."""
    return _reply(df, "nack", url)
