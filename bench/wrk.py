"""HTTP load with wrk and bench/lua/lmq.lua: one wrk thread per connection, a state machine each."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["WrkRun", "run_wrk"]

SCRIPT = Path(__file__).with_name("lua") / "lmq.lua"


@dataclass
class WrkRun:
    stats: dict[str, Any]
    wall: float
    cpu_s: float  # wrk's own user + system time
    done: bool  # every connection reached its count before the time bound


def run_wrk(
    wrk: str,
    url: str,
    *,
    mode: str,
    queue: str,
    connections: int,
    quota: int,
    body: int = 100,
    pull_t: str = "0",
    producers: int = 0,
    seconds: float,
) -> WrkRun:
    """Run one wrk cell; ends when every connection is done or at ``seconds`` (plus slack)."""
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as markers:
        duration = max(1, int(seconds + 0.999))
        argv = [
            wrk, f"-t{connections}", f"-c{connections}", f"-d{duration}s", "--timeout", "10s", "--latency",
            "-s", str(SCRIPT), url, "--", mode, queue, str(quota), str(body), pull_t, str(producers), markers,
        ]  # fmt: skip
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        done = False
        try:
            hard = start + duration + 15
            while proc.poll() is None:
                if not done and len(os.listdir(markers)) >= connections:
                    done = True
                    proc.send_signal(signal.SIGINT)  # wrk ends its run and prints its summary
                if time.monotonic() > hard:
                    proc.kill()
                    break
                time.sleep(0.02)
            out, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        wall = time.monotonic() - start
        # wrk has been waited for: its CPU time is now in our children's usage.
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        text = out.decode(errors="replace")
        line = next((ln for ln in text.splitlines() if ln.startswith("BENCH ")), None)
        if line is None:
            raise RuntimeError(f"wrk gave no result: {err.decode(errors='replace')[-500:]} {text[-500:]}")
        return WrkRun(json.loads(line[6:]), wall, cpu, done)
