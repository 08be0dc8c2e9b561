"""Push/pull rates of the last minutes, sampled every few seconds, for the web console's charts.

The meters (:mod:`pylmq.metrics.meter`) keep a cumulative count per queue and per side; every
``step`` seconds :class:`RateHistory` reads them all and turns the growth since its previous
sample into a rate per second. Nothing changes on the request path: the counts already exist.

It keeps:

- the node's rate (the sum over its queues), one point per sample for ``window`` seconds;
- the last rate of every queue (the console's live "push/s" column and its sorts);
- a ring of points per queue, only for queues active in the window and at most ``max_tracked``
  of them (a ring is two arrays of ``window / step`` doubles, about 7 KiB): a node of many idle
  queues pays for none of them. Past the cap a queue still has its live rate, not its history.

Rates divide by the time that really passed between two samples, so a late sample (a busy
loop) stays true. Samples are numbered (``seq``) so that a page asks only for the points it
lacks (``since``). A sample walks the queues in slices of ``slice_size`` with a pass of the
event loop between them: a node of many queues keeps serving meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from collections.abc import Sequence
from typing import Any, Protocol

from pylmq.core.clock import Clock, SystemClock

__all__ = ["STEP", "WINDOW", "CountSource", "RateHistory"]

STEP = 2.0
"""Seconds between two samples."""
WINDOW = 900.0
"""Seconds of history kept (15 minutes)."""
MAX_TRACKED = 2048
SLICE = 1000


class CountSource(Protocol):
    def counts(self) -> Sequence[tuple[str, int, int, int]]:
        """Every metered queue: name, serial number of its meters, cumulative push and pull counts."""
        ...


class _Ring:
    __slots__ = ("active", "pull", "push", "start")

    def __init__(self, zeros: array[float], start: int) -> None:
        self.push = zeros[:]
        self.pull = zeros[:]
        self.start = start  # the first sample it holds
        self.active = start  # the last sample with traffic


class _Seen:
    """A queue's counts at the previous sample and the rates since the one before."""

    __slots__ = ("active", "pull", "pull_rate", "push", "push_rate", "sample", "serial")

    def __init__(self, serial: int) -> None:
        self.serial = serial
        self.push = self.pull = 0
        self.push_rate = self.pull_rate = 0.0
        self.active = 0  # the last sample that found traffic (0: none yet)
        self.sample = 0  # the last sample that found the queue metered


def _points(seq: int, t: array[float], cols: Sequence[array[float]], first: int) -> list[list[float]]:
    """Columns of the samples ``first..seq`` (all inside the window), times first."""
    size = len(t)
    return [[round(c[s % size], 3) for s in range(first, seq + 1)] for c in (t, *cols)]


