"""kill -9 of a streaming query's driver twice in a row: once after the node took a trigger's
messages and before the driver had them (no offset names them), then again while the restarted
driver claims them back by the query's holder tag. The third run must still count every event of
a watermarked window count exactly once.

The kills are placed by the node of this test (it runs in this process): it holds the answer to
the pull-many, then to the claim by holder, until the driver is dead."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)
from pyspark.sql import SparkSession

from pylmq.node.testing import NodeThread, local_options
from tests.spark.spark_helpers import queue_size
from tests.spark.test_stream_crash import Job, batches, job_config, push_events, restart

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeThread]:
    with NodeThread(local_options(store="durable", data_dir=tmp_path / "node")) as n:
        yield n


class Hold:
    """Wraps a manager method: the first call that ``when`` accepts is done, then its answer is
    held (the node's request waits) until :meth:`release`; :attr:`reached` says it was."""

    def __init__(self, method: Any, when: Any) -> None:
        self.method, self.when = method, when
        self.reached, self._released = threading.Event(), threading.Event()
        self._used = False

    async def __call__(self, *args: Any, **kw: Any) -> Any:
        result = await self.method(*args, **kw)
        if not self._used and self.when(*args, **kw):
            self._used = True
            self.reached.set()
            await asyncio.to_thread(self._released.wait, 60)
        return result

    def release(self) -> None:
        self._released.set()


def test_kill_9_in_a_pull_then_in_the_claim_by_holder_loses_no_event_of_a_watermarked_count(
    spark: SparkSession, node: NodeThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = "events"
    n, per_trigger = 800, 200
    expected = push_events(node, queue, n)
    config = job_config(node, queue, tmp_path, "windows", per_trigger)
    checkpoint = Path(config["checkpoint"])
    manager = node.node.manager

    # 1. Batch 0 committed; batch 1's pull-many of 199 (after its pull of one) is taken and
    #    recorded under the query's tag, and the driver dies before it has the answer.
    pull = Hold(
        manager.pull_many,
        lambda name, count, *a, **kw: count > 1 and (checkpoint / "commits" / "0").exists(),
    )
    monkeypatch.setattr(manager, "pull_many", pull)
    first = Job(tmp_path, "first", config)
    first.wait_for("batch 1's pull", pull.reached.is_set)
    first.kill()
    pull.release()
    assert not (checkpoint / "offsets" / "1").exists()
    time.sleep(3.5)  # past the queue's timeout: the messages taken for batch 1 are due again

    # 2. The restart claims them by the tag; the node has done the claim when the driver dies.
    claim = Hold(manager.claim_holder, lambda *a, **kw: True)
    monkeypatch.setattr(manager, "claim_holder", claim)
    second = Job(tmp_path, "second", config)
    second.wait_for("the claim by holder", claim.reached.is_set)
    second.kill()
    claim.release()
    assert not (checkpoint / "offsets" / "1").exists()
    time.sleep(3.5)  # and again: the claimed messages' new deadline passes
    monkeypatch.setattr(manager, "claim_holder", claim.method)
    monkeypatch.setattr(manager, "pull_many", pull.method)

    # 3. Restarted on this session: the 200 messages of the killed pull come first, as batch 1.
    restart(spark, config)
    final: dict[int, int] = {}
    for _, rows in sorted(batches(Path(config["out"])).items()):
        for window, count in rows:
            final[window] = count
    lost = sum(c - final.get(w, 0) for w, c in expected.items() if final.get(w, 0) < c)
    assert lost == 0, f"{lost} events lost (dropped as late); expected {dict(expected)}, got {final}"
    assert final == dict(expected), "each event counted once"
    assert queue_size(node, queue) == 0
