"""``pytest --store`` (tests/suite_store.py, tests/conftest.py): which store the suites' nodes get,
and which tests are skipped, with their reason, under postgres."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.pg_helpers import pg_missing_reason
from tests.suite_store import build_options

ROOT = Path(__file__).resolve().parents[1]

# A suite of two tests: one about the store's own mechanics, one that reports the store it got.
CONFTEST = """
from tests.conftest import pg_server, pytest_addoption, pytest_collection_modifyitems, pytest_configure
from tests.conftest import pg_suite_databases, pg_suite_template, suite_options, suite_store
"""
SUITE = """
import pytest

@pytest.mark.local_store("journal internals")
def test_local() -> None:
    pass

def test_semantics(suite_options) -> None:
    opts = suite_options(durable=True)
    print(f"STORE={opts.store} DSN={opts.dsn}")
"""


def run_suite(tmp_path: Path, *args: str, env_store: str | None = None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_inner.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    local_store(reason): x\naddopts = -ra -s\n")
    env = {k: v for k, v in os.environ.items() if k != "PYLMQ_TEST_STORE"}
    env["PYTHONPATH"] = str(ROOT)
    if env_store is not None:
        env["PYLMQ_TEST_STORE"] = env_store
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_memory_nodes_get_the_memory_store_or_the_durable_one_on_the_tests_data() -> None:
    assert build_options("memory", Path("/d"), None).store == "memory"
    durable = build_options("memory", Path("/d"), None, durable=True, rpc=None)
    assert (durable.store, durable.data_dir, durable.rpc) == ("durable", Path("/d"), None)


def test_postgres_nodes_get_the_tests_database_even_when_durable() -> None:
    opts = build_options("postgres", Path("/d"), "postgresql://x/t1", durable=True)
    assert (opts.store, opts.dsn) == ("postgres", "postgresql://x/t1")


def test_a_test_cannot_choose_its_own_store() -> None:
    with pytest.raises(TypeError, match="suite_options chooses the store"):
        build_options("memory", Path("/d"), None, store="memory")


def test_by_default_everything_runs_on_memory(tmp_path: Path) -> None:
    out = run_suite(tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout and "STORE=durable DSN=None" in out.stdout, out.stdout


@pytest.mark.skipif(pg_missing_reason() is not None, reason=str(pg_missing_reason()))
@pytest.mark.slow  # starts a PostgreSQL in a pytest process of its own
@pytest.mark.parametrize("how", ["option", "environment"])
def test_under_postgres_local_store_tests_are_skipped_with_their_reason(tmp_path: Path, how: str) -> None:
    out = run_suite(tmp_path, "--store", "postgres") if how == "option" else run_suite(tmp_path, env_store="postgres")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed, 1 skipped" in out.stdout, out.stdout
    assert "SKIPPED [1] test_inner.py:4: local_store, not on postgres: journal internals" in out.stdout, out.stdout
    assert "STORE=postgres DSN=postgresql://" in out.stdout, out.stdout


def test_an_unknown_store_in_the_environment_is_a_usage_error(tmp_path: Path) -> None:
    out = run_suite(tmp_path, env_store="mysql")
    assert out.returncode == pytest.ExitCode.USAGE_ERROR, out.stdout + out.stderr
    assert "$PYLMQ_TEST_STORE must be one of memory, postgres, got 'mysql'" in out.stderr, out.stderr
