"""RateHistory: rates from the meters' counts, per node and per queue, on a manual clock."""

from __future__ import annotations

import asyncio

import pytest

from pylmq.core.clock import ManualClock
from pylmq.metrics import QueueMetrics, RateHistory


def _push(metrics: QueueMetrics, queue: str, n: int) -> None:
    for _ in range(n):
        metrics.on_push(queue)


def _pull(metrics: QueueMetrics, queue: str, n: int) -> None:
    for _ in range(n):
        metrics.on_pull(queue, 0.5)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def metrics(clock: ManualClock) -> QueueMetrics:
    return QueueMetrics(clock=clock)


async def _sample(history: RateHistory, clock: ManualClock, seconds: float = 2.0) -> None:
    clock.advance(seconds)
    await history.sample()


async def test_the_first_sample_only_sets_the_start(metrics: QueueMetrics, clock: ManualClock) -> None:
    _push(metrics, "a", 50)  # counted before the history started: no rate of the last seconds
    history = RateHistory(metrics, clock)
    await history.sample()
    assert history.seq == 0
    assert history.node() == {"step": 2.0, "seq": 0, "t": [], "push": [], "pull": []}
    assert history.rate("a") == (0.0, 0.0)


async def test_rates_are_the_growth_per_second(metrics: QueueMetrics, clock: ManualClock) -> None:
    history = RateHistory(metrics, clock)
    await history.sample()
    _push(metrics, "a", 10)
    _push(metrics, "b", 4)
    _pull(metrics, "a", 6)
    await _sample(history, clock)
    assert history.rate("a") == (5.0, 3.0)
    assert history.rate("b") == (2.0, 0.0)
    assert history.rate("unknown") == (0.0, 0.0)
    assert history.node_rate() == (7.0, 3.0)
    doc = history.node()
    assert doc == {"step": 2.0, "seq": 1, "t": [clock.now()], "push": [7.0], "pull": [3.0]}
    await _sample(history, clock)  # nothing happened
    assert history.rate("a") == (0.0, 0.0)
    assert history.node()["push"] == [7.0, 0.0]


async def test_a_late_sample_divides_by_the_time_that_passed(metrics: QueueMetrics, clock: ManualClock) -> None:
    history = RateHistory(metrics, clock)
    await history.sample()
    _push(metrics, "a", 30)
    await _sample(history, clock, 6.0)  # a busy loop sampled 4 s late
    assert history.rate("a") == (5.0, 0.0)
    await history.sample()  # the clock did not move: no point, no division by zero
    assert history.seq == 1


async def test_since_gives_only_the_newer_points(metrics: QueueMetrics, clock: ManualClock) -> None:
    history = RateHistory(metrics, clock)
    await history.sample()
    for i in range(1, 6):
        _push(metrics, "a", 2 * i)
        await _sample(history, clock)
    assert history.node()["push"] == [1.0, 2.0, 3.0, 4.0, 5.0]
    newer = history.node(since=3)
    assert newer["seq"] == 5
    assert newer["push"] == [4.0, 5.0]
    assert newer["t"] == [clock.now() - 2.0, clock.now()]
    assert history.node(since=5)["push"] == []
    assert history.queue("a", since=4) == {"step": 2.0, "seq": 5, "t": [clock.now()], "push": [5.0], "pull": [0.0]}


async def test_the_window_keeps_the_last_points_only(metrics: QueueMetrics, clock: ManualClock) -> None:
    history = RateHistory(metrics, clock, step=2.0, window=10.0)  # 5 points
    await history.sample()
    for i in range(1, 9):
        _push(metrics, "a", 2 * i)
        await _sample(history, clock)
    doc = history.node(since=0)
    assert doc["seq"] == 8
    assert doc["push"] == [4.0, 5.0, 6.0, 7.0, 8.0]
    assert len(doc["t"]) == 5


