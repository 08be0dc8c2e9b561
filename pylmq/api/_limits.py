"""Limits on what clients may hold: the connection limit both API servers apply (and the one
log line that says it was hit), the HTTP read timeouts.

Every connection costs a file descriptor. Past the process's limit (``RLIMIT_NOFILE``) accept()
fails for everyone and the node can no longer open its own files (journal, logs, links to other
nodes). Each API therefore refuses connections past ``max_connections``; by default half of
the descriptors the process may open, less :data:`RESERVED_FDS` kept for the node itself, so
that the HTTP and RPC ports flooded together still leave those.
"""

from __future__ import annotations

import logging
import resource
from collections.abc import Callable

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_EVICT_AFTER",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "EVICT_BATCH",
    "EVICT_SCAN_EVERY",
    "RESERVED_FDS",
    "ConnectionLimit",
    "default_max_connections",
]

DEFAULT_HEADER_TIMEOUT = 30.0
"""Seconds from an HTTP request's first byte to the end of its head: a deadline, not reset by
each byte, or a client sending a byte now and then (slowloris) would hold its connection."""
DEFAULT_BODY_TIMEOUT = 30.0
"""Seconds an HTTP request body may go without a byte arriving."""

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


def default_max_connections() -> int:
    """Half the descriptors left after :data:`RESERVED_FDS`, at most 10,000, at least 16."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_MAX_CONNECTIONS
    return max(16, min(DEFAULT_MAX_CONNECTIONS, (soft - RESERVED_FDS) // 2))


class ConnectionLimit:
    """Admits connections while fewer than ``max_connections`` are open; logs refusals on
    ``log`` at most once per :data:`LOG_EVERY` seconds of ``clock``, with how many there were."""

    def __init__(self, max_connections: int, api: str, log: logging.Logger, clock: Callable[[], float]) -> None:
        self.max_connections = max(1, max_connections)
        self.api = api
        self.log = log
        self.clock = clock
        self.refused = 0  # since the last log line
        self._logged_at: float | None = None

    def admit(self, open_now: int) -> bool:
        if open_now < self.max_connections:
            return True
        self.refused += 1
        now = self.clock()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            since = "" if self._logged_at is None else f"; {self.refused} refused since the last such line"
            self.log.warning(
                "%s: connection limit of %d reached (max_connections): new connections are refused%s",
                self.api, self.max_connections, since,
            )  # fmt: skip
            self._logged_at = now
            self.refused = 0
        return False
