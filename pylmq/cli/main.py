"""``python -m pylmq``: run a node in the foreground until SIGTERM, SIGINT or ``lmq_console:stop``.

``python -m pylmq journal check|repair --data-dir DIR`` checks or repairs the durable store's
journal instead (:mod:`pylmq.cli.journal`).

Settings come from ``etc/vm.args`` and ``etc/app.config`` (``--root DIR`` reads DIR/etc/ and runs
in DIR, as a release does; ``--vm-args``/``--app-config`` name files directly), then flags,
which override the files. Without an app.config the node logs to stderr only; with one, logs go
to the lager files it names (``log/console.log``, ``error.log``, ``crash.log``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from pylmq.config import Settings, load_settings
from pylmq.core.store import DEFAULT_FSYNC, FSYNC_POLICIES, STORE_KINDS
from pylmq.erlang import is_long_name
from pylmq.errors import ConfigError, LMQError
from pylmq.log import configure_logging, install_crash_handler
from pylmq.node import parse_hostport

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pylmq",
        description="Run a pylmq node (LMQ in Python).",
        epilog="`pylmq journal check|repair --data-dir DIR` checks or repairs the durable store's journal.",
    )
    p.add_argument("--root", help="release directory: read ROOT/etc/vm.args and ROOT/etc/app.config, run in ROOT")
    p.add_argument("--vm-args", help="vm.args file (-name/-sname, -setcookie, -kernel net_ticktime)")
    p.add_argument("--app-config", help="app.config file (lmq, pylmq, lager, statsderl sections)")
    p.add_argument("--http", help="HTTP API address HOST:PORT (default 0.0.0.0:9980)")
    p.add_argument("--rpc", help="MessagePack-RPC address HOST:PORT (default 0.0.0.0:18800)")
    p.add_argument(
        "--qs",
        help="queue_server protocol address HOST:PORT, TCP and UDP (default: the HTTP host, port 1111); off: none",
    )
    p.add_argument("--sqs", help="Amazon SQS API address HOST:PORT (default: the HTTP host, port 9324); off: none")
    p.add_argument("--store", choices=STORE_KINDS, help="queue store (default durable)")
    p.add_argument("--data-dir", help="durable store directory (default data)")
    p.add_argument("--dsn", help="postgres store: the database, postgresql://USER@HOST:PORT/DB (libpq syntax)")
    p.add_argument("--fsync", choices=FSYNC_POLICIES, help=f"durability policy (default {DEFAULT_FSYNC})")
    p.add_argument("--stats-interval", help="ms between StatsD size/memory gauges; 0 turns them off")
    p.add_argument("--max-connections", help="open connections per API port (default 0: from the fd limit)")
    p.add_argument("--header-timeout", help="ms for an HTTP request's head, from its first byte (default 30000)")
    p.add_argument("--body-timeout", help="ms an HTTP request body may go without a byte (default 30000)")
    p.add_argument(
        "--max-buffered-bytes",
        help="bytes of requests partly received (HTTP bodies, RPC frames) held at most (default 0: from the memory)",
    )
    p.add_argument(
        "--min-receive-rate", help="bytes/s a body or RPC frame must average over each body timeout (default 1024)"
    )
    p.add_argument("--rpc-timeout", help="ms one call to an Erlang peer may take in a cluster (default 5000)")
    p.add_argument(
        "--stall-timeout", help="ms of silence, a probe unanswered, before a peer is stalled (default 3000; 0: off)"
    )
    p.add_argument("--statsd", help="StatsD daemon HOST:PORT (default localhost:8125); off sends nothing")
    p.add_argument("--log-level", help="also write log lines at this lager level and above to stderr")
    p.add_argument("--name", help="join Erlang distribution as this hidden node (alive@host; -sname if no dotted host)")
    p.add_argument("--cookie", help="Erlang distribution cookie (default: vm.args, then ~/.erlang.cookie)")
    p.add_argument("--pid-file", help="write the node's OS pid here once it is up; removed when it stops")
    p.add_argument("--console", action="store_true", help="run an interactive Python console bound to the node")
    return p


def overrides_from_args(args: argparse.Namespace) -> dict[str, Any]:
    o: dict[str, Any] = {
        "store": args.store,
        "data_dir": args.data_dir,
        "pg_dsn": args.dsn,
        "fsync": args.fsync,
        "stats_interval": args.stats_interval,
        "max_connections": args.max_connections,
        "header_timeout": args.header_timeout,
        "body_timeout": args.body_timeout,
        "max_buffered_bytes": args.max_buffered_bytes,
        "min_receive_rate": args.min_receive_rate,
        "rpc_timeout": args.rpc_timeout,
        "stall_timeout": args.stall_timeout,
        "cookie": args.cookie,
    }
    if args.http is not None:
        o["http_host"], o["http_port"] = parse_hostport(args.http)
    if args.rpc is not None:
        o["rpc_host"], o["rpc_port"] = parse_hostport(args.rpc)
    if args.qs == "off":
        o["qs_enabled"] = False
    elif args.qs is not None:
        o["qs_host"], o["qs_port"] = parse_hostport(args.qs)
        o["qs_enabled"] = True
    if args.sqs == "off":
        o["sqs_enabled"] = False
    elif args.sqs is not None:
        o["sqs_host"], o["sqs_port"] = parse_hostport(args.sqs)
        o["sqs_enabled"] = True
    if args.statsd is not None and args.statsd != "off":
        o["statsd_host"], o["statsd_port"] = parse_hostport(args.statsd, "localhost")
    if args.name is not None:
        o["node_name"] = args.name
        o["name_mode"] = "long" if "@" in args.name and is_long_name(args.name) else "short"
    return o


def settings_from_args(args: argparse.Namespace) -> tuple[Settings, bool]:
    """The settings, and whether they came with an app.config (which then says where logs go)."""
    vm_args = Path(args.vm_args).resolve() if args.vm_args else None
    app_config = Path(args.app_config).resolve() if args.app_config else None
    if args.root is not None:
        root = Path(args.root).resolve()
        vm_args = vm_args or root / "etc" / "vm.args"
        app_config = app_config or root / "etc" / "app.config"
        try:
            # Relative paths in the files (log/, data/) are the release's, as in LMQ's scripts.
            os.chdir(root)
        except OSError as e:
            raise ConfigError(f"cannot enter release directory {root}: {e.strerror or e}") from e
    settings = load_settings(vm_args, app_config, overrides_from_args(args))
    return settings, app_config is not None


def setup_logging(settings: Settings, from_files: bool, console_level: str | None) -> None:
    lager = settings.lager
    console_level = console_level.lower() if console_level else None
    if not from_files:
        lager = dataclasses.replace(lager, handlers=(), crash_log=None, console_level=console_level or "info")
    elif console_level is not None:
        lager = dataclasses.replace(lager, console_level=console_level)
    configure_logging(dataclasses.replace(settings, lager=lager))


def _tune_gc() -> None:
    """What is alive once the node has started (modules, settings, recovered queues) lives as
    long as the process: frozen, the cyclic collector stops rescanning it. A larger first
    generation makes the collector run less often over the short-lived objects of requests
    (each of which refcounting frees anyway)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 20)


async def run(settings: Settings, pid_file: Path | None = None, console: bool = False, statsd: bool = True) -> None:
    from pylmq.node.service import Service

    install_crash_handler()
    service = Service(settings, pid_file=pid_file, statsd=statsd)
    await service.start()
    _tune_gc()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, service.stopped.set)
    node = service.node
    print(
        f"pylmq ready node={service.node_name} http={node.http_address} rpc={node.rpc_address}"
        f" qs={node.qs_address} sqs={node.sqs_address} store={node.store.kind}",
        flush=True,
    )
    if console:
        from pylmq.cli.repl import start_console

        start_console(service, loop)
    await service.stopped.wait()
    await service.stop()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["journal"]:
        from pylmq.cli.journal import main as journal_main

        return journal_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        settings, from_files = settings_from_args(args)
        setup_logging(settings, from_files, args.log_level)
    except LMQError as e:
        print(f"pylmq: {e.detail}", file=sys.stderr)
        return 2
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    pid_file = Path(args.pid_file).resolve() if args.pid_file else None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(run(settings, pid_file, args.console, args.statsd != "off"))
    except LMQError as e:
        logging.getLogger("pylmq").error("pylmq could not start: %s", e.detail)
        print(f"pylmq: {e.detail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
