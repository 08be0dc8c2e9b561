"""Per-queue metrics: the core's :class:`~pylmq.core.queue.QueueObserver` for meters, the
retention histogram and StatsD, and the figures behind ``/stats`` and ``lmq-admin stats``."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass

from pylmq.core.clock import Clock, SystemClock
from pylmq.metrics.histogram import HistogramStats, SlidingHistogram
from pylmq.metrics.meter import TICK_SECONDS, Meter, MeterRates
from pylmq.metrics.statsd import StatsdEmitter, counter_line, metric_name, timing_line

__all__ = ["QueueMetrics", "QueueStats", "format_admin_stats"]

log = logging.getLogger("pylmq.metrics")


@dataclass(frozen=True, slots=True)
class QueueStats:
    push: MeterRates
    pull: MeterRates
    retention: HistogramStats  # seconds, as LMQ's folsom histogram

    def to_json(self) -> dict[str, object]:
        def rates(m: MeterRates) -> dict[str, object]:
            return {"count": m.count, "one": m.one, "five": m.five, "fifteen": m.fifteen, "day": m.day}

        r = self.retention
        return {
            "push": rates(self.push),
            "pull": rates(self.pull),
            "retention": {
                "n": r.n, "min": r.min, "max": r.max, "mean": r.mean, "median": r.median,
                "percentiles": {f"{p:g}": v for p, v in r.percentiles.items()},
            },
        }  # fmt: skip


def format_admin_stats(stats: Mapping[str, QueueStats]) -> str:
    """What ``lmq-admin stats`` prints: per queue, push and pull rates per second over 1, 5, 15
    minutes and a day, and retention seconds over the last minute, in LMQ's layout."""
    out: list[str] = []
    for name, s in stats.items():
        out.append(name)
        for label, m in (("push", s.push), ("pull", s.pull)):
            out.append(f"  {label} rate: 1min {m.one:.2f}, 5min {m.five:.2f}, 15min {m.fifteen:.2f}, 1day {m.day:.2f}")
        r = s.retention
        out.append(f"  retention time: min {r.min:.3f}, max {r.max:.3f}, mean {r.mean:.3f}, median {r.median:.3f}")
    return "".join(line + "\n" for line in out)


class _Entry:
    __slots__ = ("pull", "pull_line", "push", "push_line", "retention", "retention_name", "serial")

    def __init__(self, queue: str, clock: Clock, rng: random.Random, rate: float, serial: int) -> None:
        self.serial = serial  # tells a queue's meters from those of a queue of the same name before
        self.push = Meter()
        self.pull = Meter()
        self.retention = SlidingHistogram(60, 100, clock, rng)
        # Counter datagrams never change: built once, the request path only sends them.
        self.push_line = counter_line(metric_name(queue, "push"), 1, rate)
        self.pull_line = counter_line(metric_name(queue, "pull"), 1, rate)
        self.retention_name = metric_name(queue, "retention")


class QueueMetrics:
    """Meters and retention per queue, fed by the queues (``on_push``/``on_pull``)."""

    def __init__(
        self,
        statsd: StatsdEmitter | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.statsd = statsd
        self._clock: Clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._queues: dict[str, _Entry] = {}
        self._serials = itertools.count(1)
        self._ticker: asyncio.Task[None] | None = None

    def _entry(self, queue: str) -> _Entry:
        entry = self._queues.get(queue)
        if entry is None:
            rate = self.statsd.sample_rate if self.statsd is not None else 1.0
            entry = self._queues[queue] = _Entry(queue, self._clock, self._rng, rate, next(self._serials))
        return entry

    # -- QueueObserver -----------------------------------------------------------------------

    def on_push(self, queue: str) -> None:
        entry = self._entry(queue)
        entry.push.mark()
        statsd = self.statsd
        if statsd is not None and statsd.sampled():
            statsd.send(entry.push_line)

    def on_pull(self, queue: str, retention: float) -> None:
        """``retention``: seconds the message waited in the queue."""
        entry = self._entry(queue)
        entry.pull.mark()
        entry.retention.update(retention)
        statsd = self.statsd
        if statsd is not None:
            if statsd.sampled():
                statsd.send(entry.pull_line)
            if statsd.sampled():
                statsd.send(timing_line(entry.retention_name, retention * 1000.0, statsd.sample_rate))

    # -----------------------------------------------------------------------------------------

    def forget(self, queue: str) -> None:
        """Drop a deleted queue's metrics."""
        self._queues.pop(queue, None)

    on_delete = forget

    def stats(self, queue: str) -> QueueStats | None:
        entry = self._queues.get(queue)
        if entry is None:
            return None
        return QueueStats(entry.push.rates(), entry.pull.rates(), entry.retention.stats())

    def counts(self) -> list[tuple[str, int, int, int]]:
        """Every metered queue with the serial number of its meters (a queue deleted and made
        again gets new ones) and their cumulative push and pull counts (for RateHistory)."""
        return [(q, e.serial, e.push.count, e.pull.count) for q, e in self._queues.items()]

    def all_stats(self) -> dict[str, QueueStats]:
        return {q: s for q in sorted(self._queues) if (s := self.stats(q)) is not None}

    def tick(self) -> None:
        for entry in self._queues.values():
            entry.push.tick()
            entry.pull.tick()

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK_SECONDS)
            self.tick()

    def start(self) -> None:
        """Tick the meters every 5 s (folsom's interval) until :meth:`stop`."""
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick_forever(), name="pylmq-meter-tick")

    async def stop(self) -> None:
        task, self._ticker = self._ticker, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
