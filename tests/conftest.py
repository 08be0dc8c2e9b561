"""Fixtures shared by every test folder: a throwaway PostgreSQL (tests/pg_helpers.py) and the
store the API suites run on (``--store``, tests/suite_store.py)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from pylmq.node import NodeOptions
from pylmq.pgstore.schema import migrate
from tests.pg_helpers import DatabaseCopies, PgServer, pg_missing_reason, serve_pg
from tests.suite_store import DEFAULT_STORE, ENV, STORES, SuiteOptions, build_options


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store",
        choices=STORES,
        default=os.environ.get(ENV) or DEFAULT_STORE,
        help=f"the store the API suites' nodes use (default: ${ENV}, else {DEFAULT_STORE}); "
        "postgres runs them on a throwaway PostgreSQL, a fresh database per test",
    )


def pytest_configure(config: pytest.Config) -> None:
    store = config.getoption("--store")
    if store not in STORES:  # the default, from the environment, is not checked by choices
        raise pytest.UsageError(f"${ENV} must be one of {', '.join(STORES)}, got {store!r}")
    # Asked for postgres, the suites must not pass by skipping every test.
    if store == "postgres" and (reason := pg_missing_reason()) is not None:
        raise pytest.UsageError(f"--store postgres: {reason}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    store = config.getoption("--store")
    if store == "memory":
        return
    for item in items:
        marker = item.get_closest_marker("local_store")
        if marker is not None:
            if len(marker.args) != 1 or not isinstance(marker.args[0], str):
                raise pytest.UsageError(f"{item.nodeid}: local_store takes one reason, got {marker.args!r}")
            item.add_marker(pytest.mark.skip(reason=f"local_store, not on {store}: {marker.args[0]}"))


@pytest.fixture(scope="session")
def suite_store(pytestconfig: pytest.Config) -> str:
    """``memory`` or ``postgres``: the store of the suites' nodes."""
    store: str = pytestconfig.getoption("--store")
    return store


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """One PostgreSQL for the session; skipped, with the reason, where it cannot run."""
    yield from serve_pg()


@pytest.fixture
def pg_dsn(pg_server: PgServer) -> str:
    """A fresh, empty database of the session's PostgreSQL."""
    return pg_server.new_database()


@pytest.fixture(scope="session")
def pg_suite_template(pg_server: PgServer) -> str:
    """A database with the node's schema, migrated once: the suites' test databases are copies
    of it, so that each node start does not run the whole migration again (the store's own
    tests, tests/pgstore, migrate empty databases)."""
    dsn = pg_server.new_database()

    async def create_schema() -> None:
        conn = await asyncpg.connect(dsn)
        try:
            await migrate(conn)
        finally:
            await conn.close()

    asyncio.run(create_schema())
    return dsn.rsplit("/", 1)[1]


@pytest.fixture(scope="session")
def pg_suite_databases(pg_server: PgServer, pg_suite_template: str) -> Iterator[DatabaseCopies]:
    """The suites' test databases: copies of pg_suite_template, each made while the test before runs."""
    copies = DatabaseCopies(pg_server, pg_suite_template)
    try:
        yield copies
    finally:
        copies.close()


@pytest.fixture
def suite_options(request: pytest.FixtureRequest, suite_store: str, tmp_path: Path) -> Iterator[SuiteOptions]:
    """Options of nodes on the suite's store (tests/suite_store.py). Under postgres, the test's
    own database (a copy of pg_suite_template, pg_suite_databases), taken on first use and dropped
    after the test (its nodes are stopped first: they are fixtures or test code that depend on this one)."""
    copies: DatabaseCopies | None = None
    if suite_store == "postgres":
        copies = request.getfixturevalue("pg_suite_databases")
    dsn: str | None = None

    def make(*, durable: bool = False, **kw: Any) -> NodeOptions:
        nonlocal dsn
        if copies is not None and dsn is None:
            dsn = copies.take()
        return build_options(suite_store, tmp_path / "data", dsn, durable=durable, **kw)

    yield make
    if copies is not None and dsn is not None:
        copies.give_back(dsn)
