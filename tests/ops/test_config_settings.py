"""Settings: files mapped into one typed object, and who overrides whom."""

from __future__ import annotations

import inspect
import os
from dataclasses import replace
from pathlib import Path

import pytest

from pylmq.config import LagerConfig, LogHandler, Settings, load_settings
from pylmq.core.clock import SystemClock
from pylmq.core.store import (
    DEFAULT_DATA_DIR,
    DEFAULT_DISK_RESERVE_BYTES,
    DEFAULT_FSYNC,
    DEFAULT_FSYNC_INTERVAL,
    DEFAULT_JOURNAL_MAX_BYTES,
    DEFAULT_STORE,
    FSYNC_POLICIES,
    STORE_KINDS,
)
from pylmq.errors import ConfigError, ConfigSyntaxError
from pylmq.node import NodeOptions, make_store
from pylmq.node.service import node_options
from pylmq.store.durable import DurableStore
from pylmq.wire.ports import DEFAULT_HTTP_PORT, DEFAULT_QS_PORT, DEFAULT_RPC_PORT, DEFAULT_SQS_PORT

REPO = Path(__file__).resolve().parents[2]


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_without_files(no_cookie_file: Path) -> None:
    s = load_settings(None, None, {"cookie_file": no_cookie_file})
    assert (s.http_host, s.http_port, s.rpc_host, s.rpc_port) == ("0.0.0.0", 9980, "0.0.0.0", 18800)
    assert (s.stats_interval, s.statsd_host, s.statsd_port) == (20000, "localhost", 8125)
    assert (s.store, s.data_dir, s.fsync) == ("durable", Path("data"), DEFAULT_FSYNC)
    assert s.node_name is None and s.cookie is None
    assert s.lager == LagerConfig()


def test_lmq_shipped_files(lmq_files: tuple[Path, Path], no_cookie_file: Path) -> None:
    vm_args, app_config = lmq_files
    s = load_settings(vm_args, app_config, {"cookie_file": no_cookie_file})
    assert (s.node_name, s.name_mode, s.cookie) == ("lmq@127.0.0.1", "long", "lmq")
    assert (s.rpc_port, s.stats_interval, s.statsd_host, s.statsd_port) == (18800, 20000, "localhost", 8125)
    assert s.lager.handlers == (
        LogHandler("./log/error.log", "error", size=0, date="$D0", count=14),
        LogHandler("./log/console.log", "info", size=0, date="$D0", count=14),
    )
    assert (s.lager.crash_log, s.lager.crash_log_count, s.lager.crash_log_date) == ("./log/crash.log", 14, "$D0")
    assert any("influxdb" in n for n in s.notices), f"InfluxDB is not supported: expected a notice, got {s.notices}"


def test_repo_etc_defaults(no_cookie_file: Path) -> None:
    s = load_settings(REPO / "etc" / "vm.args", REPO / "etc" / "app.config", {"cookie_file": no_cookie_file})
    assert s == Settings(node_name="lmq@127.0.0.1", cookie="lmq", lager=s.lager)
    assert s.lager == LagerConfig()


def test_http_listener_and_join(tmp_path: Path, no_cookie_file: Path) -> None:
    app = write(tmp_path / "app.config", "[{lmq, [{http, {{127,0,0,1}, 8080}}, {join, 'lmq@10.0.0.2'}]}].\n")
    s = load_settings(None, app, {"cookie_file": no_cookie_file})
    assert (s.http_host, s.http_port, s.join) == ("127.0.0.1", 8080, "lmq@10.0.0.2")


def test_pylmq_section(tmp_path: Path) -> None:
    app = write(tmp_path / "app.config", '[{pylmq, [{store, memory}, {data_dir, "/var/lmq"}, {fsync, none}]}].')
    s = load_settings(None, app, {})
    assert (s.store, s.data_dir, s.fsync) == ("memory", Path("/var/lmq"), "none")


