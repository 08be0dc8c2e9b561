"""Mixed clusters for the tests: two real Erlang LMQ test peers and two pylmq node processes.

The Erlang side is the interop peers (tests/interop/erlpeer.py: peers a and b in one Mnesia
cluster, and a hidden driver node running calls for the test). Each pylmq node is a process
(tests/cluster/pynode.py) that joined one of the peers, so the failure tests can kill it.

Test modules import these package-qualified (``from tests.cluster.cluster_helpers import ...``).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pylmq.client import HttpClient, RpcClient
from tests.interop import erlpeer
from tests.interop.erlpeer import Cluster as ErlCluster

ROOT = Path(__file__).resolve().parents[2]

READY_TIMEOUT = 60.0


class PyNode:
    """One pylmq node process joined to an Erlang peer."""

    def __init__(
        self, prefix: str, cookie: str, data_dir: Path, log: IO[bytes], join: str | None, args: tuple[str, ...] = ()
    ) -> None:
        self.name = erlpeer.node_name(prefix)
        data_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, str(Path(__file__).with_name("pynode.py")), "--name", self.name, "--cookie", cookie]
        cmd += ["--data-dir", str(data_dir), *args] + (["--join", join] if join else [])
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env)
        self.port = 0
        self.rpc_port = 0
        self.sqs_port = 0

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            raise AssertionError(
                f"expected pylmq node {self.name} to start within {timeout} s; exit={self.proc.poll()}"
            )
        ports = json.loads(line)
        self.port, self.rpc_port, self.sqs_port = ports["http"], ports["rpc"], ports["sqs"]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def client(self, timeout: float = 30.0) -> HttpClient:
        return HttpClient(self.url, request_timeout=timeout)

    def rpc_client(self, timeout: float = 30.0) -> RpcClient:
        return RpcClient("127.0.0.1", self.rpc_port, request_timeout=timeout)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@dataclass
class Mixed:
    erl: ErlCluster
    p1: PyNode
    p2: PyNode
    tmp: Path

    def status(self, py: PyNode) -> dict[str, Any]:
        """lmq_console:status() of a pylmq node, called from the Erlang driver."""
        term = self.erl.driver.call(py.name, "lmq_console", "status")
        return {k: v for k, v in term}


@contextmanager
def mixed_cluster(tmp: Path) -> Iterator[Mixed]:
    with erlpeer.running_cluster(tmp) as erl:
        p1 = PyNode("py1", erl.cookie, tmp / "p1", erl.log, erl.a.name)
        p2 = PyNode("py2", erl.cookie, tmp / "p2", erl.log, erl.b.name)
        try:
            p1.wait_ready()
            p2.wait_ready()
            yield Mixed(erl, p1, p2, tmp)
        finally:
            for p in (p1, p2):
                with suppress(Exception):
                    p.stop()


def eventually(probe: Any, until: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    value = probe()
    while not until(value) and time.monotonic() < deadline:
        time.sleep(0.02)
        value = probe()
    return value