class RateHistory:
    """Rates of the last ``window`` seconds; :meth:`start` samples every ``step`` seconds."""

    def __init__(
        self,
        source: CountSource,
        clock: Clock | None = None,
        *,
        step: float = STEP,
        window: float = WINDOW,
        max_tracked: int = MAX_TRACKED,
        slice_size: int = SLICE,
    ) -> None:
        if step <= 0 or window < step or max_tracked < 0 or slice_size < 1:
            raise ValueError("step > 0, window >= step, max_tracked >= 0 and slice_size >= 1 are needed")
        self.source = source
        self.clock: Clock = clock or SystemClock()
        self.step = step
        self.size = int(window // step)
        self.max_tracked = max_tracked
        self.slice_size = slice_size
        self.seq = 0  # samples taken; points are numbered from 1
        self._last_t: float | None = None  # time of the previous sample (None: none yet)
        self._zeros = array("d", [0.0]) * self.size
        self._t = self._zeros[:]
        self._push = self._zeros[:]
        self._pull = self._zeros[:]
        self._seen: dict[str, _Seen] = {}
        self._rings: dict[str, _Ring] = {}
        self._task: asyncio.Task[None] | None = None

    # -- sampling ----------------------------------------------------------------------------

    async def sample(self) -> None:
        """Take one sample: read every queue's counts (a pass of the loop every slice)."""
        now = self.clock.now()
        if self._last_t is None:
            # The first sample only sets where counting starts: the meters may hold counts
            # made long before, which are no rate of the last seconds.
            self._last_t = now
            await self._walk(0.0, None)
            return
        elapsed = now - self._last_t
        if elapsed <= 0:
            return  # the clock did not move: no rate to tell
        self._last_t = now
        self.seq += 1
        slot = self.seq % self.size
        push, pull = await self._walk(elapsed, slot)
        self._t[slot] = now
        self._push[slot] = push
        self._pull[slot] = pull
        # Rings idle for a whole window hold only zeros: free them for queues that move.
        horizon = self.seq - self.size
        for name in [n for n, r in self._rings.items() if r.active <= horizon]:
            del self._rings[name]

    async def _walk(self, elapsed: float, slot: int | None) -> tuple[float, float]:
        counts = self.source.counts()
        seq, seen, rings = self.seq, self._seen, self._rings
        total_push = total_pull = 0.0
        for i in range(0, len(counts), self.slice_size):
            if i:
                await asyncio.sleep(0)
            for name, serial, push, pull in counts[i : i + self.slice_size]:
                s = seen.get(name)
                if s is None or s.serial != serial:
                    # New since the previous sample (or deleted and made again): its meters
                    # started at zero meanwhile.
                    rings.pop(name, None)
                    s = seen[name] = _Seen(serial)
                elif push == s.push and pull == s.pull and not (s.push_rate or s.pull_rate) and name not in rings:
                    s.sample = seq  # idle and already shown idle: most queues of a big node
                    continue
                dpush, dpull = push - s.push, pull - s.pull
                s.push, s.pull, s.sample = push, pull, seq
                if slot is None:  # the first sample: counting starts here
                    continue
                s.push_rate, s.pull_rate = dpush / elapsed, dpull / elapsed
                total_push += s.push_rate
                total_pull += s.pull_rate
                ring = rings.get(name)
                if dpush or dpull:
                    s.active = seq
                    if ring is None and len(rings) < self.max_tracked:
                        ring = rings[name] = _Ring(self._zeros, seq)
                    if ring is not None:
                        ring.active = seq
                if ring is not None:
                    ring.push[slot], ring.pull[slot] = s.push_rate, s.pull_rate
        # Queues no longer metered were deleted: forget them (a sample in between could not
        # see them, as the list was taken at its start).
        for name in [n for n, s in seen.items() if s.sample != seq]:
            del seen[name]
            rings.pop(name, None)
        return total_push, total_pull

    async def _run(self) -> None:
        await self.sample()  # where counting starts: the first point comes one step later
        while True:
            await asyncio.sleep(self.step)
            await self.sample()

    def start(self) -> None:
        """Sample every ``step`` seconds until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="pylmq-rate-history")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # -- reading -----------------------------------------------------------------------------

    def _first(self, since: int | None, start: int = 1) -> int:
        oldest = max(1, self.seq - self.size + 1, start)
        return oldest if since is None else max(oldest, since + 1)

    def node(self, since: int | None = None) -> dict[str, Any]:
        """The node's points after sample ``since`` (all those of the window when None):
        ``{"step", "seq", "t", "push", "pull"}``, rates in messages per second."""
        t, push, pull = _points(self.seq, self._t, (self._push, self._pull), self._first(since))
        return {"step": self.step, "seq": self.seq, "t": t, "push": push, "pull": pull}

    def node_rate(self) -> tuple[float, float]:
        """The node's push and pull rate over the last step."""
        if self.seq == 0:
            return 0.0, 0.0
        slot = self.seq % self.size
        return self._push[slot], self._pull[slot]

    def rate(self, name: str) -> tuple[float, float]:
        """``name``'s push and pull rate over the last step (0 for a queue never metered)."""
        s = self._seen.get(name)
        return (0.0, 0.0) if s is None else (s.push_rate, s.pull_rate)

    def queue(self, name: str, since: int | None = None) -> dict[str, Any] | None:
        """``name``'s points as :meth:`node`, or None when it moved in the window but holds
        no ring (more queues moved than :attr:`max_tracked`): its history is not known. A queue
        idle for the whole window (or never metered) reads as zeros."""
        ring = self._rings.get(name)
        if ring is not None:
            t, push, pull = _points(self.seq, self._t, (ring.push, ring.pull), self._first(since, ring.start))
            return {"step": self.step, "seq": self.seq, "t": t, "push": push, "pull": pull}
        s = self._seen.get(name)
        if s is not None and s.active and s.active > self.seq - self.size:
            return None
        first = self._first(since)
        (t,) = _points(self.seq, self._t, (), first)
        return {"step": self.step, "seq": self.seq, "t": t, "push": [0.0] * len(t), "pull": [0.0] * len(t)}

    def tracked(self) -> int:
        """How many queues hold a ring now."""
        return len(self._rings)
