"""Real LMQ nodes for the tests, run from the reference kit next to the repository.

The kit (``<repo>/../shared/lmq-reference``, see its README.md) holds the original Erlang LMQ
compiled for OTP 25 and a launcher, ``bin/lmq-ref``. It is never copied into the repository: where
it is absent (a user's clone) or ``erl`` is not OTP 25, :func:`kit_or_skip` skips the calling
tests with the reason.

:func:`reference_cluster` starts Erlang LMQ nodes (the 2nd and later join the 1st the way
``lmq-admin join`` does) and pylmq nodes joined to them, each with its own ports on 127.0.0.1,
unique node names, its own directory and a cookie of its own, and stops them all on exit.

Test modules import this by name (``from lmq_reference import ...``), as cluster_helpers.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import ROOT, PyNode


def _find_kit() -> Path:
    """``$LMQ_REFERENCE_KIT``, else ``../shared/lmq-reference`` beside the checkout, or beside the
    main checkout when this one is a git worktree elsewhere."""
    if os.environ.get("LMQ_REFERENCE_KIT"):
        return Path(os.environ["LMQ_REFERENCE_KIT"])
    roots = [ROOT]
    with suppress(OSError, subprocess.SubprocessError):
        common = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--path-format=absolute", "--git-common-dir"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        if common:
            roots.append(Path(common).parent)
    for root in roots:
        kit = root.parent / "shared" / "lmq-reference"
        if (kit / "bin" / "lmq-ref").is_file():
            return kit
    return ROOT.parent / "shared" / "lmq-reference"


KIT = _find_kit()
LMQ_REF = KIT / "bin" / "lmq-ref"
HOST = "127.0.0.1"
START_TIMEOUT = 120.0  # lmq-ref itself gives up after 30 s of waiting; a join takes longer
STOP_TIMEOUT = 60.0  # lmq-ref escalates to SIGKILL after 15 s


def _otp_release() -> str | None:
    erl = shutil.which("erl")
    if erl is None:
        return None
    expr = 'io:format("~s", [erlang:system_info(otp_release)]), halt().'
    try:
        out = subprocess.run([erl, "-noshell", "-eval", expr], capture_output=True, timeout=60, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.decode(errors="replace").strip()


def kit_missing_reason() -> str | None:
    """Why real LMQ nodes cannot run here, or None when they can."""
    if not LMQ_REF.is_file() or not os.access(LMQ_REF, os.X_OK):
        return (
            f"no LMQ reference kit at {KIT} (bin/lmq-ref missing): the real-LMQ tests need it at"
            " ../shared/lmq-reference beside the repository, or its path in LMQ_REFERENCE_KIT"
        )
    release = _otp_release()
    if release is None:
        return "erl (Erlang/OTP 25) is not on PATH: the LMQ reference kit runs only on OTP 25"
    if release != "25":
        return f"erl is OTP {release}; the LMQ reference kit's beams and NIF are built for OTP 25 only"
    return None


def kit_or_skip() -> None:
    reason = kit_missing_reason()
    if reason is not None:
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _lmq_ref(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(LMQ_REF), *args], capture_output=True, text=True, timeout=timeout)


class RefNode:
    """One real LMQ node started by ``lmq-ref``; :meth:`stop` is safe to call at any time."""

    def __init__(self, prefix: str, cookie: str, base: Path) -> None:
        self.name = f"{prefix}_{secrets.token_hex(4)}@{HOST}"
        self.cookie = cookie
        self.dir = base / self.name.split("@")[0]
        self.http = 0
        self.rpc = 0
        self.started = False

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http}"

    def start(self, join: str | None = None) -> None:
        last = ""
        for _ in range(3):  # a port picked free can be taken by someone else before the node binds it
            self.http, self.rpc = free_port(), free_port()
            args = ["start", "--name", self.name, "--http", str(self.http), "--rpc", str(self.rpc)]
            args += ["--dir", str(self.dir), "--cookie", self.cookie] + (["--join", join] if join else [])
            self.started = True  # stop() must run even when start fails half-way
            done = _lmq_ref(*args, timeout=START_TIMEOUT)
            if done.returncode == 0:
                return
            last = done.stdout + done.stderr
            self.stop()
            if "accept" not in last and "in use" not in last:
                break
        raise AssertionError(f"expected real LMQ node {self.name} to start; lmq-ref said:\n{last[-4000:]}")

    def stop(self) -> None:
        if self.started:
            with suppress(subprocess.TimeoutExpired):
                _lmq_ref("stop", "--dir", str(self.dir), timeout=STOP_TIMEOUT)
            self.started = False

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

    def eval(self, expr: str) -> str:
        """The value of an Erlang expression on the node, as ``~p`` prints it."""
        done = _lmq_ref("eval", self.name, self.cookie, expr, timeout=60)
        if done.returncode != 0:
            raise AssertionError(f"expected {expr!r} to evaluate on {self.name}; got:\n{done.stdout}{done.stderr}")
        return done.stdout.strip()

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
