"""Releases for the tests: built with ``make rel`` into a temporary directory, configured as an
operator would (etc/vm.args and etc/app.config edited), driven with subprocess.

Test modules import these package-qualified (``from tests.rel.rel_helpers import ...``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from pylmq.cli.lmq import pid_alive

REPO = Path(__file__).resolve().parents[2]
# make must not reinstall the venv under other people's running tests: the stamp counts as fresh.
# It is the Makefile's ``.venv/.installed-$(EXTRAS)`` for the default EXTRAS.
STAMP = ".venv/.installed-test,spark"

# lager's default layout: date, time with milliseconds, [level], who, message.
LAGER_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} "
    r"\[(debug|info|notice|warning|error|critical|alert|emergency)\] \S* .*$"
)
CRASH_HEADER = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d =(ERROR|CRASH|SUPERVISOR|PROGRESS) REPORT====$")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_release(target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", "--no-print-directory", "-o", STAMP, "rel", f"REL_DIR={target}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@dataclass
class Release:
    root: Path
    name: str
    cookie: str
    http_port: int
    rpc_port: int
    statsd: socket.socket
    elsewhere: Path  # a working directory that is not the release's
    qs_port: int = 0  # queue_server's protocol (TCP and UDP) on 127.0.0.1
    sqs_port: int = 0  # the SQS API on 127.0.0.1

    def run(
        self, script: str, *args: str, input: str | None = None, timeout: float = 90.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.root / "bin" / script), *args],
            cwd=self.elsewhere,
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )

    def lmq(self, *args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
        return self.run("lmq", *args, timeout=timeout)

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run("lmq-admin", *args)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def pid_file(self) -> Path:
        return self.root / "lmq.pid"

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def configure(self) -> None:
        """Edit etc/ as an operator would: node name, cookie, ports, StatsD, a quick gauge period."""
        vm = self.root / "etc" / "vm.args"
        text = vm.read_text()
        text = re.sub(r"(?m)^-name .*$", f"-name {self.name}", text)
        text = re.sub(r"(?m)^-setcookie .*$", f"-setcookie {self.cookie}", text)
        vm.write_text(text)
        app = self.root / "etc" / "app.config"
        text = app.read_text()
        text = text.replace("{port, 18800}", f"{{port, {self.rpc_port}}}")
        text = text.replace('{http, {"0.0.0.0", 9980}}', f'{{http, {{"127.0.0.1", {self.http_port}}}}}')
        text = text.replace("{qs, 1111}", f'{{qs, {{"127.0.0.1", {self.qs_port}}}}}')
        text = text.replace("{sqs, 9324}", f'{{sqs, {{"127.0.0.1", {self.sqs_port}}}}}')
        text = text.replace("{stats_interval, 20000}", "{stats_interval, 500}")
        text = text.replace('{hostname, "localhost"}', '{hostname, "127.0.0.1"}')
        text = text.replace("{port, 8125}", f"{{port, {self.statsd.getsockname()[1]}}}")
        app.write_text(text)

    def kill(self) -> None:
        """Teardown: stop gracefully if the node answers, else kill whatever the pid file names."""
        pid = self.pid()
        if pid is None or not pid_alive(pid):
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.lmq("stop", timeout=30)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)


def make_release(base: Path) -> Release:
    statsd = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    statsd.bind(("127.0.0.1", 0))
    elsewhere = base / "elsewhere"
    elsewhere.mkdir(parents=True, exist_ok=True)
    rel = Release(
        root=base / "lmq",
        name=f"lmqt{secrets.token_hex(4)}@127.0.0.1",
        cookie=f"c{secrets.token_hex(8)}",
        http_port=free_port(),
        rpc_port=free_port(),
        qs_port=free_port(),
        sqs_port=free_port(),
        statsd=statsd,
        elsewhere=elsewhere,
    )
    built = build_release(rel.root)
    assert built.returncode == 0, f"make rel failed: {built.stdout}{built.stderr}"
    rel.configure()
    return rel
