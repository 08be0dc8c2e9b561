"""Spark 4 finds the ``lmq`` data source here, without ``register()``.

When a session first resolves a Python data source, pyspark imports every top-level module
whose name starts with ``pyspark_`` and registers its ``DefaultSource`` under that class's
``name()``. Installing pylmq installs this module, so ``spark.read.format("lmq")`` just works.
"""

from pylmq.spark import LmqDataSource as DefaultSource

__all__ = ["DefaultSource"]
