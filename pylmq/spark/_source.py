"""The data source ``lmq`` and the helpers that go with it (register, ack, nack)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import StructType

from pylmq.errors import BadRequest
from pylmq.spark._batch import REPLYING_PROPERTY, LmqBatchReader, LmqStreamWriter, LmqWriter
from pylmq.spark._connection import NodeConnection, Reply, reply_all
from pylmq.spark._options import read_options, write_options
from pylmq.spark._rows import PushColumns, push_columns
from pylmq.spark._shape import ReadShape, read_shape
from pylmq.spark._stream import LmqStreamReader

__all__ = [
    "URL_METADATA_KEY",
    "LmqDataSource",
    "ReplyCount",
    "ack",
    "consume",
    "message_schema",
    "nack",
    "process",
    "register",
    "stop",
]

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
    or ``rpc://h:18800``), ``queue`` or ``qre``; reads: ``maxMessages`` (batch: all there are
    when the read starts, until a pull finds the queue empty),
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
        opts = read_options(self.options)
        return LmqBatchReader(opts, _shape(schema), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        shape = _shape(schema)
        reader = LmqStreamReader(read_options(self.options, stream=True))
        reader.shape = None if shape.full else shape
        return reader

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        opts = write_options(self.options)
        _no_overwrite(overwrite)
        return LmqWriter(opts, _columns(schema, opts.api, opts.queue, opts.qre))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        opts = write_options(self.options)
        _no_overwrite(overwrite)
        return LmqStreamWriter(opts, _columns(schema, opts.api, opts.queue, opts.qre))


def _shape(schema: StructType) -> ReadShape:
    return read_shape([(f.name, f.dataType.simpleString()) for f in schema.fields])


def _no_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise BadRequest("lmq write: a queue cannot be overwritten, only appended to: use mode('append')")


def _columns(schema: StructType, api: str, queue: str | None, qre: str | None) -> PushColumns:
    fields = [(f.name, f.dataType.simpleString()) for f in schema.fields]
    return push_columns(fields, api=api, default_queue=queue, qre=qre)


def register(spark: SparkSession) -> None:
    """Make ``format("lmq")`` known to this session."""
    spark.dataSource.register(LmqDataSource)


def local_session(app_name: str, conf: dict[str, str] | None = None, cores: int = 2) -> SparkSession:
    """A Spark session on this machine only (driver bound to 127.0.0.1, no web UI, ``cores``
    threads, as many shuffle partitions), quiet (log level ERROR), with the ``lmq`` source
    registered: for trying a pipeline, tests and benchmarks. ``conf`` adds or overrides settings."""
    settings = {
        "spark.ui.enabled": "false",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.sql.shuffle.partitions": str(cores),
    }
    settings.update(conf or {})
    builder = SparkSession.builder.master(f"local[{cores}]").appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


# -- ack / nack of a batch read ------------------------------------------------------------------


class ReplyCount:
    """What :func:`ack` / :func:`nack` did: ``done`` messages answered, ``not_found`` already
    redelivered (their timeout passed) or answered before."""

    def __init__(self, done: int, not_found: int) -> None:
        self.done = done
        self.not_found = not_found

    def __repr__(self) -> str:
        return f"ReplyCount(done={self.done}, not_found={self.not_found})"


def _plan_nodes(plan: Any) -> Iterator[Any]:
    stack = [plan]
    while stack:
        node = stack.pop()
        yield node
        if node.nodeName() == "AdaptiveSparkPlan":
            stack.append(node.executedPlan())
            continue
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))


def _pulls_again(df: DataFrame) -> bool:
    """Whether evaluating ``df`` would scan the ``lmq`` source again (i.e. pull new messages)
    rather than read cached or checkpointed rows."""
    for node in _plan_nodes(df._jdf.queryExecution().executedPlan()):
        if node.nodeName().startswith("BatchScan") and node.toString().startswith("BatchScan lmq"):
            return True
    return False


def _not_yet_filled(df: DataFrame) -> str | None:
    """What of ``df`` was never computed: a ``cache()`` whose partitions are not all filled, or
    a lazy ``localCheckpoint(eager=False)`` not yet written. Acking such a DataFrame would pull
    the messages just to ack them, before anything processed them."""
    for node in _plan_nodes(df._jdf.queryExecution().withCachedData()):
        name = node.nodeName()
        if name == "InMemoryRelation" and not node.cacheBuilder().isCachedColumnBuffersLoaded():
            return "its cache() was never filled"
        if name == "LogicalRDD" and not node.rdd().isCheckpointed():
            return "its localCheckpoint(eager=False) was never written"
    return None


_KEEPS_EVERY_ROW = frozenset(
    {
        "Project",
        "SubqueryAlias",
        "Repartition",
        "ResolvedHint",
        "Union",
    }
)
"""Logical operators that pass on every row of their input to the output once: anything else
between the ``lmq`` scan and the DataFrame may drop rows the scan pulled, which the reader cannot
see, or run the scan twice (a global sort samples its input in a job of its own: that job pulls
messages too, and nothing acks them)."""
_CUTS = frozenset({"GlobalLimit", "LocalLimit", "Limit", "Tail", "Offset", "Sample"})


def _lmq_relation(node: Any) -> bool:
    return bool(node.nodeName() == "DataSourceV2Relation" and node.toString().split("\n")[0].endswith(" lmq"))


def _row_dropper(df: DataFrame) -> str | None:
    """The outermost operator between an ``lmq`` scan and ``df`` that may drop rows (or pull
    twice), if any.

    Rows such an operator drops (a ``limit(5)`` of the 2,000 a pull-many brought) were pulled,
    so they are in processing, but reach no action and no ack: they would come back only after
    the queue's timeout with a retry spent (lost on a ``retry: 0`` queue)."""
    found: str | None = None

    def walk(node: Any) -> bool:
        nonlocal found
        if _lmq_relation(node):
            return True
        children = node.children()
        below = [walk(children.apply(i)) for i in range(children.size())]
        if any(below) and node.nodeName() not in _KEEPS_EVERY_ROW:
            found = node.nodeName()  # the outermost one wins: walk() returns outwards
        return any(below)

    walk(df._jdf.queryExecution().analyzed())
    return found


