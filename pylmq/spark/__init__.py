"""The PySpark data source ``lmq``: LMQ queues as Spark sources and sinks (pyspark 4).

Two lines::

    from pylmq.spark import register; register(spark)
    df = spark.read.format("lmq").option("url", "http://127.0.0.1:9980").option("queue", "q").load()

Batch reads leave the messages in processing: process a cached copy, then :func:`ack` it
(or :func:`nack` it, or let the queue's timeout bring the messages back). Streaming reads are
at-least-once and ack a micro-batch's messages once Spark committed it; see
:mod:`pylmq.spark._stream` for what the checkpoint and the queue each hold. Writes push each row
(``body``, optional ``content_type`` and ``queue``) and may push a row twice when Spark retries a
task: LMQ has no idempotent push.

Needs the ``spark`` extra (``pip install 'pylmq[spark]'``).
"""

from pylmq.spark._options import LmqOptions, read_options, write_options
from pylmq.spark._source import LmqDataSource, ReplyCount, ack, consume, message_schema, nack, process, register

__all__ = [
    "LmqDataSource",
    "LmqOptions",
    "ReplyCount",
    "ack",
    "consume",
    "message_schema",
    "nack",
    "process",
    "read_options",
    "register",
    "write_options",
]
