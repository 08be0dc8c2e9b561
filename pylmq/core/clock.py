"""Time for queue semantics comes from an injectable clock (Unix seconds as a float).

The clock gives both the time that deadlines are compared with and the timers that wake
waiters when a deadline passes: a test that moves one moves the other, so waits run in
virtual time instead of sleeping on the wall clock.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Clock", "ManualClock", "SystemClock", "Timer"]


class Timer(Protocol):
    """A callback scheduled by :meth:`Clock.call_later`."""

    def cancel(self) -> None:
        """Drop the callback if it has not run yet (a no-op after)."""
        ...


class Clock(Protocol):
    def now(self) -> float:
        """Unix time in seconds, as LMQ's ``lmq_misc:unixtime/0``."""
        ...

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        """Run ``callback(*args)`` once ``delay`` seconds of this clock have passed."""
        ...


class SystemClock:
    __slots__ = ()

    def now(self) -> float:
        return time.time()

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        # The loop's monotonic clock, not time(): a wall clock stepped back must not delay wake-ups.
        return asyncio.get_running_loop().call_later(delay, callback, *args)


class _ManualTimer:
    __slots__ = ("args", "callback", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...]) -> None:
        self.when = when
        self.callback = callback
        self.args = args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualClock:
    """A clock that only moves when told to: lets tests check timing rules without sleeping.

    Its timers run when :meth:`advance` (or :meth:`set`) moves the time past them, in the order
    of their due times (the order they were set in for equal times), each with :meth:`now` at
    its due time; one set by a callback runs in the same call if it falls due by its end. They
    run synchronously inside that call, so a task they wake runs at the caller's next ``await``.
    """

    __slots__ = ("_now", "_seq", "_timers")

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start
        self._timers: list[tuple[float, int, _ManualTimer]] = []
        self._seq = itertools.count()  # ties keep the order the timers were set in

    def now(self) -> float:
        return self._now

    def call_later(self, delay: float, callback: Callable[..., object], *args: Any) -> Timer:
        timer = _ManualTimer(self._now + max(delay, 0.0), callback, args)
        heapq.heappush(self._timers, (timer.when, next(self._seq), timer))
        return timer

    def pending(self) -> int:
        """Timers set and neither run nor cancelled."""
        return sum(not t.cancelled for _, _, t in self._timers)

    def advance(self, seconds: float) -> None:
        self.set(self._now + seconds)

    def set(self, now: float) -> None:
        """Move to ``now``; timers due by then run (none when the time moves back)."""
        while self._timers and self._timers[0][0] <= now:
            _, _, timer = heapq.heappop(self._timers)
            if timer.cancelled:
                continue
            timer.cancelled = True  # ran: a later cancel() is a no-op
            self._now = max(self._now, timer.when)
            timer.callback(*timer.args)
        self._now = now
