"""Limits on what clients may hold: the connection limit both API servers apply (and the one
log line that says it was hit), the read timeouts, and the node-wide budget for requests
partly received.

Every connection costs a file descriptor. Past the process's limit (``RLIMIT_NOFILE``) accept()
fails for everyone and the node can no longer open its own files (journal, logs, links to other
nodes). Each API therefore refuses connections past ``max_connections``; by default half of
the descriptors the process may open, less :data:`RESERVED_FDS` kept for the node itself, so
that the HTTP and RPC ports flooded together still leave those.

Every byte of a request not yet whole (an HTTP body, a MessagePack-RPC frame) is memory a
client holds without the node having anything to act on. One size limit per request (64 MiB)
times the connection limit (thousands) is far more than a node has, so both servers charge
those bytes to one :class:`BufferBudget` (``max_buffered_bytes``): a read that would take the
total past it refuses its request at once (HTTP 503 ``too_much_buffered``; RPC closes the
connection) and frees what it held. A request that arrives whole within one read is never
charged, so small requests go on being served while large uploads fill the budget.

A request being received must keep coming: a window of the read timeout that brings fewer than
``min_receive_rate`` bytes a second (:class:`Progress`) ends it, so a client that sends most
of a body quickly and then a byte now and then cannot hold its share of the budget, or its
connection, for ever.
"""

from __future__ import annotations

import heapq
import logging
import os
import resource
from collections.abc import Callable, Iterable, Sized
from typing import Generic, Protocol, TypeVar

from pylmq.errors import TooMuchBuffered

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_EVICT_AFTER",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MIN_RECEIVE_RATE",
    "EVICT_BATCH",
    "EVICT_SCAN_EVERY",
    "RESERVED_FDS",
    "BufferBudget",
    "ConnectionLimit",
    "Evictions",
    "Progress",
    "default_max_buffered",
    "default_max_connections",
]

DEFAULT_HEADER_TIMEOUT = 30.0
"""Seconds from an HTTP request's first byte to the end of its head: a deadline, not reset by
each byte, or a client sending a byte now and then (slowloris) would hold its connection."""
DEFAULT_BODY_TIMEOUT = 30.0
"""Seconds an HTTP request body may go without a byte arriving; also the window over which a
body or a MessagePack-RPC frame must come at ``min_receive_rate`` (:class:`Progress`)."""
DEFAULT_MIN_RECEIVE_RATE = 1024
"""Bytes a second a request being received must average over each window of the body timeout
(Apache's mod_reqtimeout asks 500). Low enough for a client on a poor mobile link; a client
holding 60 MiB of a body by sending a byte a second is closed within a window."""

DEFAULT_EVICT_AFTER = 1.0
"""Seconds an HTTP connection must have been idle, or trickling in a request head, before a new
connection may take its place at the limit. A client that sends whole requests is not mid-head
that long; an idle keep-alive connection that is closed is one its client reopens."""
EVICT_SCAN_EVERY = 0.05
"""Seconds between two scans for connections to close at the limit (a scan visits them all)."""
EVICT_BATCH = 64
"""Connections one scan keeps as the next to close."""

DEFAULT_MAX_CONNECTIONS = 10_000
"""The most connections one API accepts whatever the descriptor limit."""
RESERVED_FDS = 128
"""Descriptors left for the node's own files and cluster links."""
LOG_EVERY = 60.0
"""Seconds between two log lines about refused connections (a flood would write one per try)."""

MIN_BUFFERED = 64 << 20
"""The least default budget: one request of the default size limit (64 MiB) must fit."""
MAX_DEFAULT_BUFFERED = 256 << 20
"""The most default budget, whatever the memory: four uploads of the size limit at once."""