async def test_rings_only_for_queues_that_moved_and_at_most_the_cap(metrics: QueueMetrics, clock: ManualClock) -> None:
    history = RateHistory(metrics, clock, max_tracked=2)
    for name in ("idle", "a", "b", "c"):
        metrics.on_push(name)
    await history.sample()
    _push(metrics, "a", 2)
    _push(metrics, "b", 2)
    _push(metrics, "c", 2)
    await _sample(history, clock)
    assert history.tracked() == 2
    # Past the cap: the live rate still, the history is unknown (None), not zeros.
    assert history.rate("c") == (1.0, 0.0)
    assert history.queue("c") is None
    assert history.queue("a") == {"step": 2.0, "seq": 1, "t": [clock.now()], "push": [1.0], "pull": [0.0]}
    # An idle queue holds no ring; its history is known: zeros.
    assert history.queue("idle") == {"step": 2.0, "seq": 1, "t": [clock.now()], "push": [0.0], "pull": [0.0]}
    assert history.queue("never-metered") is not None


async def test_idle_rings_are_freed_after_a_window_and_deleted_queues_forgotten(
    metrics: QueueMetrics, clock: ManualClock
) -> None:
    history = RateHistory(metrics, clock, window=10.0, max_tracked=1)  # 5 points
    await history.sample()
    _push(metrics, "a", 2)
    await _sample(history, clock)
    assert history.tracked() == 1
    _push(metrics, "b", 2)  # no room: b has no ring
    await _sample(history, clock)
    assert history.queue("b") is None
    for _ in range(4):
        await _sample(history, clock)
    assert history.tracked() == 0  # a idle for 5 samples: freed
    assert history.queue("a") is not None  # and reads as zeros again
    _push(metrics, "b", 4)
    await _sample(history, clock)
    assert history.queue("b") == {"step": 2.0, "seq": 7, "t": [clock.now()], "push": [2.0], "pull": [0.0]}
    metrics.forget("b")  # deleted: its ring and its rate go
    await _sample(history, clock)
    assert history.tracked() == 0
    assert history.rate("b") == (0.0, 0.0)


async def test_a_recreated_queue_counts_from_its_new_meter(metrics: QueueMetrics, clock: ManualClock) -> None:
    history = RateHistory(metrics, clock)
    _push(metrics, "a", 100)
    _push(metrics, "b", 4)
    await history.sample()
    await _sample(history, clock)  # both idle now
    for name, pushes in (("a", 4), ("b", 4)):  # deleted and made again between two samples
        metrics.forget(name)
        _push(metrics, name, pushes)
    await _sample(history, clock)
    assert history.rate("a") == (2.0, 0.0)
    assert history.rate("b") == (2.0, 0.0)  # as many pushes as before: still new ones


async def test_a_sample_yields_to_the_loop_between_slices(metrics: QueueMetrics, clock: ManualClock) -> None:
    for i in range(35):
        metrics.on_push(f"q{i}")
    history = RateHistory(metrics, clock, slice_size=10)
    passes = 0
    done = False

    async def count_passes() -> None:
        nonlocal passes
        while not done:
            passes += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_passes())
    await asyncio.sleep(0)
    before = passes
    clock.advance(2.0)
    await history.sample()
    during = passes - before
    done = True
    await counter
    assert during >= 3  # 4 slices: the loop ran between each two


async def test_start_samples_until_stopped(metrics: QueueMetrics) -> None:
    history = RateHistory(metrics, step=0.01, window=1.0)
    history.start()
    try:
        for _ in range(500):
            if history.seq >= 2:
                break
            await asyncio.sleep(0.01)
        assert history.seq >= 2
    finally:
        await history.stop()
    seq = history.seq
    await asyncio.sleep(0.05)
    assert history.seq == seq


def test_bad_parameters_are_refused(metrics: QueueMetrics) -> None:
    with pytest.raises(ValueError, match="step"):
        RateHistory(metrics, step=0)
    with pytest.raises(ValueError, match="window"):
        RateHistory(metrics, step=2.0, window=1.0)
