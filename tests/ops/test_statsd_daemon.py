"""End to end: pylmq's metrics received by the real StatsD daemon (npm ``statsd``, run by node),
checked through the daemon's TCP management interface."""

from __future__ import annotations

import asyncio
import random
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pylmq.metrics import PeriodicGauges, QueueMetrics, StatsdEmitter

STATSD = Path(__file__).resolve().parents[2] / ".cache" / "statsd" / "node_modules" / "statsd" / "stats.js"


def free_port(kind: socket.SocketKind) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Daemon:
    udp_port: int
    mgmt_port: int

    def command(self, cmd: str) -> str:
        with socket.create_connection(("127.0.0.1", self.mgmt_port), timeout=5) as s:
            s.sendall(cmd.encode() + b"\n")
            out = b""
            while not out.endswith(b"END\n\n") and not (cmd == "health" and out.endswith(b"\n")):
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        return out.decode()

    def values(self, cmd: str) -> dict[str, str]:
        """``counters``/``gauges``/``timers`` as {key: printed value} (node prints util.inspect)."""
        body = self.command(cmd)
        return {k: v.strip() for k, v in re.findall(r"'([^']+)':\s*(\[[^\]]*\]|[^,\n}]+)", body)}


@pytest.fixture
def statsd_daemon(tmp_path: Path) -> Iterator[Daemon]:
    node = shutil.which("node")
    assert node is not None, "node must be on PATH"
    assert STATSD.exists(), f"statsd daemon missing at {STATSD}: run `make statsd`"
    daemon = Daemon(free_port(socket.SOCK_DGRAM), free_port(socket.SOCK_STREAM))
    config = tmp_path / "statsd-config.js"
    # A long flush interval keeps the aggregates in place while the test reads them.
    config.write_text(
        f'{{ port: {daemon.udp_port}, address: "127.0.0.1", mgmt_port: {daemon.mgmt_port}, '
        f'mgmt_address: "127.0.0.1", flushInterval: 600000, backends: ["./backends/console"] }}\n'
    )
    log = (tmp_path / "statsd.log").open("wb")
    proc = subprocess.Popen([node, str(STATSD), str(config)], cwd=STATSD.parent, stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 15
        while True:
            assert proc.poll() is None, f"statsd exited: {(tmp_path / 'statsd.log').read_text()}"
            try:
                if "up" in daemon.command("health"):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "statsd did not answer on its management port"
            time.sleep(0.1)
        yield daemon
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


class ScriptedRandom(random.Random):
    def __init__(self, values: list[float]) -> None:
        super().__init__(0)
        self._values = iter(values)

    def random(self) -> float:
        return next(self._values)


@pytest.mark.slow
async def test_statsd_daemon_receives_queue_metrics(statsd_daemon: Daemon) -> None:
    # Which events are sampled at LMQ's rate 0.5: 6 of 10 pushes; of 4 pulls, 2 counters and 3
    # timings. The daemon scales sampled counters by 1/0.5.
    push_draws = [0.1, 0.9, 0.2, 0.3, 0.8, 0.4, 0.5, 0.6, 0.7, 0.0]
    pull_draws = [0.1, 0.1, 0.9, 0.2, 0.3, 0.9, 0.9, 0.0]  # (counter, timing) per pull
    emitter = StatsdEmitter("127.0.0.1", statsd_daemon.udp_port, rng=ScriptedRandom(push_draws + pull_draws))
    await emitter.start()
    metrics = QueueMetrics(emitter)
    queue = "jobs.high/eu"  # dots and slashes must stay inside one path segment
    for _ in range(10):
        metrics.on_push(queue)
    for retention in (0.25, 1.5, 2.0, 0.004):
        metrics.on_pull(queue, retention)
    PeriodicGauges(emitter, 20000, lambda: {queue: (7, 2048)}).report()
    await asyncio.sleep(0)
    emitter.close()

    key = "lmq.jobs-2Ehigh-2Feu"
    expected = {
        "counters": {f"{key}.push": "12", f"{key}.pull": "4"},
        "gauges": {f"{key}.size": "7", f"{key}.memory": "2048"},
        "timers": {f"{key}.retention": "[ 250, 1500, 4 ]"},
    }
    deadline = time.monotonic() + 5
    while True:
        got = {cmd: {k: v for k, v in statsd_daemon.values(cmd).items() if k.startswith("lmq.")} for cmd in expected}
        if got == expected or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert got == expected
    assert statsd_daemon.values("counters")["statsd.bad_lines_seen"] == "0"
