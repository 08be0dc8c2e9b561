"""The queue_server bench section: its drivers run the cycle against a real node, and the
section measures every protocol (no speed asserted)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bench.drivers import make_driver
from bench.qs import WORKLOAD, run_qs, summary_md
from bench.targets import Env
from pylmq.node.testing import local_options, running_node
from tests.bench.bench_helpers import run_cycles


@pytest.mark.parametrize("kind", ["qs-tcp", "qs-udp"])
async def test_qs_drivers_run_the_cycle(kind: str) -> None:
    async with running_node(local_options(qs=("127.0.0.1", 0))) as node:
        assert node.qs_address is not None
        d = make_driver(kind, list(node.qs_address))
        await d.connect()
        await run_cycles(d, "q", int)
        assert node.store.size("q") == 0
        await d.close()


@pytest.mark.slow  # starts a node process and generator processes
def test_qs_section_measures_each_protocol() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        cells, info = run_qs(Env(Path(scratch), False, False), seconds=0.5, log=print, concurrency=(1, 2))
    assert {(c.protocol, c.param) for c in cells} == {
        (p, f"c={c}") for p in ("qs-udp", "qs-tcp", "http", "rpc") for c in (1, 2)
    }
    for c in cells:
        assert c.workload == WORKLOAD and c.msgs > 0 and c.error is None, c
        assert c.extra["requests_per_s"] and c.gen_cpu_pct is not None
    assert info["cpus"] and "| qs-udp | c=1 |" in summary_md(cells)
