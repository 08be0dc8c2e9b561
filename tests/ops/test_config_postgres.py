"""The postgres store's settings: app.config, the command line, and what a node refuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from pylmq.config import load_settings
from pylmq.core.clock import ManualClock
from pylmq.errors import ConfigError
from pylmq.node.lmq_node import NodeOptions, make_store
from pylmq.node.service import Service
from tests.config_helpers import options_from

DSN = "postgresql://lmq@db1.example:5432,db2.example:5432/lmq?target_session_attrs=read-write"


def test_app_config_sets_the_store_and_its_database(tmp_path: Path) -> None:
    opts = options_from(
        tmp_path, f'{{store, postgres}}, {{pg_dsn, "{DSN}"}}, {{pg_pool_size, 4}}, {{pg_timeout, 2500}}'
    )
    assert (opts.store, opts.dsn, opts.pg_pool_size, opts.pg_timeout) == ("postgres", DSN, 4, 2.5)


def test_command_line_dsn_overrides_app_config(tmp_path: Path) -> None:
    opts = options_from(tmp_path, '{pg_dsn, "postgresql://old/x"}', ("--store", "postgres", "--dsn", DSN))
    assert (opts.store, opts.dsn) == ("postgres", DSN)


def test_defaults_without_settings(tmp_path: Path) -> None:
    opts = options_from(tmp_path)
    assert (opts.dsn, opts.pg_pool_size, opts.pg_timeout) == (None, 10, 5.0)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("{pg_pool_size, 0}", "pg_pool_size must be at least 1"),
        ("{pg_timeout, 0}", "pg_timeout must be at least 1"),
        ("{pg_dsn, 5432}", "pg_dsn must be text"),
    ],
)
def test_bad_settings_are_named(tmp_path: Path, section: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        options_from(tmp_path, section)


def test_postgres_store_needs_a_database() -> None:
    with pytest.raises(ConfigError, match="store postgres needs a database"):
        make_store(NodeOptions(store="postgres"), ManualClock())


def test_a_postgres_node_cannot_join_an_erlang_cluster(tmp_path: Path) -> None:
    app = tmp_path / "app.config"
    app.write_text(f"[{{lmq, [{{join, 'lmq@host'}}]}}, {{pylmq, [{{store, postgres}}, {{pg_dsn, \"{DSN}\"}}]}}].\n")
    settings = load_settings(None, app, {"cookie_file": tmp_path / "none"})
    with pytest.raises(ConfigError, match="cannot join an Erlang cluster"):
        Service(settings, statsd=False)
