"""Retention histogram over a sliding window: folsom's ``slide_uniform`` with bear's statistics.

Samples are grouped by the second they arrive in; each second keeps at most ``size`` of them,
chosen uniformly at random (reservoir sampling: the k-th sample of a second replaces a random
slot with probability size/k). A read sees the samples of the last ``window`` seconds. As in
bear, statistics over fewer than 5 samples are all zero with ``n = 0``: too few to mean anything.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass, field

from pylmq.core.clock import Clock, SystemClock

__all__ = ["MIN_SAMPLES", "PERCENTILES", "HistogramStats", "SlidingHistogram", "statistics"]

MIN_SAMPLES = 5
PERCENTILES = (50.0, 75.0, 90.0, 95.0, 99.0, 99.9)


@dataclass(frozen=True, slots=True)
class HistogramStats:
    n: int = 0
    min: float = 0.0
    max: float = 0.0
    mean: float = 0.0
    median: float = 0.0
    variance: float = 0.0
    standard_deviation: float = 0.0
    percentiles: dict[float, float] = field(default_factory=lambda: dict.fromkeys(PERCENTILES, 0.0))


def _nearest_rank(ordered: list[float], p: float) -> float:
    # bear: element round(p * N), 1-based, rounding halves up (Erlang's round/1), no interpolation
    rank = max(1, min(len(ordered), math.floor(p * len(ordered) + 0.5)))
    return ordered[rank - 1]


def statistics(values: list[float]) -> HistogramStats:
    """bear's figures for ``values`` (sample variance, nearest-rank percentiles)."""
    n = len(values)
    if n < MIN_SAMPLES:
        return HistogramStats()
    ordered = sorted(values)
    mean = math.fsum(ordered) / n
    variance = math.fsum((v - mean) ** 2 for v in ordered) / (n - 1)
    return HistogramStats(
        n=n,
        min=ordered[0],
        max=ordered[-1],
        mean=mean,
        median=_nearest_rank(ordered, 0.5),
        variance=variance,
        standard_deviation=math.sqrt(variance),
        percentiles={p: _nearest_rank(ordered, p / 100.0) for p in PERCENTILES},
    )


class SlidingHistogram:
    __slots__ = ("_buckets", "_clock", "_rng", "size", "window")

    def __init__(
        self,
        window: int = 60,
        size: int = 100,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.window = window
        self.size = size
        self._clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        # (second, samples seen in that second, kept samples), oldest first
        self._buckets: deque[tuple[int, list[int], list[float]]] = deque()

    def _trim(self, now: int) -> None:
        oldest = now - self.window
        while self._buckets and self._buckets[0][0] <= oldest:
            self._buckets.popleft()

    def update(self, value: float) -> None:
        now = int(self._clock.now())
        self._trim(now)
        if not self._buckets or self._buckets[-1][0] != now:
            self._buckets.append((now, [0], []))
        _, seen, kept = self._buckets[-1]
        seen[0] += 1
        if len(kept) < self.size:
            kept.append(value)
        else:
            slot = self._rng.randint(1, seen[0])
            if slot <= self.size:
                kept[slot - 1] = value

    def values(self) -> list[float]:
        self._trim(int(self._clock.now()))
        return [v for _, _, kept in self._buckets for v in kept]

    def stats(self) -> HistogramStats:
        return statistics(self.values())
