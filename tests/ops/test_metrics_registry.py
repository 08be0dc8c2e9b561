"""QueueMetrics: the queue observer behind /stats and lmq-admin stats."""

from __future__ import annotations

import asyncio

from pylmq.core.clock import ManualClock
from pylmq.core.queue import QueueObserver
from pylmq.metrics import QueueMetrics, format_admin_stats


def test_counts_pushes_pulls_and_retention_per_queue() -> None:
    metrics = QueueMetrics(clock=ManualClock())
    observer: QueueObserver = metrics
    for _ in range(10):
        observer.on_push("q1")
    for r in (0.1, 0.2, 0.3, 0.4, 0.5):
        observer.on_pull("q1", r)
    observer.on_push("q2")
    metrics.tick()
    s = metrics.stats("q1")
    assert s is not None
    assert (s.push.count, s.push.one, s.pull.count, s.pull.one) == (10, 2.0, 5, 1.0)
    assert (s.retention.n, s.retention.min, s.retention.max, s.retention.median) == (5, 0.1, 0.5, 0.3)
    assert list(metrics.all_stats()) == ["q1", "q2"]
    assert metrics.stats("nope") is None


def test_forget_drops_a_deleted_queue() -> None:
    metrics = QueueMetrics()
    metrics.on_push("q")
    metrics.forget("q")
    assert metrics.all_stats() == {}


def test_stats_as_json() -> None:
    metrics = QueueMetrics()
    metrics.on_push("q")
    metrics.tick()
    s = metrics.stats("q")
    assert s is not None
    assert s.to_json()["push"] == {"count": 1, "one": 0.2, "five": 0.2, "fifteen": 0.2, "day": 0.2}


async def test_start_and_stop_own_the_tick_task() -> None:
    metrics = QueueMetrics()
    metrics.start()
    tasks = {t.get_name() for t in asyncio.all_tasks()}
    assert "pylmq-meter-tick" in tasks
    await metrics.stop()
    assert "pylmq-meter-tick" not in {t.get_name() for t in asyncio.all_tasks() if not t.done()}


def test_admin_stats_text_has_lmqs_layout() -> None:
    metrics = QueueMetrics(clock=ManualClock())
    for _ in range(10):
        metrics.on_push("q1")
    for r in (0.1, 0.2, 0.3, 0.4, 0.5):
        metrics.on_pull("q1", r)
    metrics.tick()
    assert format_admin_stats(metrics.all_stats()) == (
        "q1\n"
        "  push rate: 1min 2.00, 5min 2.00, 15min 2.00, 1day 2.00\n"
        "  pull rate: 1min 1.00, 5min 1.00, 15min 1.00, 1day 1.00\n"
        "  retention time: min 0.100, max 0.500, mean 0.300, median 0.300\n"
    )
