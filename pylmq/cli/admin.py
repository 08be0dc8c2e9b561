"""``lmq-admin``: status, stats, join, leave and standalone of a release's running node.

``python -m pylmq.cli.admin --root REL COMMAND``; the release's ``bin/lmq-admin`` passes
``--root``. Each command pings the node first (``Node is not running!``, exit 1, when it does
not answer), then calls ``lmq_console:<command>`` on it over Erlang distribution and prints
the answer in the layout of LMQ's ``lmq-admin`` (:mod:`pylmq.node.console`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from pylmq.cli.maint import Maint, read_target
from pylmq.erlang.terms import Atom, Term, to_text
from pylmq.errors import LMQError
from pylmq.node import console

__all__ = ["main"]


def _error_text(result: Term) -> str:
    """``{error, {not_supported, Text}}`` / ``{error, Reason}`` as one readable line."""
    if isinstance(result, tuple) and len(result) == 2 and result[0] is Atom("error"):
        reason = result[1]
        if isinstance(reason, tuple) and len(reason) == 2 and isinstance(reason[1], bytes):
            return f"{to_text(reason[0])}: {reason[1].decode('utf-8', 'replace')}"
        return to_text(reason) if isinstance(reason, Atom | bytes) else repr(reason)
    return repr(result)


async def run(root: Path, command: str, node_arg: str | None) -> int:
    async with Maint(read_target(root / "etc" / "vm.args")) as m:
        if not await m.ping():
            print("Node is not running!")
            return 1
        if command == "status":
            sys.stdout.write(console.format_status(await m.rpc(console.MODULE, "status", [])))
            return 0
        if command == "stats":
            sys.stdout.write(console.format_stats(await m.rpc(console.MODULE, "stats", [])))
            return 0
        args: list[Term] = [Atom(node_arg)] if command == "join" and node_arg else []
        result = await m.rpc(console.MODULE, command, args)
        if result is Atom("ok"):
            print("ok")
            return 0
        print(f"{command} failed: {_error_text(result)}", file=sys.stderr)
        return 1


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lmq-admin", description="Administer the pylmq node of a release.")
    p.add_argument("--root", required=True, help="the release directory (bin/lmq-admin passes its own)")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("status", help="all nodes, active nodes, and per queue: messages, bytes, props")
    sub.add_parser("stats", help="per queue: push/pull rates over 1, 5, 15 min and a day; retention")
    join = sub.add_parser("join", help="join the cluster of NODE")
    join.add_argument("node", help="a node of the cluster, e.g. lmq@10.0.0.2")
    sub.add_parser("leave", help="leave the cluster")
    sub.add_parser(
        "standalone",
        help="serve alone a node that cannot reach its cluster after a restart (until join NODE)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.getLogger().addHandler(logging.NullHandler())
    try:
        return asyncio.run(run(Path(args.root).resolve(), args.command, getattr(args, "node", None)))
    except LMQError as e:
        print(f"lmq-admin: {e.detail}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
