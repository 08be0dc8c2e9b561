"""What a node knows of each queue without asking the database: its size, payload bytes, records
in flight and first record's ts, for the synchronous reads (size, memory, counts, waittime).

Exact after this node's own operations (each returns the queue's state as committed with it).
Other nodes' changes arrive two ways: ``lmq_due`` notifications (a record became deliverable at
ts: ``first_ts`` is lowered at once, so waiters never sleep through it) and re-reads of the
queue's state (debounced after notifications, and a slow periodic one for changes that do not
notify: other nodes' pulls and acks). Too-early waittimes are harmless: a waiter pulls, gets
nothing, and the pull's own state corrects it; a too-late one would make a waiter sleep through
a message, which the rules here prevent.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Final

from pylmq.core.table import QueueCounts
from pylmq.pgstore.messages import QueueState

__all__ = ["HOLD_FIRST", "HOLD_MAX", "Summary"]

HOLD_FIRST: Final = 0.02
"""After a pull that found nothing although the first record looked due (another node is taking
it, its row is locked), waiters look again this much later, doubling up to :data:`HOLD_MAX`,
until a notification about the queue comes: no loop of empty pulls."""
HOLD_MAX: Final = 1.0
_RECENT: Final = 64


@dataclass(slots=True)
class Summary:
    qid: int
    size: int = 0
    nbytes: int = 0
    in_flight: int = 0
    first_ts: float | None = None
    heard: int = 0
    """Notifications applied so far (an operation notes it before its call, see :meth:`apply`)."""
    recent: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=_RECENT))
    hold: tuple[int, float, float] | None = None
    """(heard, until, length) after an empty pull while the first record looked due."""

    def apply(self, state: QueueState, since: int, now: float) -> None:
        """The queue's state as committed by an operation that began when ``heard`` was
        ``since``: a record another node made deliverable while the call was in flight may have
        committed after the operation's snapshot, so its ts stays a candidate."""
        self.size, self.nbytes, self.in_flight = state.size, state.nbytes, state.in_flight
        first = state.first_ts
        if self.heard != since:
            if self.recent and self.recent[0][0] <= since + 1:
                missed = [ts for n, ts in self.recent if n > since]
            else:
                missed = [now]  # more came than remembered: look again at once
            first = min([*missed, *([] if first is None else [first])])
        self.first_ts = first
        self.hold = None

    def due(self, ts: float) -> None:
        """A record became deliverable at ``ts`` (a notification)."""
        self.heard += 1
        self.recent.append((self.heard, ts))
        self.first_ts = ts if self.first_ts is None else min(self.first_ts, ts)
        self.hold = None

    def missed(self, since: int, now: float) -> None:
        """A pull found nothing; hold waiters back if the first record still looks due."""
        if self.heard != since or self.first_ts is None or self.first_ts > now:
            self.hold = None
            return
        length = HOLD_FIRST if self.hold is None or self.hold[0] != since else min(HOLD_MAX, self.hold[2] * 2)
        self.hold = (since, now + length, length)

    def waittime(self, now: float) -> float | None:
        if self.first_ts is None:
            return None
        wait = max(0.0, self.first_ts - now)
        if self.hold is not None:
            if self.hold[0] != self.heard:
                self.hold = None
            else:
                wait = max(wait, self.hold[1] - now)
        return wait

    def counts(self, now: float) -> QueueCounts:
        """In flight as last known; the rest counted visible, or delayed while the first record
        is not due (the summary has no per-record times: SQS's counts are approximate too)."""
        rest = max(0, self.size - self.in_flight)
        if self.in_flight == 0 and self.first_ts is not None and self.first_ts > now:
            return QueueCounts(0, 0, rest)
        return QueueCounts(rest, self.in_flight, 0)
