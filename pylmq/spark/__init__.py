"""The PySpark data source ``lmq``: LMQ queues as Spark sources and sinks (pyspark 4).

Installed with pylmq, Spark 4 finds it by itself (module ``pyspark_lmq``)::

    df = spark.read.format("lmq").option("url", "http://127.0.0.1:9980").option("queue", "q").load()

(:func:`register` does the same for a session that cannot see that module, e.g. pylmq used from
a checkout without being installed.) Spark's Python workers import pylmq: run them with an
interpreter that has it (``PYSPARK_PYTHON``).

Batch reads leave the messages in processing: process them inside ``with consume(df) as held:``
(acked when the block succeeds, nacked when it raises), or with :func:`process`; :func:`ack`
refuses a DataFrame whose rows nothing computed yet. Streaming reads are at-least-once, ack a
micro-batch's messages once Spark committed it, and after a restart replay the uncommitted
batch's own messages, by id, before anything newer; see :mod:`pylmq.spark._stream` for what the
checkpoint and the queue each hold, and the guarantee, and :func:`stop` to stop a query between
batches. Writes push rows (``body``, optional ``content_type`` and ``queue``) many per request
and may push a row twice when Spark retries a task: LMQ has no idempotent push.

Needs the ``spark`` extra (``pip install 'pylmq[spark]'``).
"""

from pylmq.spark._options import LmqOptions, read_options, write_options
from pylmq.spark._source import (
    LmqDataSource,
    ReplyCount,
    ack,
    consume,
    local_session,
    message_schema,
    nack,
    process,
    register,
    stop,
)

__all__ = [
    "LmqDataSource",
    "LmqOptions",
    "ReplyCount",
    "ack",
    "consume",
    "local_session",
    "message_schema",
    "nack",
    "process",
    "read_options",
    "register",
    "stop",
    "write_options",
]
