"""The bench's ``lmq`` target without ``--lmq-url``: a node of the reference kit (the real Erlang
LMQ) started for the run, measured by its beam's CPU, and workload 7's per-connection cycle run
on it over HTTP (wrk) and RPC (the Python generator's ``cycle_wait`` lanes). Small counts: this
checks that the cells complete and carry their figures, not any speed (800 cycles: enough
server CPU, well over 0.1 s, for a per-message figure)."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from bench.model import QUICK
from bench.runner import Ctx, run_target
from bench.targets import Env, ExternalLmq
from tests.cluster.lmq_reference import kit_or_skip, wait_for


@pytest.mark.slow
def test_the_lmq_target_starts_a_kit_node_and_runs_the_cycle_on_it(tmp_path: Path) -> None:
    kit_or_skip()
    wrk = shutil.which("wrk")
    assert wrk is not None, "wrk is installed by make deps (the bench's HTTP generator)"
    target = ExternalLmq(Env(tmp_path, False, False))
    target.start()
    try:
        assert target.node is not None and target.protocols == ("http", "rpc") and target.rpc_oldspec
        pid = target.node.pid()
        assert pid is not None and "beam" in Path(f"/proc/{pid}/comm").read_text()
        usage = target.usage()
        assert usage is not None and usage.cpu_s > 0 and usage.rss_bytes > 0
        assert target.info()["pid"] == pid
        budget = replace(QUICK, cell_seconds=10.0, cycle_concurrency=(4,), cycle_count=800)
        cells = run_target(Ctx(target, budget, wrk, lambda _msg: None), ["w7_cycle"], deadline=float("inf"))
    finally:
        target.stop()
    assert [(c.protocol, c.workload, c.param) for c in cells] == [
        ("http", "w7_cycle", "c=4"),
        ("rpc", "w7_cycle", "c=4"),
    ]
    for c in cells:
        assert c.error is None, f"{c.protocol}: {c.error}"
        assert c.msgs == 800, f"{c.protocol}: expected every cycle acked, got {c.msgs}"
        assert c.server_us_per_msg is not None and c.server_us_per_msg > 0, c
        assert c.gen_units >= 1 and c.gen_cpu_pct is not None, c
    assert cells[0].generator == "wrk -t4" and cells[1].generator == "python x2"
    assert target.node is None
    # lmq-ref's stop has the node run init:stop(): its beam exits shortly after
    assert not wait_for(lambda: Path(f"/proc/{pid}").exists(), lambda alive: not alive, 30)
