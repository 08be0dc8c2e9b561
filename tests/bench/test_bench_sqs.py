"""The SQS bench section: its driver runs the cycle and the batch cycle against a real node's
SQS endpoint, and the section measures pylmq and moto's server in one run (no speed asserted)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from bench.drivers import make_driver
from bench.sqs import WORKLOADS, run_sqs, summary_md
from bench.targets import Env
from pylmq.node.testing import local_options, running_node
from tests.bench.bench_helpers import run_cycles


async def test_sqs_driver_runs_the_cycle_and_the_batch_cycle() -> None:
    async with running_node(local_options(sqs=("127.0.0.1", 0))) as node:
        assert node.sqs_address is not None
        d = make_driver("sqs", list(node.sqs_address))
        await d.connect()
        await run_cycles(d, "q", str)
        await d.push_many("q", [b"y"] * 10)
        handles = await d.pull_many("q", 10)
        assert len(handles) == 10
        await d.ack_many("q", handles)
        assert node.store.size("q") == 0
        await d.close()


@pytest.mark.slow  # starts a node process, moto's server and generator processes
def test_sqs_section_measures_pylmq_and_moto() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        cells, info = run_sqs(
            Env(Path(scratch), False, False), seconds=0.5, log=print, stores=("memory",), concurrency=(1, 2)
        )
    assert {(c.target, c.workload, c.param) for c in cells} == {
        (t, w, f"c={c}") for t in ("pylmq-memory", "moto") for w in WORKLOADS for c in (1, 2)
    }
    for c in cells:
        assert c.msgs > 0 and c.error is None, c
        assert c.extra["requests_per_s"] and c.gen_cpu_pct is not None and c.server_cpu_pct is not None
    md = summary_md(cells)
    assert info["targets"]["moto"]["moto"] and "| pylmq-memory | sqs_batch10 | c=2 |" in md
