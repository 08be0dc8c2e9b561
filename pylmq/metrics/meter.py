"""Push/pull meters: exponentially weighted moving rates, as folsom's meters compute them.

Events are counted as they come (:meth:`Meter.mark`); every :data:`TICK_SECONDS` an owner calls
:meth:`Meter.tick`, which turns the events of the last tick into an instant rate and folds it
into four moving averages of 1, 5 and 15 minutes and one day. Rates are events per second.
The first tick sets every rate to the instant rate, as folsom does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["TICK_SECONDS", "Meter", "MeterRates"]

TICK_SECONDS = 5.0
_WINDOWS_MINUTES = (1.0, 5.0, 15.0, 1440.0)


def _alpha(minutes: float, tick: float) -> float:
    return 1.0 - math.exp(-tick / 60.0 / minutes)


@dataclass(frozen=True, slots=True)
class MeterRates:
    count: int
    one: float
    five: float
    fifteen: float
    day: float


class Meter:
    __slots__ = ("_alphas", "_pending", "_rates", "_started", "_tick", "count")

    def __init__(self, tick_seconds: float = TICK_SECONDS) -> None:
        self._tick = tick_seconds
        self._alphas = tuple(_alpha(m, tick_seconds) for m in _WINDOWS_MINUTES)
        self._rates = [0.0, 0.0, 0.0, 0.0]
        self._started = False
        self._pending = 0
        self.count = 0

    def mark(self, n: int = 1) -> None:
        self._pending += n
        self.count += n

    def tick(self) -> None:
        instant = self._pending / self._tick
        self._pending = 0
        if not self._started:
            self._rates = [instant] * 4
            self._started = True
            return
        for i, alpha in enumerate(self._alphas):
            self._rates[i] += alpha * (instant - self._rates[i])

    @property
    def one(self) -> float:
        return self._rates[0]

    @property
    def five(self) -> float:
        return self._rates[1]

    @property
    def fifteen(self) -> float:
        return self._rates[2]

    @property
    def day(self) -> float:
        return self._rates[3]

    def rates(self) -> MeterRates:
        return MeterRates(self.count, *self._rates)
