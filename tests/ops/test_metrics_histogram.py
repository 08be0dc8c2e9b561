"""Retention histogram: folsom slide_uniform {60 s, 100 per second} with bear's statistics."""

from __future__ import annotations

import random

import pytest

from pylmq.core.clock import ManualClock
from pylmq.metrics import HistogramStats, SlidingHistogram, statistics


def test_fewer_than_five_samples_give_zeros() -> None:
    h = SlidingHistogram(clock=ManualClock())
    for v in (1.0, 2.0, 3.0, 4.0):
        h.update(v)
    assert h.stats() == HistogramStats()
    h.update(5.0)
    assert h.stats().n == 5


def test_statistics_use_nearest_rank_and_sample_variance() -> None:
    s = statistics([float(v) for v in range(10, 0, -1)])
    assert (s.n, s.min, s.max, s.mean) == (10, 1.0, 10.0, 5.5)
    # element round(p * N) of the sorted values, halves rounded up as Erlang's round/1 does
    assert s.median == 5.0
    assert s.percentiles == {50.0: 5.0, 75.0: 8.0, 90.0: 9.0, 95.0: 10.0, 99.0: 10.0, 99.9: 10.0}
    assert s.variance == pytest.approx(55 / 6)


def test_samples_leave_the_window_after_60_seconds() -> None:
    clock = ManualClock(1000.0)
    h = SlidingHistogram(window=60, clock=clock)
    for _ in range(5):
        h.update(1.0)
    clock.advance(30)
    for _ in range(5):
        h.update(2.0)
    assert sorted(h.values()) == [1.0] * 5 + [2.0] * 5
    clock.advance(30)  # the first five are now 60 s old
    assert h.values() == [2.0] * 5
    clock.advance(30)
    assert h.values() == []


def test_each_second_keeps_at_most_size_samples_uniformly() -> None:
    clock = ManualClock(1000.0)
    h = SlidingHistogram(size=100, clock=clock, rng=random.Random(7))
    for v in range(10_000):
        h.update(float(v))
    kept = h.values()
    assert len(kept) == 100
    # reservoir sampling keeps late samples too, not just the first hundred
    assert max(kept) > 5000
    clock.advance(1)
    h.update(-1.0)
    assert len(h.values()) == 101