def _refuse_row_dropper(df: DataFrame, what: str) -> None:
    op = _row_dropper(df)
    if op is None:
        return
    if op in _CUTS:
        fix = "read only as many messages as you want: .option('maxMessages', n)"
    else:
        fix = (
            "pass the whole lmq read and filter or transform inside the block (held.filter(...)): "
            "the rows you drop there are acked with the rest"
        )
    raise BadRequest(
        f"{what} refused: df has {op} after the lmq read, which may drop rows the read pulled (or pull "
        "more in a job of its own); those messages would be pulled but never acked nor given back "
        "(stuck in processing until the queue's timeout, lost with retry 0). "
        f"Instead {fix}"
    )


@contextlib.contextmanager
def _replying(spark: SparkSession, reply: Reply) -> Iterator[None]:
    """Marks the jobs run inside as an ack/nack's: an lmq read task under it refuses to pull."""
    sc = spark.sparkContext
    before = sc.getLocalProperty(REPLYING_PROPERTY)
    sc.setLocalProperty(REPLYING_PROPERTY, reply)
    try:
        yield
    finally:
        sc.setLocalProperty(REPLYING_PROPERTY, before)  # type: ignore[arg-type]


def _ack_url(df: DataFrame, reply: Reply, url: str | None) -> str:
    """The node URL to answer ``df``'s messages at; refuses a DataFrame without their ids."""
    missing = [c for c in ("queue", "id") if c not in df.columns]
    if missing:
        raise BadRequest(f"{reply}(df) needs the columns queue and id of an lmq read; missing {', '.join(missing)}")
    if url is None:
        url = df.schema["id"].metadata.get(URL_METADATA_KEY) or None
    if url is None:
        raise BadRequest(
            f"{reply}(df): the id column does not say which node it came from (a read with a schema of "
            "your own): pass url=..."
        )
    return url


def _reply(df: DataFrame, reply: Reply, url: str | None) -> ReplyCount:
    url = _ack_url(df, reply, url)
    _refuse_row_dropper(df, f"{reply}(df)")
    targets = df.select("queue", "id")
    if _pulls_again(targets):
        raise BadRequest(
            f"{reply}(df) would pull new messages: an lmq DataFrame pulls each time it is evaluated. "
            "Process it inside `with consume(df) as held:` (acked when the block succeeds), or "
            "localCheckpoint() it, process that, then pass it here"
        )
    if (why := _not_yet_filled(targets)) is not None:
        if reply == "ack":
            raise BadRequest(
                f"ack(df) refused: {why}, so acking now would pull the messages only to ack them, before "
                "anything processed them (at-most-once). Run your action on df first, or process it "
                "inside `with consume(df) as held:`, which acks once the block succeeded"
            )
        raise BadRequest(
            f"nack(df) refused: {why}, so nacking now would pull messages only to give them back (a "
            "retry spent for nothing); what nothing pulled needs no nack"
        )
    opts = write_options({"url": url})

    def answer(batches: Iterator[Any]) -> Iterator[Any]:
        # Arrow batches straight from the JVM: no Row object per message.
        import pyarrow as pa

        async def go() -> tuple[int, int]:
            async with NodeConnection(opts) as node:
                pairs = (
                    pair for b in batches for pair in zip(b.column(0).to_pylist(), b.column(1).to_pylist(), strict=True)
                )
                return await reply_all(node, reply, pairs)

        d, m = asyncio.run(go())
        yield pa.RecordBatch.from_pydict({"done": [d], "not_found": [m]})

    with _replying(df.sparkSession, reply):
        if reply == "ack":
            # Every partition read once before any is acked: a cache that lost blocks fails here
            # (the read refuses under the property), so nothing is acked, not even the partitions
            # still cached.
            targets.count()
        counts = targets.mapInArrow(answer, "done long, not_found long").groupBy().sum().collect()[0]
    count = ReplyCount(int(counts[0] or 0), int(counts[1] or 0))
    if count.not_found:
        log.warning("%s(df): %d messages were not found (redelivered or answered before)", reply, count.not_found)
    return count