def test_durable_store_limits_in_the_pylmq_section(tmp_path: Path) -> None:
    text = "[{pylmq, [{journal_max_bytes, 268435456}, {disk_reserve_bytes, 0}]}]."
    s = load_settings(None, write(tmp_path / "app.config", text), {})
    assert (s.journal_max_bytes, s.disk_reserve_bytes) == (256 << 20, 0)
    opts = node_options(s)  # what the node's durable store is built with
    assert (opts.journal_max_bytes, opts.disk_reserve_bytes) == (256 << 20, 0)
    assert (Settings().journal_max_bytes, Settings().disk_reserve_bytes) == (1 << 30, 64 << 20)
    with pytest.raises(ConfigError, match="disk_reserve_bytes must be at least 0"):
        load_settings(None, write(tmp_path / "bad.config", "[{pylmq, [{disk_reserve_bytes, -1}]}]."), {})


def test_stats_interval_zero_or_negative_disables_gauges(tmp_path: Path) -> None:
    app = write(tmp_path / "app.config", "[{lmq, [{stats_interval, -1}]}].")
    assert load_settings(None, app, {}).stats_interval == 0


def test_flags_override_files(lmq_files: tuple[Path, Path], no_cookie_file: Path) -> None:
    vm_args, app_config = lmq_files
    s = load_settings(
        vm_args,
        app_config,
        {"cookie_file": no_cookie_file, "rpc_port": "18801", "http_port": 9981, "cookie": "flag",
         "node_name": "py@127.0.0.1", "store": "memory", "stats_interval": None},
    )  # fmt: skip
    assert (s.rpc_port, s.http_port, s.cookie, s.node_name, s.store) == (18801, 9981, "flag", "py@127.0.0.1", "memory")
    assert s.stats_interval == 20000, "a None override means the flag was not given"


def test_vm_args_app_settings_override_app_config(tmp_path: Path) -> None:
    app = write(tmp_path / "app.config", "[{lmq, [{port, 18800}]}].")
    vm = write(tmp_path / "vm.args", "-lmq port 18802\n-kernel net_ticktime 20\n")
    s = load_settings(vm, app, {})
    assert (s.rpc_port, s.net_ticktime) == (18802, 20)


def test_cookie_from_erlang_cookie_file_when_vm_args_has_none(tmp_path: Path) -> None:
    cookie = write(tmp_path / ".erlang.cookie", "SECRETCOOKIE\n")
    os.chmod(cookie, 0o400)
    vm = write(tmp_path / "vm.args", "-name py@127.0.0.1\n")
    assert load_settings(vm, None, {"cookie_file": cookie}).cookie == "SECRETCOOKIE"
    vm_with = write(tmp_path / "vm2.args", "-name py@127.0.0.1\n-setcookie fromargs\n")
    assert load_settings(vm_with, None, {"cookie_file": cookie}).cookie == "fromargs"


def test_cookie_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    cookie = write(tmp_path / ".erlang.cookie", "SECRETCOOKIE")
    os.chmod(cookie, 0o644)
    vm = write(tmp_path / "vm.args", "-name py@127.0.0.1\n")
    with pytest.raises(ConfigError, match="accessible by owner only"):
        load_settings(vm, None, {"cookie_file": cookie})


def test_short_name_gets_host_and_refuses_dotted_host(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path / "a.args", "-sname lmq\n-setcookie c\n"), None, {})
    assert s.node_name is not None and s.node_name.startswith("lmq@") and s.name_mode == "short"
    with pytest.raises(ConfigError, match=r"short node name 'lmq@a\.b' cannot have a dotted host"):
        load_settings(write(tmp_path / "b.args", "-sname lmq@a.b\n-setcookie c\n"), None, {})


