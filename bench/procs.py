"""Processes the bench starts: servers and load generators, each in its own process group.

Every process is started with ``start_new_session`` so that stopping it (SIGTERM, then SIGKILL
after a grace period) reaches everything it spawned (RabbitMQ's shell wrapper and its Erlang VM,
nginx's workers). RSS and CPU are read from ``/proc`` for the whole group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["GroupUsage", "Proc", "free_port", "group_pids", "group_usage", "wait_port"]

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_port(port: int, deadline: float, proc: subprocess.Popen[bytes] | None = None) -> bool:
    """True once something accepts on 127.0.0.1:port; False at the deadline or if proc died."""
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
        time.sleep(0.05)
    return False


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    return raw[raw.rindex(")") + 2 :].split()


def group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = _stat(int(entry))
            if st is not None and int(st[2]) == pgid:
                pids.append(int(entry))
    return pids


@dataclass(frozen=True)
class GroupUsage:
    cpu_s: float  # user + system seconds of the live processes
    rss_bytes: int


def group_usage(pids: Sequence[int]) -> GroupUsage:
    cpu, rss = 0.0, 0
    for pid in pids:
        st = _stat(pid)
        if st is None:
            continue
        cpu += (int(st[11]) + int(st[12])) / _TICK
        rss += int(st[21]) * _PAGE
    return GroupUsage(cpu, rss)


class Proc:
    """A started process group; :meth:`stop` ends it (and is safe to call twice)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        name: str,
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        stdin: int | None = subprocess.DEVNULL,
        stdout: int | None = None,
    ) -> None:
        self.name = name
        self.log = log
        log.parent.mkdir(parents=True, exist_ok=True)
        self._logf = open(log, "ab")  # noqa: SIM115 (closed in stop)
        self.popen: subprocess.Popen[bytes] = subprocess.Popen(
            list(argv),
            stdin=stdin,
            stdout=stdout if stdout is not None else self._logf,
            stderr=self._logf,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def pids(self) -> list[int]:
        return group_pids(self.pid) or ([self.pid] if self.alive() else [])

    def usage(self) -> GroupUsage:
        return group_usage(self.pids())

    def signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, sig)

    def stop(self, grace: float = 10.0) -> None:
        if self.alive() or group_pids(self.pid):
            self.signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(grace)
            # Children may outlive the leader (a shell wrapper): the whole group goes.
            deadline = time.monotonic() + 2.0
            while group_pids(self.pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            self.signal(signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(2.0)
        self._logf.close()

    def tail(self, n: int = 15) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])
