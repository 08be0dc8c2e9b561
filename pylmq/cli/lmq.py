"""``bin/lmq``: start, stop, restart, ping, foreground, console and pid of a release's node.

``python -m pylmq.cli.lmq --root REL COMMAND``; the release's ``bin/lmq`` passes ``--root``.
Like LMQ's script, every command but ``foreground``/``console`` reaches the node over Erlang
distribution (:mod:`pylmq.cli.maint`), with the name and cookie of ``REL/etc/vm.args``.

* ``start`` runs the node detached (its own session; stdout/stderr appended to
  ``log/run.log``), then waits until it answers a ping and prints where it serves
  (``lmq started: node N, HTTP HOST:PORT, RPC HOST:PORT, queue_server HOST:PORT``, the last
  unless the protocol is off). If the node exits first, its reason
  (e.g. ``cannot listen for HTTP on 0.0.0.0:9980: Address already in use``) is printed and the
  exit status is 1. A node that already answers is left alone: ``Node is already running!``.
* ``stop`` asks the node to stop (``lmq_console:stop``), waits for its process to exit and
  falls back to SIGTERM when it does not within ``--timeout`` seconds.
* ``restart`` is ``stop`` then ``start`` (a new OS process, unlike Erlang's ``init:restart``).
* ``ping`` prints ``pong`` (exit 0) or ``pang`` and the reason (exit 1).
* ``foreground`` and ``console`` replace this process with the node (``console`` adds an
  interactive Python console, see :mod:`pylmq.cli.repl`).
* ``pid`` prints the node's OS pid, as the node itself reports it.
* ``check-journal`` and ``repair-journal`` are ``pylmq journal check|repair`` on the data
  directory of ``REL/etc/app.config`` (:mod:`pylmq.cli.journal`; repair wants the node stopped).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pylmq.cli.maint import Maint, Target, ensure_epmd, read_target
from pylmq.config import load_settings
from pylmq.erlang.terms import Atom, to_text
from pylmq.errors import DistError, LMQError

__all__ = ["main", "pid_alive"]

PID_FILE = "lmq.pid"
RUN_LOG = "log/run.log"
COMMANDS = ("start", "stop", "restart", "ping", "foreground", "console", "pid", "check-journal", "repair-journal")


class Failed(Exception):
    """A command failed; the message is printed on stderr and the exit status is 1."""


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie does not: nobody may have reaped it yet)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no /proc: trust kill(0)
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


class Release:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.vm_args = root / "etc" / "vm.args"
        self.pid_file = root / PID_FILE
        self.run_log = root / RUN_LOG
        self._target: Target | None = None

    @property
    def target(self) -> Target:
        if self._target is None:
            self._target = read_target(self.vm_args)
        return self._target

    def node_command(self, *extra: str) -> list[str]:
        return [sys.executable, "-m", "pylmq", "--root", str(self.root), "--pid-file", str(self.pid_file), *extra]


async def _ping(rel: Release) -> tuple[bool, str]:
    async with Maint(rel.target) as m:
        ok = await m.ping()
        return ok, m.last_error


async def cmd_ping(rel: Release, _args: argparse.Namespace) -> int:
    ok, why = await _ping(rel)
    if ok:
        print("pong")
        return 0
    print("pang")
    print(f"Node {rel.target.name} not responding to pings: {why}", file=sys.stderr)
    return 1


def _refuse_if_running(rel: Release, running: bool) -> None:
    if running:
        raise Failed("Node is already running!")
    pid = _read_pid(rel.pid_file)
    # A stale file naming this very process (pid reuse after a reboot) is no running node.
    if pid is not None and pid != os.getpid() and pid_alive(pid):
        raise Failed(f"Node is already running (pid {pid} in {rel.pid_file}) but does not answer pings")


def _new_output(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _reason(output: str) -> str:
    """The node's own explanation: its ``pylmq: ...`` line, else the last line it wrote."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for line in reversed(lines):
        if line.startswith("pylmq: "):
            return line.removeprefix("pylmq: ")
    return lines[-1] if lines else "no output"


async def cmd_start(rel: Release, args: argparse.Namespace) -> int:
    target = rel.target
    ensure_epmd()
    async with Maint(target) as m:
        _refuse_if_running(rel, await m.ping())
        rel.run_log.parent.mkdir(parents=True, exist_ok=True)
        with rel.run_log.open("ab") as out:
            offset = out.tell()
            proc = subprocess.Popen(
                rel.node_command(),
                cwd=rel.root,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives this script and its terminal, like run_erl
            )
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            code = proc.poll()
            if code is not None:
                reason = _reason(_new_output(rel.run_log, offset))
                raise Failed(f"Node failed to start (exit status {code}): {reason}")
            if await m.ping(timeout=2.0):
                print(_started_line(rel))
                return 0
            await asyncio.sleep(0.2)
    raise Failed(
        f"Node (pid {proc.pid}) did not answer pings within {args.timeout:g} s; it is left running, "
        f"see {rel.run_log} and {rel.root / 'log'}"
    )


