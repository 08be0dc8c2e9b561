"""Real LMQ nodes from the reference kit, for the mixed-cluster bench targets and the tests.

The kit (``<repo>/../shared/lmq-reference``, or ``$LMQ_REFERENCE_KIT``; see its README.md) holds
the original Erlang LMQ compiled for OTP 25 and a launcher, ``bin/lmq-ref``. It is never copied
into the repository: where it is absent (a user's clone) or ``erl`` is not OTP 25,
:func:`kit_missing_reason` says why, and the callers skip.

This module has no pytest in it, so that both ``bench/`` and ``tests/cluster/lmq_reference.py``
(which adds what only the tests need) start nodes the same way.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
from contextlib import suppress
from pathlib import Path

__all__ = ["HOST", "KIT", "LMQ_REF", "RefNode", "free_port", "kit_missing_reason", "lmq_ref"]

ROOT = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
START_TIMEOUT = 120.0  # lmq-ref itself gives up after 30 s of waiting; a join takes longer
STOP_TIMEOUT = 60.0  # lmq-ref escalates to SIGKILL after 15 s


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
            f"no LMQ reference kit at {KIT} (bin/lmq-ref missing): real LMQ nodes need it at"
            " ../shared/lmq-reference beside the repository, or its path in LMQ_REFERENCE_KIT"
        )
    release = _otp_release()
    if release is None:
        return "erl (Erlang/OTP 25) is not on PATH: the LMQ reference kit runs only on OTP 25"
    if release != "25":
        return f"erl is OTP {release}; the LMQ reference kit's beams and NIF are built for OTP 25 only"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def lmq_ref(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
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

    def pid(self) -> int | None:
        """The OS pid of the node's beam.smp (lmq-ref records it), while it runs."""
        with suppress(OSError, ValueError):
            return int((self.dir / "pid").read_text().strip())
        return None

    def start(self, join: str | None = None) -> None:
        last = ""
        for _ in range(3):  # a port picked free can be taken by someone else before the node binds it
            self.http, self.rpc = free_port(), free_port()
            args = ["start", "--name", self.name, "--http", str(self.http), "--rpc", str(self.rpc)]
            args += ["--dir", str(self.dir), "--cookie", self.cookie] + (["--join", join] if join else [])
            self.started = True  # stop() must run even when start fails half-way
            done = lmq_ref(*args, timeout=START_TIMEOUT)
            if done.returncode == 0:
                return
            last = done.stdout + done.stderr
            self.stop()
            if "accept" not in last and "in use" not in last:
                break
        raise RuntimeError(f"expected real LMQ node {self.name} to start; lmq-ref said:\n{last[-4000:]}")

    def stop(self) -> None:
        if self.started:
            with suppress(subprocess.TimeoutExpired):
                lmq_ref("stop", "--dir", str(self.dir), timeout=STOP_TIMEOUT)
            self.started = False

    def eval(self, expr: str) -> str:
        """The value of an Erlang expression on the node, as ``~p`` prints it."""
        done = lmq_ref("eval", self.name, self.cookie, expr, timeout=60)
        if done.returncode != 0:
            raise RuntimeError(f"expected {expr!r} to evaluate on {self.name}; got:\n{done.stdout}{done.stderr}")
        return done.stdout.strip()
