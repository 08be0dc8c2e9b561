"""How ``bin/lmq`` and ``lmq-admin`` reach a running node: as LMQ's nodetool does.

A short-lived hidden node named ``<target alive>_maint_<os pid>@<target host>`` (so it uses
long or short names as the target does) connects with the cookie from the release's
``etc/vm.args`` (or ``~/.erlang.cookie``), pings, and calls the functions the running node
registered for Erlang (``lmq_console:*``, ``init:stop``, ``os:getpid``). It never listens and
never registers in EPMD: it only dials out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from pylmq.config import load_settings
from pylmq.erlang import Node
from pylmq.erlang.terms import Term
from pylmq.errors import ConfigError, DistError

__all__ = ["Maint", "Target", "ensure_epmd", "read_target"]


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    cookie: str
    net_ticktime: int = 60


def read_target(vm_args: Path) -> Target:
    """The node name and cookie a release's ``etc/vm.args`` gives its node."""
    s = load_settings(vm_args, None)
    if s.node_name is None:
        raise ConfigError(f"{vm_args}: no -name or -sname line: the admin tools reach the node over distribution")
    if s.cookie is None:
        raise ConfigError(f"{vm_args}: no -setcookie line and no ~/.erlang.cookie")
    return Target(s.node_name, s.cookie, s.net_ticktime)


def ensure_epmd() -> None:
    """Start the system epmd when Erlang is installed (a no-op if one runs), as nodetool does;
    without Erlang the node starts pylmq's own epmd."""
    epmd = shutil.which("epmd")
    if epmd is not None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            subprocess.run([epmd, "-daemon"], timeout=10, check=False, capture_output=True)


class Maint:
    """``async with Maint(target) as m: await m.ping(); await m.rpc("lmq_console", "status", [])``."""

    def __init__(self, target: Target) -> None:
        self.target = target
        alive, _, host = target.name.partition("@")
        self.node = Node(f"{alive}_maint_{os.getpid()}@{host}", target.cookie, net_ticktime=target.net_ticktime)
        self.last_error = ""

    async def __aenter__(self) -> Maint:
        await self.node.start(listen=False, register=False)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.node.stop()

    async def ping(self, timeout: float = 5.0) -> bool:
        """True for ``pong``; otherwise :attr:`last_error` says why."""
        try:
            await self.node.connect(self.target.name)
        except DistError as e:
            self.last_error = e.detail
            return False
        if await self.node.ping(self.target.name, timeout):
            return True
        self.last_error = f"{self.target.name} did not answer the ping"
        return False

    async def rpc(self, module: str, function: str, args: list[Term], timeout: float = 60.0) -> Term:
        return await self.node.rpc(self.target.name, module, function, args, timeout)
