"""The node's connections to PostgreSQL, and which failures mean "the database cannot be reached".

A connection-level failure (refused, reset, terminated by a restart or a failover, a statement
past its timeout) becomes :class:`~pylmq.errors.StoreUnavailable` whose reason names the cause;
the pool replaces broken connections by itself, so the next operation after the database is
back succeeds. Any other database error is a bug of ours and stays what it is (HTTP 500).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any, Final

import asyncpg

from pylmq.errors import StoreUnavailable

__all__ = ["APPLICATION_NAME", "connection_failure", "create_pool", "discard", "server_settings", "unavailable"]

APPLICATION_NAME: Final = "pylmq"
"""``application_name`` of every connection a node opens: operators find them in
``pg_stat_activity``."""

# Operator intervention (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now),
# too many connections (53300), a read-only standby after a failover (25006).
_UNAVAILABLE_SQLSTATES: Final = frozenset({"57P01", "57P02", "57P03", "53300", "25006"})
_STATEMENT_TIMEOUT: Final = "57014"


# InterfaceError messages of a connection that is gone or whose protocol state is lost (a
# server shutdown can leave one mid-operation); the other InterfaceErrors (bad arguments,
# unsupported features) are bugs of ours.
_BROKEN_INTERFACE: Final = ("closed", "closing", "another operation is in progress")


def connection_failure(e: BaseException) -> str | None:
    """What made an operation fail if the database could not be reached (or did not answer in
    time); None for any other error. A connection that failed so must not serve again: see
    :func:`discard`."""
    if isinstance(e, asyncpg.PostgresConnectionError):
        return f"connection lost ({e})"
    if isinstance(e, asyncpg.PostgresError):
        state = getattr(e, "sqlstate", None)
        if state == _STATEMENT_TIMEOUT:
            return f"statement timed out ({e})"
        if state in _UNAVAILABLE_SQLSTATES:
            return str(e)
        return None
    if isinstance(e, TimeoutError | asyncio.TimeoutError):
        return "no answer in time"
    if isinstance(e, OSError):
        return e.strerror or str(e) or type(e).__name__
    if isinstance(e, asyncpg.InterfaceError) and any(m in str(e) for m in _BROKEN_INTERFACE):
        return f"connection broken ({e})"
    if isinstance(e, asyncpg.InternalClientError):
        # The client's protocol state machine is out of step with the server, as when a fast
        # shutdown cuts a connection mid-operation ("cannot switch to state 12; another operation
        # (2) is in progress", asyncpg issue 1069): the connection is unusable, the database
        # may be fine or restarting. ProtocolError (garbage on the wire) is one too.
        return f"connection broken ({e})"
    return None


def discard(conn: Any) -> None:
    """Close ``conn`` (a pooled connection) without a word to the server, so that the pool opens
    a new one instead of lending it again: the pool releases connections without any query
    (see :func:`create_pool`), so a broken one would otherwise come back."""
    with contextlib.suppress(Exception):
        conn.terminate()


async def _keep_session(_conn: asyncpg.Connection[Any]) -> None:
    """The pool's reset on release: nothing. The store leaves no session state on a pooled
    connection (no LISTEN, no SET, no advisory lock outside a transaction, no cursor, autocommit
    statements), so asyncpg's default reset (``RESET ALL; UNLISTEN *; ...``) would be one more
    round trip per operation for nothing. asyncpg still rolls back an open transaction itself."""


def unavailable(cause: str, detail: str) -> StoreUnavailable:
    return StoreUnavailable(f"postgresql unreachable: {cause}; {detail}")


def server_settings(timeout: float) -> dict[str, str]:
    """Per-session settings: the server ends a statement past the node's timeout too (the
    client-side ``command_timeout`` alone would leave it running, holding its locks)."""
    return {
        "application_name": APPLICATION_NAME,
        "statement_timeout": str(max(1, round(timeout * 1000))),
        # Acknowledged means committed to disk, whatever the database's default says.
        "synchronous_commit": "on",
    }


async def create_pool(
    dsn: str, size: int, timeout: float, init: Callable[[asyncpg.Connection[Any]], Coroutine[Any, Any, None]]
) -> asyncpg.Pool[Any]:
    """A pool of 1 to ``size`` connections; raises the connection error when the database cannot
    be reached now."""
    pool: asyncpg.Pool[Any] = await asyncpg.create_pool(
        dsn,
        min_size=1,
        max_size=max(1, size),
        command_timeout=timeout,
        timeout=timeout,
        server_settings=server_settings(timeout),
        init=init,
        reset=_keep_session,
    )
    return pool
