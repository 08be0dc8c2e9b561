"""The node's LISTEN session: one dedicated connection (a pooled one would be handed to other
work) LISTENing on ``lmq_due`` and ``lmq_meta``.

Notifications sent while it is disconnected are lost, so after every (re)connection, once
LISTEN is in place, ``on_connect`` runs: the store re-reads everything it summarises and wakes
every queue. A connection that died silently (no FIN: a cable, a failover) is found by a ping
every ``ping_interval``; reconnection backs off from ``BACKOFF_FIRST`` doubling to
``BACKOFF_MAX`` while the database stays away.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final

import asyncpg

from pylmq.pgstore.pool import connection_failure, server_settings

__all__ = ["BACKOFF_FIRST", "BACKOFF_MAX", "CHANNELS", "Listener"]

log = logging.getLogger(__name__)

CHANNELS: Final = ("lmq_due", "lmq_meta")
BACKOFF_FIRST: Final = 0.1
BACKOFF_MAX: Final = 5.0

Notify = Callable[[int, str, str], None]
"""(sender's backend pid, channel, payload)."""


class Listener:
    def __init__(
        self,
        dsn: str,
        timeout: float,
        on_notify: Notify,
        on_connect: Callable[[], Awaitable[None]],
        *,
        ping_interval: float = 5.0,
    ) -> None:
        self.dsn = dsn
        self.timeout = timeout
        self.on_notify = on_notify
        self.on_connect = on_connect
        self.ping_interval = ping_interval
        self.conn: asyncpg.Connection[Any] | None = None
        self.connects = 0
        """Sessions opened so far (the first at start)."""
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def server_pid(self) -> int | None:
        return None if self.conn is None or self.conn.is_closed() else self.conn.get_server_pid()

    async def start(self) -> None:
        """Connect and LISTEN (raising if the database cannot be reached), then keep the session
        up in the background. ``on_connect`` is not run for this first session: the store loads
        right after, and anything committed from now on is heard."""
        await self._connect()
        self._task = asyncio.get_running_loop().create_task(self._keep(), name="pgstore-listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._drop()

    async def _connect(self) -> None:
        conn: asyncpg.Connection[Any] = await asyncpg.connect(
            self.dsn, timeout=self.timeout, command_timeout=self.timeout, server_settings=server_settings(self.timeout)
        )
        try:
            conn.add_termination_listener(lambda _c: self._lost.set())
            for channel in CHANNELS:
                await conn.add_listener(channel, self._heard)
        except BaseException:
            conn.terminate()
            raise
        self._lost.clear()
        self.conn = conn
        self.connects += 1

    def _heard(self, _conn: Any, pid: int, channel: str, payload: object) -> None:
        try:
            self.on_notify(pid, channel, str(payload))
        except Exception:
            log.exception("handling notification %s %r failed", channel, payload)

    async def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()  # no goodbye: it may be half-dead

    async def _keep(self) -> None:
        while True:
            await self._watch()
            await self._drop()
            delay = BACKOFF_FIRST
            while True:
                try:
                    await self._connect()
                    await self.on_connect()
                    log.info("LISTEN session to PostgreSQL back; summaries re-read")
                    break
                except Exception as e:
                    cause = connection_failure(e)
                    if cause is None:
                        log.exception("LISTEN session to PostgreSQL: resync failed")
                    else:
                        log.warning("LISTEN session to PostgreSQL: %s; again in %.1fs", cause, delay)
                    await self._drop()
                    await asyncio.sleep(delay)
                    delay = min(BACKOFF_MAX, delay * 2)

    async def _watch(self) -> None:
        """Return when the session is lost (terminated, or a ping failed)."""
        while not self._lost.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), self.ping_interval)
                return
            conn = self.conn
            if conn is None or conn.is_closed():
                return
            try:
                await conn.execute("SELECT 1", timeout=self.timeout)
            except Exception as e:
                log.warning("LISTEN session to PostgreSQL lost: %s", connection_failure(e) or e)
                return
