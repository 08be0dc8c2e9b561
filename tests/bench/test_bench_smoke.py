"""The benchmark runs end to end against a real pylmq node (no speed is asserted here; the chart,
which needs the `bench` extra, is checked by `make bench QUICK=1`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_measures_pylmq_over_http_and_rpc_and_writes_its_results(tmp_path: Path) -> None:
    out = tmp_path / "results"
    argv = [
        sys.executable, "-m", "bench", "--quick", "--targets", "memory", "--workloads", "w1_push,w3_steady,w7_cycle",
        "--cell-seconds", "1", "--budget", "60", "--out", str(out),
    ]  # fmt: skip
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, f"bench exited {run.returncode}: {run.stderr[-2000:]}"
    doc = json.loads((out / "results.json").read_text())
    measured = {(c["protocol"], c["workload"]): c for c in doc["cells"]}
    assert set(measured) == {(proto, w) for proto in ("http", "rpc") for w in ("w1_push", "w3_steady", "w7_cycle")}, (
        sorted(measured)
    )
    for key, cell in measured.items():
        assert cell["msgs"] > 0 and cell["error"] is None, f"{key}: expected messages and no error, got {cell}"
        # every cell says what the server spent per message and whether its generator held it back
        assert cell["server_us_per_msg"] > 0 and cell["gen_units"] >= 1 and "saturated" in cell, f"{key}: {cell}"
    assert doc["meta"]["cpu_count"] and doc["meta"]["python"], f"run facts missing: {doc['meta']}"
    md = (out / "results.md").read_text()
    assert md.count("| pylmq-memory |") >= 6 and "server µs/msg" in md
