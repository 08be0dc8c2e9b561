"""``python -m pylmq``: files give the settings, flags override them (no node is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pylmq.cli.main import build_parser, settings_from_args
from pylmq.errors import ConfigError


def _files(tmp_path: Path) -> tuple[str, str]:
    vm_args = tmp_path / "vm.args"
    vm_args.write_text("-name lmq@127.0.0.1\n-setcookie filecookie\n")
    app_config = tmp_path / "app.config"
    app_config.write_text('[{lmq, [{port, 18801}, {http, {"127.0.0.1", 9981}}, {stats_interval, 0}]}].\n')
    return str(vm_args), str(app_config)


def test_files_give_the_settings(tmp_path: Path) -> None:
    vm_args, app_config = _files(tmp_path)
    s, from_files = settings_from_args(build_parser().parse_args(["--vm-args", vm_args, "--app-config", app_config]))
    assert from_files
    assert (s.node_name, s.cookie, s.http_host, s.http_port, s.rpc_port, s.stats_interval) == (
        "lmq@127.0.0.1", "filecookie", "127.0.0.1", 9981, 18801, 0
    )  # fmt: skip


def test_flags_override_the_files(tmp_path: Path) -> None:
    vm_args, app_config = _files(tmp_path)
    argv = ["--vm-args", vm_args, "--app-config", app_config, "--http", "0.0.0.0:7000", "--rpc", ":7001",
            "--cookie", "flagcookie", "--name", "other@127.0.0.1", "--stats-interval", "250",
            "--statsd", "127.0.0.1:9125"]  # fmt: skip
    s, _ = settings_from_args(build_parser().parse_args(argv))
    assert (s.http_host, s.http_port, s.rpc_port, s.cookie, s.node_name) == (
        "0.0.0.0", 7000, 7001, "flagcookie", "other@127.0.0.1"
    )  # fmt: skip
    assert (s.stats_interval, s.statsd_host, s.statsd_port) == (250, "127.0.0.1", 9125)


def test_without_files_there_is_no_distribution_and_logs_stay_on_stderr(tmp_path: Path) -> None:
    s, from_files = settings_from_args(build_parser().parse_args(["--http", "127.0.0.1:0"]))
    assert (s.node_name, from_files) == (None, False)


def test_a_bad_flag_value_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="port"):
        settings_from_args(build_parser().parse_args(["--http", "127.0.0.1:notaport"]))


def test_connection_limit_and_timeout_flags(tmp_path: Path) -> None:
    argv = ["--max-connections", "64", "--header-timeout", "5000", "--body-timeout", "7000"]
    s, _ = settings_from_args(build_parser().parse_args(argv))
    assert (s.max_connections, s.header_timeout, s.body_timeout) == (64, 5000, 7000)


def test_request_buffer_flags(tmp_path: Path) -> None:
    argv = ["--max-buffered-bytes", "16777216", "--min-receive-rate", "2048"]
    s, _ = settings_from_args(build_parser().parse_args(argv))
    assert (s.max_buffered_bytes, s.min_receive_rate) == (16 << 20, 2048)
