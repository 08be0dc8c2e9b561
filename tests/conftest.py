"""Fixtures shared by every test folder: a throwaway PostgreSQL (tests/pg_helpers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg_helpers import PgServer, pg_missing_reason


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL for the session; skipped, with the reason, where it cannot run."""
    reason = pg_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    server = PgServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> str:
    """A fresh, empty database of the session's PostgreSQL."""
    return pg_server.new_database()
