"""Streaming reads (at-least-once, ack on commit) and streaming writes of the lmq data source."""

from __future__ import annotations

import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

from pylmq.client import HttpClient
from pylmq.errors import MessageNotFound
from pylmq.node.testing import NodeThread
from tests.spark.spark_helpers import drain, queue_size, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def stream(spark: SparkSession, url: str, queue: str, **options: str) -> DataFrame:
    reader = spark.readStream.format("lmq").option("url", url).option("queue", queue)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


class Recorder:
    """A foreachBatch sink that records bodies in this process; it can fail once, in the middle
    of a chosen batch, after half of that batch was recorded (a sink that wrote part of it)."""

    def __init__(self, fail_in_batch: int | None = None, sleep_in_batch: tuple[int, float] | None = None) -> None:
        self.bodies: list[bytes] = []
        self.rows_per_batch: dict[int, int] = {}
        self.fail_in_batch = fail_in_batch
        self.sleep_in_batch = sleep_in_batch
        self._lock = threading.Lock()

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        bodies = [r.body for r in batch.select("body").collect()]
        with self._lock:
            self.rows_per_batch[batch_id] = len(bodies)
            if self.fail_in_batch == batch_id:
                self.fail_in_batch = None
                self.bodies.extend(bodies[: len(bodies) // 2])
                raise RuntimeError(f"injected failure in the middle of batch {batch_id}")
        if self.sleep_in_batch is not None and self.sleep_in_batch[0] == batch_id:
            threading.Event().wait(self.sleep_in_batch[1])
        with self._lock:
            self.bodies.extend(bodies)

    def seen(self) -> set[bytes]:
        with self._lock:
            return set(self.bodies)


def push_many(http: HttpClient, queue: str, n: int) -> set[bytes]:
    for i in range(n):
        http.push(queue, f"m{i}")
    return {f"m{i}".encode() for i in range(n)}


def test_failed_query_restarted_from_its_checkpoint_processes_every_message_and_leaves_none(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread, tmp_path: Path
) -> None:
    # A short timeout brings back what a dead query held; infinite retry so no redelivery drops one.
    http.update_props(queue, {"timeout": 3, "retry": "infinity"})
    expected = push_many(http, queue, 300)
    checkpoint = str(tmp_path / "checkpoint")
    sink = Recorder(fail_in_batch=2)

    first = stream(spark, url, queue, maxMessagesPerTrigger="50").writeStream.foreachBatch(sink)
    query = first.option("checkpointLocation", checkpoint).start()
    with pytest.raises(StreamingQueryException, match="injected failure in the middle of batch 2"):
        query.awaitTermination(120)
    assert not sink.seen() >= expected, "the first run must stop before it saw every message"

    again = stream(spark, url, queue, maxMessagesPerTrigger="50").writeStream.foreachBatch(sink)
    query = again.option("checkpointLocation", checkpoint).start()
    try:
        wait_until(
            "every message processed and the queue empty",
            lambda: sink.seen() >= expected and queue_size(lmq_node, queue) == 0,
            deadline=120,
        )
    finally:
        query.stop()
    missing = expected - sink.seen()
    assert not missing, f"{len(missing)} messages were never processed"
    assert queue_size(lmq_node, queue) == 0, "every processed message must be acked"
    # The batch that failed is re-run from the checkpoint with the same 50 messages, taken back
    # by id: none of them came in a later batch.
    assert sink.rows_per_batch[2] == 50
    repeated = Counter(sink.bodies) - Counter(expected)
    assert repeated == Counter(sink.bodies[100:125]), "only what the failed batch wrote repeats"


def test_last_batch_is_acked_on_the_next_trigger_without_new_data(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread, tmp_path: Path
) -> None:
    expected = push_many(http, queue, 20)
    sink = Recorder()
    writer = stream(spark, url, queue, timeout="0.2").writeStream.foreachBatch(sink)
    query = writer.option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        wait_until("the queue to be empty", lambda: sink.seen() >= expected and queue_size(lmq_node, queue) == 0)
    finally:
        query.stop()
    assert Counter(sink.bodies) == Counter(expected)


def test_ack_on_commit_keeps_the_last_batch_in_flight_until_the_next_batch(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread, tmp_path: Path
) -> None:
    http.update_props(queue, {"timeout": 60})
    first = push_many(http, queue, 5)
    sink = Recorder()
    writer = stream(spark, url, queue, timeout="0.2", ackOn="commit").writeStream.foreachBatch(sink)
    query = writer.option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        wait_until("the first batch", lambda: sink.seen() >= first)
        query.processAllAvailable()
        assert queue_size(lmq_node, queue) == 5, "Spark commits a batch only when it plans the next"
        http.push(queue, "next")
        wait_until("the first batch to be acked", lambda: queue_size(lmq_node, queue) <= 1)
    finally:
        query.stop()


def test_messages_in_flight_are_extended_so_a_slow_batch_gets_no_duplicates(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread, tmp_path: Path
) -> None:
    http.update_props(queue, {"timeout": 1, "retry": "infinity"})
    expected = push_many(http, queue, 30)
    sink = Recorder(sleep_in_batch=(0, 3.0))  # three timeouts long
    writer = stream(spark, url, queue, timeout="0.2").writeStream.foreachBatch(sink)
    query = writer.option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        wait_until("the queue to be empty", lambda: sink.seen() >= expected and queue_size(lmq_node, queue) == 0)
    finally:
        query.stop()
    duplicates = {b: n for b, n in Counter(sink.bodies).items() if n > 1}
    assert not duplicates, f"messages were redelivered while their batch ran: {duplicates}"


def test_streaming_write_moves_every_message_from_one_queue_to_another(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread, tmp_path: Path
) -> None:
    source, target = f"{queue}.in", f"{queue}.out"
    expected = push_many(http, source, 200)
    df = stream(spark, url, source, maxMessagesPerTrigger="80", timeout="0.2").select("body", "content_type")
    writer = df.writeStream.format("lmq").option("url", url).option("queue", target)
    query = writer.option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        wait_until(
            "200 messages moved",
            lambda: queue_size(lmq_node, target) >= 200 and queue_size(lmq_node, source) == 0,
        )
    finally:
        query.stop()
    moved: list[Any] = drain(url, target)
    assert Counter(m.body for m in moved) == Counter(expected)
    assert {m.content_type for m in moved} == {"text/plain; charset=utf-8"}


class ExtWatch:
    """Counts, on the node, the ext replies that found no message in processing (an expiry the
    reader saw, real or spurious) and the ext requests, whichever form the reader uses."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, lmq_node: NodeThread, queue: str) -> None:
        self.not_found = 0
        self.requests = 0
        manager = lmq_node.node.manager
        ext, reply_many = manager.ext, manager.reply_many

        async def watched_ext(name: str, id_: Any) -> None:
            if name == queue:
                self.requests += 1
            try:
                await ext(name, id_)
            except MessageNotFound:
                if name == queue:
                    self.not_found += 1
                raise

        async def watched_reply_many(name: str, reply: str, ids: Any) -> Any:
            outcome = await reply_many(name, reply, ids)
            if name == queue and reply == "ext":
                self.requests += 1
                self.not_found += len(outcome.not_found)
            return outcome

        monkeypatch.setattr(manager, "ext", watched_ext)
        monkeypatch.setattr(manager, "reply_many", watched_reply_many)


def test_thousands_in_flight_on_a_short_timeout_see_no_expiry_and_no_redelivery(
    spark: SparkSession,
    url: str,
    queue: str,
    http: HttpClient,
    lmq_node: NodeThread,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    http.update_props(queue, {"timeout": 2, "retry": 5})
    n = 6000
    expected = push_many(http, queue, n)
    watch = ExtWatch(monkeypatch, lmq_node, queue)
    seen: list[tuple[bytes, int]] = []

    def sink(batch: DataFrame, batch_id: int) -> None:
        seen.extend((r.body, r.retry_remaining) for r in batch.select("body", "retry_remaining").collect())
        threading.Event().wait(1.0)  # acks and extensions overlap: each batch holds 3,000 for a second

    writer = stream(spark, url, queue, timeout="0.2", maxMessagesPerTrigger="3000").writeStream.foreachBatch(sink)
    query = writer.option("checkpointLocation", str(tmp_path / "ck")).start()
    try:
        wait_until("every message acked", lambda: len(seen) >= n and queue_size(lmq_node, queue) == 0, deadline=120)
    finally:
        query.stop()
    bodies = Counter(b for b, _ in seen)
    assert bodies == Counter(expected), f"duplicates: {sum(bodies.values()) - n}"
    assert {r for _, r in seen} == {5}, "every message came on its first delivery (retry 5 of 6 left)"
    assert watch.requests > 0, "the messages were extended"
    assert watch.not_found == 0, f"{watch.not_found} extensions found their message acked or expired"


def test_a_poison_body_fails_every_restart_naming_its_id_and_its_removal_lets_the_batch_through(
    spark: SparkSession, url: str, queue: str, http: HttpClient, lmq_node: NodeThread, tmp_path: Path
) -> None:
    # One non-UTF-8 body under a STRING schema fails its batch, and a restart replays that batch
    # by claim, so it fails on every start while it has retries (a replay after the queue's
    # timeout spends one, as the redelivery it replaces would), like a poison record in a Kafka
    # query. The failure names the message and how to take it out; doing so lets the batch's
    # others through.
    http.update_props(queue, {"timeout": 1, "retry": 5})
    http.push(queue, "good-1")
    http.push(queue, b"\xff\xfe not utf-8")
    http.push(queue, "good-2")
    seen: list[str] = []
    errors: list[str] = []

    def run() -> None:
        reader = spark.readStream.format("lmq").option("url", url).option("queue", queue).option("timeout", "0.2")
        q = (
            reader.schema("body STRING")
            .load()
            .writeStream.foreachBatch(lambda b, _i: seen.extend(r.body for r in b.collect()))
            .option("checkpointLocation", str(tmp_path / "cp"))
            .start()
        )
        try:
            q.processAllAvailable()
        except StreamingQueryException as e:
            errors.append(str(e))
        finally:
            q.stop()

    for _ in range(2):
        run()
        threading.Event().wait(1.2)  # past the queue's timeout: the restart replays by claim
    assert len(errors) == 2 and not seen, "with retries left, the poison message fails every start"
    match = re.search(r"\.claim\('([^']+)', \['([^']+)'\]\) then \.reply_many\('\1', 'ack', \['\2'\]\)", errors[-1])
    assert match, errors[-1][:2000]
    assert match.group(1) == queue
    http.claim(queue, [match.group(2)])  # the removal the error names
    http.reply_many(queue, "ack", [match.group(2)])
    run()
    assert not errors[2:], errors[2:]
    assert sorted(seen) == ["good-1", "good-2"]
    wait_until("the batch is acked", lambda: queue_size(lmq_node, queue) == 0)