@contextlib.contextmanager
def consume(df: DataFrame, url: str | None = None) -> Iterator[DataFrame]:
    """Process the messages of a batch read and ack them only if that succeeded::

        with consume(spark.read.format("lmq").option(...).load()) as held:
            held.write.parquet(path)          # any number of actions on held
        # here every message of held is acked; had the block raised, they were nacked

    ``held`` is ``df`` pulled once and checkpointed on the executors (``localCheckpoint``), so
    evaluating it again reads the same rows and pulls nothing. When the block raises, the
    messages go back to their queues at once (``nack``) and the error goes on; a message that
    was redelivered meanwhile (its queue's ``timeout`` passed) is counted ``not_found`` and
    processed again later: at-least-once."""
    _ack_url(df, "ack", url)  # a DataFrame that cannot be acked is refused before pulling
    _refuse_row_dropper(df, "consume(df)")
    held = df.localCheckpoint(eager=True)
    try:
        yield held
    except BaseException:
        try:
            nack(held, url)
        except Exception as e:  # the block's error is the one to see; the timeout brings them back
            log.warning("consume(df): could not nack after a failure: %s", e)
        raise
    ack(held, url)


def process(df: DataFrame, action: Callable[[DataFrame], Any], url: str | None = None) -> ReplyCount:
    """``action(held)`` on the messages of a batch read, then ack them; as :func:`consume`
    (nack and raise when ``action`` raises). Returns what the ack did."""
    _ack_url(df, "ack", url)
    _refuse_row_dropper(df, "process(df)")
    held = df.localCheckpoint(eager=True)
    try:
        action(held)
    except BaseException:
        try:
            nack(held, url)
        except Exception as e:
            log.warning("process(df): could not nack after a failure: %s", e)
        raise
    return ack(held, url)


STOP_POLL = 0.05
_BETWEEN_BATCHES = ("Getting offsets", "Waiting", "Initializing")
"""Beginnings of the status messages of a query that runs no batch (Spark's own wording)."""


def stop(query: StreamingQuery, timeout: float = 60.0) -> None:
    """Stop a streaming query between micro-batches, not in the middle of one.

    ``query.stop()`` interrupts the batch that is running: Spark kills its tasks (a sink task
    killed mid-write), and a ``foreachBatch`` function interrupted inside a Spark job fails with
    an exception whose long text overflows the stack of the regex Spark matches it with (a
    ``StackOverflowError`` trace; seen with pyspark 4.3). This waits, up to ``timeout`` seconds,
    until no batch is running (the query is idle or asking the source for offsets), then
    stops; the messages of the batches that ran are committed and acked as usual (the last one
    on the next start of the query, or given back by the reader's ``stop``). A batch that starts
    in the instant between the check and the stop is interrupted as with ``query.stop()``."""
    deadline = time.monotonic() + timeout
    while query.isActive and time.monotonic() < deadline:
        status = query.status
        # Safe only between batches: a batch without new rows ("No new data but cleaning up
        # state", which a stateful query runs to move its watermark) writes results too.
        if not status.get("isTriggerActive") or str(status.get("message", "")).startswith(_BETWEEN_BATCHES):
            break
        time.sleep(STOP_POLL)
    query.stop()


def ack(df: DataFrame, url: str | None = None) -> ReplyCount:
    """Ack (delete) the messages of a batch read, on the executors, after the job using them
    succeeded. ``df`` must read cached or checkpointed rows that were already computed (see
    :func:`_pulls_again` and :func:`_not_yet_filled`); :func:`consume` does all of it."""
    return _reply(df, "ack", url)


def nack(df: DataFrame, url: str | None = None) -> ReplyCount:
    """Give the messages of a batch read back to their queues now (instead of after the timeout)."""
    return _reply(df, "nack", url)
