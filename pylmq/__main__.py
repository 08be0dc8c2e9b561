"""``python -m pylmq``: run a node in the foreground until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from pylmq.dist import start_node
from pylmq.errors import ConfigError, LMQError
from pylmq.node import FSYNC_POLICIES, STORE_KINDS, LMQNode, NodeOptions, parse_hostport

__all__ = ["main"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pylmq", description="Run a pylmq node (LMQ in Python).")
    p.add_argument("--http", default="0.0.0.0:9980", help="HTTP API address HOST:PORT (default %(default)s)")
    p.add_argument("--rpc", default="0.0.0.0:18800", help="MessagePack-RPC address HOST:PORT (default %(default)s)")
    p.add_argument("--store", choices=STORE_KINDS, default="durable", help="queue store (default %(default)s)")
    p.add_argument("--data-dir", default="data", help="durable store directory (default %(default)s)")
    p.add_argument("--fsync", choices=FSYNC_POLICIES, default="always", help="durability policy (default %(default)s)")
    p.add_argument("--log-level", default="info", help="console log level (default %(default)s)")
    p.add_argument("--name", help="join Erlang distribution as this hidden node (alive@host; -sname if no dotted host)")
    p.add_argument("--cookie", help="Erlang distribution cookie (with --name)")
    return p


def options_from_args(args: argparse.Namespace) -> NodeOptions:
    return NodeOptions(
        http=parse_hostport(args.http),
        rpc=parse_hostport(args.rpc),
        store=args.store,
        data_dir=Path(args.data_dir),
        fsync=args.fsync,
    )


async def run(opts: NodeOptions, dist_name: str | None = None, dist_cookie: str | None = None) -> None:
    node = LMQNode(opts)
    await node.start()
    dist = await start_node(dist_name, dist_cookie or "") if dist_name else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"pylmq ready http={node.http_address} rpc={node.rpc_address} store={node.store.kind}", flush=True)
    await stop.wait()
    if dist is not None:
        await dist.stop()
    await node.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s [%(levelname)s] %(message)s")
    try:
        opts = options_from_args(args)
        if args.name and not args.cookie:
            raise ConfigError("--name needs --cookie")
    except LMQError as e:
        print(f"pylmq: {e.detail}", file=sys.stderr)
        return 2
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(run(opts, args.name, args.cookie))
    except LMQError as e:
        print(f"pylmq: {e.detail}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