def test_malformed_app_config_reports_file_line_column(tmp_path: Path) -> None:
    app = write(tmp_path / "app.config", "[\n  {lmq, [\n    {port, 18800}\n    {stats_interval, 5000}\n  ]}\n].\n")
    with pytest.raises(ConfigSyntaxError) as info:
        load_settings(None, app, {})
    assert str(info.value) == f"{app}:4:5: expected ',', '|' or ']' in a list, found '{{'"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[{lmq, [{http, 9980}]}].", r"lmq.http: expected \{Ip, Port\}, got 9980"),
        ("[{lmq, [{port, \"18800\"}]}].", r"lmq.port: rpc_port must be an integer, got '18800'"),
        ("[{lmq, [{port, 70000}]}].", r"lmq.port: rpc_port must be a port number 0..65535, got 70000"),
        ("[{pylmq, [{store, disk}]}].", r"pylmq.store: store must be one of memory, durable, postgres, got Atom"),
        ("[{pylmq, [{stor, memory}]}].", r"pylmq.stor: unknown pylmq setting"),
        ("[{lager, [{handlers, [{lager_file_backend, [{file, \"x.log\"}, {level, loud}]}]}]}].",
         r"level: unknown lager level 'loud'"),
        ("[{lager, [{handlers, [{lager_file_backend, [{file, \"x.log\"}, {date, \"$X1\"}]}]}]}].",
         r"date: invalid rotation date spec '\$X1'"),
        ("{lmq, []}.", r"expected one term, a list of"),
    ],
)  # fmt: skip
def test_bad_values_get_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    app = write(tmp_path / "app.config", text)
    with pytest.raises(ConfigError, match=message):
        load_settings(None, app, {})


def test_a_bad_fsync_policy_is_a_config_error_wherever_it_is_given(tmp_path: Path) -> None:
    # app.config, NodeOptions and the durable store itself refuse it with the same error type.
    app = write(tmp_path / "app.config", "[{pylmq, [{fsync, sometimes}]}].")
    with pytest.raises(ConfigError, match="fsync must be one of always, interval, none"):
        load_settings(None, app, {})
    with pytest.raises(ConfigError, match="fsync must be one of always, interval, none, got 'sometimes'"):
        make_store(NodeOptions(store="durable", data_dir=tmp_path / "a", fsync="sometimes"), SystemClock())
    with pytest.raises(ConfigError, match="fsync must be one of always, interval, none, got 'sometimes'"):
        DurableStore(tmp_path / "b", fsync="sometimes")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_one_set_of_defaults_for_settings_node_options_command_line_and_clients(no_cookie_file: Path) -> None:
    from pylmq.cli.main import build_parser
    from pylmq.client._urls import DEFAULT_HTTP_URL
    from pylmq.client._urls import DEFAULT_RPC_PORT as CLIENT_RPC_PORT

    s = load_settings(None, None, {"cookie_file": no_cookie_file})
    opts = NodeOptions()
    assert node_options(s).http == opts.http == ("0.0.0.0", DEFAULT_HTTP_PORT)
    assert node_options(s).rpc == opts.rpc == ("0.0.0.0", DEFAULT_RPC_PORT)
    assert (s.store, s.fsync) == (opts.store, opts.fsync) == (DEFAULT_STORE, DEFAULT_FSYNC)
    assert DEFAULT_HTTP_URL.endswith(f":{DEFAULT_HTTP_PORT}") and CLIENT_RPC_PORT == DEFAULT_RPC_PORT
    choices = {a.dest: a.choices for a in build_parser()._actions}
    stores, fsyncs = choices["store"], choices["fsync"]
    assert stores is not None and fsyncs is not None
    assert (tuple(stores), tuple(fsyncs)) == (STORE_KINDS, FSYNC_POLICIES)
    # Every option a default configuration gives the node is NodeOptions' own default (units
    # converted: app.config counts milliseconds), and the durable store's keyword defaults
    # are the same values, so a default changed in one place only shows up here. The one
    # exception: queue_server's protocol, on for an operator's node but off for a node built
    # in code, so that test nodes side by side never fight over its fixed port.
    assert node_options(s).qs == ("127.0.0.1", DEFAULT_QS_PORT) and opts.qs is None
    assert node_options(s).sqs == ("0.0.0.0", DEFAULT_SQS_PORT) and opts.sqs is None
    assert replace(node_options(s), qs=None, sqs=None) == opts
    store_defaults = {
        name: p.default
        for name, p in inspect.signature(DurableStore).parameters.items()
        if p.default is not inspect.Parameter.empty
    }
    shared = ("fsync", "fsync_interval", "journal_max_bytes", "disk_reserve_bytes")
    assert {n: store_defaults[n] for n in shared} == {n: getattr(opts, n) for n in shared}
    assert (s.data_dir, opts.data_dir) == (Path(DEFAULT_DATA_DIR), Path(DEFAULT_DATA_DIR))
    assert (opts.fsync_interval, opts.journal_max_bytes, opts.disk_reserve_bytes) == (
        DEFAULT_FSYNC_INTERVAL,
        DEFAULT_JOURNAL_MAX_BYTES,
        DEFAULT_DISK_RESERVE_BYTES,
    )


