"""Real LMQ nodes for the tests, run from the reference kit next to the repository.

The kit (``<repo>/../shared/lmq-reference``, see its README.md) holds the original Erlang LMQ
compiled for OTP 25 and a launcher, ``bin/lmq-ref``. It is never copied into the repository: where
it is absent (a user's clone) or ``erl`` is not OTP 25, :func:`kit_or_skip` skips the calling
tests with the reason.

:func:`reference_cluster` starts Erlang LMQ nodes (the 2nd and later join the 1st the way
``lmq-admin join`` does) and pylmq nodes joined to them, each with its own ports on 127.0.0.1,
unique node names, its own directory and a cookie of its own, and stops them all on exit.

Test modules import this package-qualified (``from tests.cluster.lmq_reference import ...``).
"""

from __future__ import annotations

import os
import secrets
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.refkit import HOST, KIT, LMQ_REF, free_port, kit_missing_reason
from bench.refkit import RefNode as KitNode
from pylmq.client import HttpClient
from tests.cluster.cluster_helpers import PyNode

__all__ = ["HOST", "KIT", "LMQ_REF", "RefCluster", "RefNode", "free_port", "kit_or_skip", "reference_cluster"]


def kit_or_skip() -> None:
    reason = kit_missing_reason()
    if reason is not None:
        pytest.skip(reason)


class RefNode(KitNode):
    """A real LMQ node (bench/refkit.py) with what only the tests need."""

    def kill(self) -> None:
        """SIGKILL, as a crash: only the pid the node recorded, and only while it is that node."""
        pid = self.signal(signal.SIGKILL)
        wait_for(lambda: Path(f"/proc/{pid}").exists(), lambda alive: not alive, 15)
        self.started = False

    def signal(self, sig: signal.Signals) -> int:
        """Send ``sig`` to the node's beam (SIGSTOP/SIGCONT suspend and resume it); its pid."""
        pid = int((self.dir / "pid").read_text().strip())
        with suppress(ProcessLookupError):
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if self.name.encode() in cmdline:
                os.kill(pid, sig)
        return pid

    def client(self, timeout: float = 30.0) -> HttpClient:
        return HttpClient(self.url, request_timeout=timeout)

    def queue_processes(self) -> list[str]:
        """Names of the queues that have a queue process in this node's lmq_queue_mgr."""
        out = self.eval('lists:sort([atom_to_list(N) || {N, _} <- lmq_queue_mgr:match(<<".">>)])')
        # ~p wraps a long list over indented lines: strip each name of that indentation.
        names = out.replace("\n", "").strip("[] ").replace('"', "").split(",")
        return [x.strip() for x in names if x.strip()]


@dataclass
class RefCluster:
    erl: list[RefNode]
    py: list[PyNode]
    cookie: str
    base: Path


@contextmanager
def reference_cluster(
    base: Path, erlang: int = 2, pylmq: int = 1, py_args: tuple[str, ...] = ()
) -> Iterator[RefCluster]:
    """``erlang`` real LMQ nodes in one cluster and ``pylmq`` pylmq nodes, the i-th joined to
    Erlang node i modulo ``erlang`` (``py_args``: more pynode.py flags). Everything started is
    stopped on exit."""
    kit_or_skip()
    cookie = "ref" + secrets.token_hex(8)
    with ExitStack() as stack, open(base / "pylmq.log", "ab") as log:
        erl: list[RefNode] = []
        for i in range(erlang):
            node = RefNode(f"lmq{i + 1}", cookie, base)
            stack.callback(node.stop)
            node.start(join=erl[0].name if erl else None)
            erl.append(node)
        py: list[PyNode] = []
        for i in range(pylmq):
            p = PyNode(f"pylmq{i + 1}", cookie, base / f"pylmq{i + 1}", log, erl[i % erlang].name, py_args)
            stack.callback(p.stop)
            p.wait_ready()
            py.append(p)
        yield RefCluster(erl, py, cookie, base)


def wait_for(probe: Any, until: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    value = probe()
    while not until(value) and time.monotonic() < deadline:
        time.sleep(0.05)
        value = probe()
    return value


def http(method: str, url: str, body: bytes | None = None, ctype: str = "text/plain") -> tuple[int, bytes]:
    """Status and body of one HTTP request to a node (an Erlang LMQ node or pylmq); 4xx/5xx too."""
    headers = {"content-type": ctype} if body is not None else {}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
