"""Helpers for the Spark tests: what a pylmq node holds, draining a queue, polling.

Test modules import these package-qualified (``from tests.spark.spark_helpers import ...``).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from pylmq.client import AsyncHttpClient
from pylmq.node.testing import NodeThread

# Each test module that needs pyspark calls pytest.importorskip("pyspark", reason=NO_PYSPARK) before
# importing it, so that without the spark extra they are skipped with this reason, not collection errors.
NO_PYSPARK = (
    "pyspark is not installed: the Spark tests need the spark extra (pip install -e '.[spark]'; make test does)"
)


def queue_size(node: NodeThread, name: str) -> int:
    """Messages the node holds for ``name``, in any state (available, processing, accum)."""

    async def status() -> list[dict[str, Any]]:
        return node.node.manager.status()

    for q in node.call(status()):
        if q["name"] == name:
            return int(q["size"])
    return 0


def drain(url: str, name: str, *, timeout: float = 0.0) -> list[Any]:
    """Pull and ack every message of ``name`` (32 at a time); the messages, in no order."""

    async def go() -> list[Any]:
        got: list[Any] = []
        async with AsyncHttpClient(url, request_timeout=30) as c:

            async def puller() -> None:
                while (m := await c.pull(name, timeout)) is not None:
                    got.append(m)
                    await c.ack(m.queue, m.id)

            await asyncio.gather(*(puller() for _ in range(32)))
        return got

    return asyncio.run(go())


def wait_until(what: str, check: Any, deadline: float = 60.0) -> None:
    """Poll ``check()`` until true; fail naming ``what`` when ``deadline`` seconds pass."""
    end = time.monotonic() + deadline
    while not check():
        if time.monotonic() > end:
            pytest.fail(f"gave up waiting {deadline:.0f} s for {what}")
        time.sleep(0.2)