def default_max_connections() -> int:
    """Half the descriptors left after :data:`RESERVED_FDS`, at most 10,000, at least 16."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_MAX_CONNECTIONS
    return max(16, min(DEFAULT_MAX_CONNECTIONS, (soft - RESERVED_FDS) // 2))


def default_max_buffered() -> int:
    """An eighth of physical memory, between :data:`MIN_BUFFERED` and :data:`MAX_DEFAULT_BUFFERED`:
    a node on a small machine keeps room for its queues (and Python's own overhead on what it
    reads), a large one gains nothing from letting clients park more."""
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return MAX_DEFAULT_BUFFERED
    return max(MIN_BUFFERED, min(MAX_DEFAULT_BUFFERED, ram // 8))


class _Refusals:
    """Counts refusals and logs them on ``log`` at most once per :data:`LOG_EVERY` seconds of
    ``clock``, the line after the first saying how many there were since the one before."""

    def __init__(self, log: logging.Logger, clock: Callable[[], float]) -> None:
        self.log = log
        self.clock = clock
        self.refused = 0  # since the last log line
        self._logged_at: float | None = None

    def refuse(self, msg: str, *args: object) -> None:
        """One refusal; ``msg % args`` is the line, should one be written now."""
        self.refused += 1
        now = self.clock()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            since = "" if self._logged_at is None else f"; {self.refused} refused since the last such line"
            self.log.warning(msg + "%s", *args, since)
            self._logged_at = now
            self.refused = 0


class ConnectionLimit:
    """Admits connections while fewer than ``max_connections`` are open, after asking the
    server to make room at the limit; logs refusals on ``log`` at most once per
    :data:`LOG_EVERY` seconds of ``clock``, with how many there were."""

    def __init__(self, max_connections: int, api: str, log: logging.Logger, clock: Callable[[], float]) -> None:
        self.max_connections = max(1, max_connections)
        self.api = api
        self._refusals = _Refusals(log, clock)

    def admit_to(self, connections: Sized, make_room: Callable[[], object]) -> bool:
        """Whether a newcomer may join ``connections``; at the limit ``make_room`` is called
        first (it may close one of them, see :class:`Evictions`)."""
        if len(connections) >= self.max_connections:
            make_room()
        return self.admit(len(connections))

    def admit(self, open_now: int) -> bool:
        if open_now < self.max_connections:
            return True
        self._refusals.refuse(
            "%s: connection limit of %d reached (max_connections): new connections are refused",
            self.api, self.max_connections,
        )  # fmt: skip
        return False


class BufferBudget:
    """The bytes of partly received requests the node holds, across the HTTP and RPC servers
    (see the module docstring). Each connection says what it now holds (:meth:`charge`) and
    gives it back when the request is whole or dropped (:meth:`release`); refusals are logged
    on ``log`` at most once per :data:`LOG_EVERY` seconds of ``clock``."""

    def __init__(self, max_bytes: int, log: logging.Logger, clock: Callable[[], float]) -> None:
        self.max_bytes = max(1, max_bytes)
        self.used = 0
        self._refusals = _Refusals(log, clock)

    def charge(self, held: int, holds: int, api: str) -> bool:
        """A connection that held ``held`` bytes now holds ``holds``: whether that fits. When
        it does not, nothing changes: the caller drops its request and releases ``held``."""
        grows = holds - held
        if grows > 0 and self.used + grows > self.max_bytes:
            self._refusals.refuse(
                "%s: %d bytes of requests partly received, the budget (max_buffered_bytes) is %d:"
                " a request that would take more is refused",
                api, self.used, self.max_bytes,
            )  # fmt: skip
            return False
        self.used += grows
        return True

    def release(self, held: int) -> None:
        self.used -= held

    def refusal(self) -> TooMuchBuffered:
        """What a request refused by :meth:`charge` is answered, by either server."""
        return TooMuchBuffered(
            f"the server holds as much of requests still being received as it may"
            f" ({self.max_bytes} bytes, max_buffered_bytes); try again later"
        )


class Progress:
    """Whether a request being received keeps coming: bytes are counted over windows of
    ``window`` seconds; a window that ends with fewer than ``min_rate`` bytes a second (at
    least one byte) is too slow. Checked by a periodic sweep, so a window may run up to one
    sweep period longer, which only favours the client."""

    __slots__ = ("received", "since")

    def __init__(self) -> None:
        self.since = 0.0
        self.received = 0

    def start(self, now: float) -> None:
        self.since = now
        self.received = 0

    def too_slow(self, now: float, window: float, min_rate: int) -> bool:
        if now - self.since < window:
            return False
        if self.received < max(1.0, min_rate * window):
            return True
        self.start(now)
        return False


class _Evictable(Protocol):
    def holds_a_place_since(self, before: float) -> float | None: ...

    def give_up_place(self) -> None: ...


C = TypeVar("C", bound=_Evictable)


class Evictions(Generic[C]):
    """At the connection limit, picks the connection that has held its place longest without
    use (``evict_after`` seconds at least; what counts as use is the server's, through
    ``holds_a_place_since``). Finding candidates is a scan of every connection, so it runs at
    most every :data:`EVICT_SCAN_EVERY` seconds and keeps the :data:`EVICT_BATCH` oldest for
    the next newcomers: a flood of connects costs the loop a bounded share of its time."""

    def __init__(self, evict_after: float) -> None:
        self.evict_after = evict_after
        self._batch: list[C] = []
        self._next_scan = 0.0

    def make_room(self, connections: Iterable[C], live: Callable[[C], bool], now: float) -> bool:
        """Close one connection of ``connections`` for a newcomer; whether one was."""
        before = now - self.evict_after
        if not self._batch and now >= self._next_scan:
            self._next_scan = now + EVICT_SCAN_EVERY
            held = ((since, id(c), c) for c in connections if (since := c.holds_a_place_since(before)) is not None)
            self._batch = [c for _, _, c in heapq.nsmallest(EVICT_BATCH, held)]
            self._batch.reverse()  # the oldest last: popped first
        while self._batch:
            conn = self._batch.pop()
            if live(conn) and conn.holds_a_place_since(before) is not None:
                conn.give_up_place()
                return True
        return False
