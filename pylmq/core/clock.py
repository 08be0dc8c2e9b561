"""Time for queue semantics comes from an injectable clock (Unix seconds as a float)."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now(self) -> float:
        """Unix time in seconds, as LMQ's ``lmq_misc:unixtime/0``."""
        ...


class SystemClock:
    __slots__ = ()

    def now(self) -> float:
        return time.time()


class ManualClock:
    """A clock that only moves when told to: lets tests check timing rules without sleeping."""

    __slots__ = ("_now",)

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds

    def set(self, now: float) -> None:
        self._now = now
