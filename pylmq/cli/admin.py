"""``lmq-admin``: status, stats, join, leave and standalone of a release's running node, and
pylmq's peek, dead, requeue and virtual.

``python -m pylmq.cli.admin --root REL COMMAND``; the release's ``bin/lmq-admin`` passes
``--root``. Each command pings the node first (``Node is not running!``, exit 1, when it does
not answer), then calls ``lmq_console:<command>`` on it over Erlang distribution and prints
the answer in the layout of LMQ's ``lmq-admin`` (:mod:`pylmq.node.console`). A refusal
(``{error, {Reason, Detail}}``) is printed on stderr as ``COMMAND failed: Reason: Detail``
with exit status 1.

pylmq's commands (docs/lmq-admin.md)::

    peek Q [--after ID] [-n N] [--body]   list Q's records without delivering them (N <= 1000)
    dead Q [--after ID] [-n N]            the dead letters in Q: origin, failures, reason
    requeue DLQ [-n N] [--to Q]           move up to N dead letters back to their origin (or Q)
    virtual [list]                        the virtual queues and the queues each binds
    virtual set V A [B ...]               bind virtual queue V to queues A, B, ...
    virtual delete V                      remove virtual queue V
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from pylmq.api.peek import DEFAULT_PEEK, MAX_PEEK
from pylmq.cli.maint import Maint, read_target
from pylmq.core.manager import MAX_BATCH
from pylmq.erlang.terms import Atom, Term, to_text
from pylmq.errors import LMQError
from pylmq.node import console
from pylmq.wire.numbers import whole_number

__all__ = ["main"]


def _error_text(result: Term) -> str:
    """``{error, {not_supported, Text}}`` / ``{error, Reason}`` as one readable line."""
    if isinstance(result, tuple) and len(result) == 2 and result[0] is Atom("error"):
        reason = result[1]
        if isinstance(reason, tuple) and len(reason) == 2 and isinstance(reason[1], bytes):
            return f"{to_text(reason[0])}: {reason[1].decode('utf-8', 'replace')}"
        return to_text(reason) if isinstance(reason, Atom | bytes) else repr(reason)
    return repr(result)


def _is_error(result: Term) -> bool:
    return isinstance(result, tuple) and len(result) == 2 and result[0] is Atom("error")


def _failed(command: str, result: Term) -> int:
    print(f"{command} failed: {_error_text(result)}", file=sys.stderr)
    return 1


def _opt(text: str | None) -> Term:
    return Atom("undefined") if text is None else text.encode("utf-8")


async def _extension(m: Maint, args: argparse.Namespace) -> int:
    """peek, dead, requeue and virtual: one lmq_console call each, the answer printed."""
    command = args.command
    if command in ("peek", "dead"):
        body = bool(getattr(args, "body", False))
        result = await m.rpc(console.MODULE, "peek", [args.queue.encode(), _opt(args.after), args.n, body])
        if _is_error(result):
            return _failed(command, result)
        sys.stdout.write(console.format_peek(result, args.queue, args.n, dead=command == "dead"))
        return 0
    if command == "requeue":
        result = await m.rpc(console.MODULE, "requeue", [args.queue.encode(), args.n, _opt(args.to)])
        if _is_error(result):
            return _failed(command, result)
        count = result[1] if isinstance(result, tuple) and len(result) == 2 else result
        print(f"requeued {count} message{'' if count == 1 else 's'}")
        return 0
    action = args.action or "list"
    if action == "list":
        sys.stdout.write(console.format_virtual(await m.rpc(console.MODULE, "virtual_queues", [])))
        return 0
    if action == "set":
        call = ("virtual_set", [args.name.encode(), [q.encode() for q in args.queues]])
    else:
        call = ("virtual_delete", [args.name.encode()])
    result = await m.rpc(console.MODULE, call[0], call[1])
    if result is Atom("ok"):
        print("ok")
        return 0
    return _failed(f"virtual {action}", result)


EXTENSIONS = ("peek", "dead", "requeue", "virtual")


async def run(root: Path, command: str, node_arg: str | None, parsed: argparse.Namespace | None = None) -> int:
    async with Maint(read_target(root / "etc" / "vm.args")) as m:
        if not await m.ping():
            print("Node is not running!")
            return 1
        if command in EXTENSIONS and parsed is not None:
            return await _extension(m, parsed)
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
        return _failed(command, result)


def _count(top: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        n = whole_number(text, 9) or 0
        if not 1 <= n <= top:
            raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {top}, got {text!r}")
        return n

    return parse


def _add_extensions(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    peek = sub.add_parser("peek", help="list a queue's messages without delivering them (pylmq)")
    dead = sub.add_parser("dead", help="list the dead letters in a queue: origin, failures, reason (pylmq)")
    for p in (peek, dead):
        p.add_argument("queue")
        p.add_argument("--after", metavar="ID", help="start after this message id (the last one of a page)")
        p.add_argument("-n", type=_count(MAX_PEEK), default=DEFAULT_PEEK, help=f"messages to list (1-{MAX_PEEK})")
    peek.add_argument("--body", action="store_true", help="show the bodies (text, or base64)")
    requeue = sub.add_parser("requeue", help="move dead letters back to their origin queue (pylmq)")
    requeue.add_argument("queue", metavar="DLQ")
    requeue.add_argument("-n", type=_count(MAX_BATCH), default=DEFAULT_PEEK, help=f"messages (1-{MAX_BATCH})")
    requeue.add_argument("--to", metavar="QUEUE", help="move them to this queue instead of their origin")
    virtual = sub.add_parser("virtual", help="list, set or delete virtual queues (pylmq)")
    actions = virtual.add_subparsers(dest="action")
    actions.add_parser("list", help="the virtual queues and their queues")
    vset = actions.add_parser("set", help="bind a virtual queue to queues")
    vset.add_argument("name", metavar="V")
    vset.add_argument("queues", metavar="QUEUE", nargs="+")
    vdel = actions.add_parser("delete", help="remove a virtual queue")
    vdel.add_argument("name", metavar="V")


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
    _add_extensions(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.getLogger().addHandler(logging.NullHandler())
    try:
        return asyncio.run(run(Path(args.root).resolve(), args.command, getattr(args, "node", None), args))
    except LMQError as e:
        print(f"lmq-admin: {e.detail}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