def test_unknown_override_is_an_error() -> None:
    with pytest.raises(ConfigError, match="unknown settings: htp_port"):
        load_settings(None, None, {"htp_port": 1})


def test_lager_handler_forms(tmp_path: Path) -> None:
    app = write(
        tmp_path / "app.config",
        """[{lager, [{handlers, [
              {lager_console_backend, notice},
              {lager_file_backend, [{file, "a.log"}, {level, debug}, {size, 1048576}, {count, 3}]},
              {lager_file_backend, [{"b.log", warning, 0, "$W0D23", 2}]}
           ]}, {crash_log, undefined}]}].""",
    )
    lager = load_settings(None, app, {}).lager
    assert lager.console_level == "notice"
    assert lager.handlers == (
        LogHandler("a.log", "debug", size=1048576, date="$D0", count=3),
        LogHandler("b.log", "warning", size=0, date="$W0D23", count=2),
    )
    assert lager.crash_log is None


def test_connection_limit_and_http_timeouts(tmp_path: Path) -> None:
    assert (Settings().max_connections, Settings().header_timeout, Settings().body_timeout) == (0, 30000, 30000)
    app = write(tmp_path / "app.config", "[{pylmq, [{max_connections, 500}, {header_timeout, 10000}]}].")
    s = load_settings(None, app, {"body_timeout": "2500"})
    assert (s.max_connections, s.header_timeout, s.body_timeout) == (500, 10000, 2500)


def test_request_buffer_budget_and_receive_rate(tmp_path: Path) -> None:
    assert (Settings().max_buffered_bytes, Settings().min_receive_rate) == (0, 1024)
    app = write(tmp_path / "app.config", "[{pylmq, [{max_buffered_bytes, 33554432}, {min_receive_rate, 0}]}].")
    s = load_settings(None, app, {})
    assert (s.max_buffered_bytes, s.min_receive_rate) == (32 << 20, 0)
    s = load_settings(None, app, {"max_buffered_bytes": "1048576", "min_receive_rate": "512"})
    assert (s.max_buffered_bytes, s.min_receive_rate) == (1 << 20, 512)
    opts = node_options(s)
    assert (opts.max_buffered_bytes, opts.min_receive_rate) == (1 << 20, 512)
    assert node_options(Settings()).max_buffered_bytes is None  # 0: from the memory


def test_cluster_call_bounds(tmp_path: Path) -> None:
    assert (Settings().rpc_timeout, Settings().stall_timeout) == (5000, 3000)
    app = write(tmp_path / "app.config", "[{pylmq, [{rpc_timeout, 2000}, {stall_timeout, 0}]}].")
    assert (load_settings(None, app, {}).rpc_timeout, load_settings(None, app, {}).stall_timeout) == (2000, 0)
    s = load_settings(None, app, {"rpc_timeout": "1500", "stall_timeout": "800"})  # the command-line flags
    assert (s.rpc_timeout, s.stall_timeout) == (1500, 800)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[{pylmq, [{max_connections, -1}]}].", r"max_connections must be at least 0, got -1"),
        ("[{pylmq, [{header_timeout, 0}]}].", r"header_timeout must be at least 1, got 0"),
        ("[{pylmq, [{body_timeout, 1.5}]}].", r"body_timeout must be an integer, got 1.5"),
        ("[{pylmq, [{rpc_timeout, 0}]}].", r"rpc_timeout must be at least 1, got 0"),
        ("[{pylmq, [{stall_timeout, -5}]}].", r"stall_timeout must be at least 0, got -5"),
        ("[{pylmq, [{max_buffered_bytes, -1}]}].", r"max_buffered_bytes must be at least 0, got -1"),
        ("[{pylmq, [{min_receive_rate, fast}]}].", r"min_receive_rate must be an integer, got "),
    ],
)
def test_bad_limits_get_a_clear_error(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(None, write(tmp_path / "app.config", text), {})