def _started_line(rel: Release) -> str:
    """What ``start`` prints once the node answers: where it serves, from the release's settings
    (those the node started with: it binds them or fails to start)."""
    s = load_settings(rel.vm_args, rel.root / "etc" / "app.config")
    line = f"lmq started: node {rel.target.name}, HTTP {s.http_host}:{s.http_port}, RPC {s.rpc_host}:{s.rpc_port}"
    if s.qs_enabled:
        line += f", queue_server {s.qs_host}:{s.qs_port}"
    if s.sqs_enabled:
        line += f", SQS {s.http_host if s.sqs_host is None else s.sqs_host}:{s.sqs_port}"
    return line


async def _stop(rel: Release, timeout: float) -> None:
    async with Maint(rel.target) as m:
        if not await m.ping():
            raise Failed(f"Node {rel.target.name} not responding to pings: {m.last_error}")
        pid = int(to_text(await m.rpc("os", "getpid", [])))
        try:
            result = await m.rpc("lmq_console", "stop", [])
        except DistError as e:
            # The node may close the connection as it goes down: what counts is that it exits.
            result = Atom("ok")
            logging.getLogger("pylmq.cli").debug("stop: %s", e)
    if result is not Atom("ok"):
        raise Failed(f"stop refused: {result!r}")
    if _wait_exit(pid, timeout):
        return
    os.kill(pid, signal.SIGTERM)
    if not _wait_exit(pid, 10.0):
        raise Failed(f"Node (pid {pid}) did not stop within {timeout:g} s, nor 10 s after SIGTERM")


def _wait_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True


async def cmd_stop(rel: Release, args: argparse.Namespace) -> int:
    await _stop(rel, args.timeout)
    print("ok")
    return 0


async def cmd_restart(rel: Release, args: argparse.Namespace) -> int:
    ok, _ = await _ping(rel)
    if ok:
        await _stop(rel, args.timeout)
    return await cmd_start(rel, args)


async def cmd_pid(rel: Release, _args: argparse.Namespace) -> int:
    async with Maint(rel.target) as m:
        if not await m.ping():
            raise Failed(f"Node {rel.target.name} not responding to pings: {m.last_error}")
        print(to_text(await m.rpc("os", "getpid", [])))
    return 0


async def _exec_node(rel: Release, *extra: str) -> int:
    target = rel.target
    ensure_epmd()
    async with Maint(target) as m:
        _refuse_if_running(rel, await m.ping())
    cmd = rel.node_command(*extra)
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(rel.root)
    os.execv(cmd[0], cmd)


async def cmd_foreground(rel: Release, _args: argparse.Namespace) -> int:
    return await _exec_node(rel, "--log-level", "info")


async def cmd_console(rel: Release, _args: argparse.Namespace) -> int:
    return await _exec_node(rel, "--console")


def _journal(rel: Release, action: str) -> int:
    from pylmq.cli import journal

    data_dir = load_settings(None, rel.root / "etc" / "app.config").data_dir
    # Relative to the release, where the node runs.
    return journal.run(action, rel.root / data_dir)


async def cmd_check_journal(rel: Release, _args: argparse.Namespace) -> int:
    return _journal(rel, "check")


async def cmd_repair_journal(rel: Release, _args: argparse.Namespace) -> int:
    return _journal(rel, "repair")


HANDLERS = {
    "start": cmd_start,
    "stop": cmd_stop,
    "restart": cmd_restart,
    "ping": cmd_ping,
    "foreground": cmd_foreground,
    "console": cmd_console,
    "pid": cmd_pid,
    "check-journal": cmd_check_journal,
    "repair-journal": cmd_repair_journal,
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lmq", description="Control the pylmq node of a release.")
    p.add_argument("--root", required=True, help="the release directory (bin/lmq passes its own)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds to wait in start/stop (default 60)")
    p.add_argument("command", choices=COMMANDS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # The maint node's connection errors are reported by the commands, not as log noise.
    logging.getLogger().addHandler(logging.NullHandler())
    rel = Release(Path(args.root).resolve())
    try:
        return asyncio.run(HANDLERS[args.command](rel, args))
    except Failed as e:
        print(str(e), file=sys.stderr)
        return 1
    except LMQError as e:
        print(f"lmq: {e.detail}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
