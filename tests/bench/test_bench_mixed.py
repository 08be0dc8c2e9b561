"""The mixed-cluster targets of the bench (bench/mixed.py): real LMQ nodes from the reference kit
and a pylmq node joined, measured by wrk in ``cycle`` mode. No speed is asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import bench.refkit
from bench.mixed import run_mixed, summary
from bench.model import Skip

ROOT = Path(__file__).resolve().parents[2]


def test_the_mixed_targets_are_skipped_with_the_reason_where_the_kit_is_absent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench.refkit, "LMQ_REF", tmp_path / "no-kit" / "bin" / "lmq-ref")
    monkeypatch.setattr(bench.refkit, "KIT", tmp_path / "no-kit")
    with pytest.raises(Skip, match=r"no LMQ reference kit at .*no-kit"):
        run_mixed("wrk", tmp_path, rounds=1, connections=1, seconds=1, log=lambda _: None)


@pytest.mark.erl
@pytest.mark.slow
def test_bench_mixed_measures_each_side_alone_and_both_on_one_queue(tmp_path: Path) -> None:
    reason = bench.refkit.kit_missing_reason()
    if reason is not None:
        pytest.skip(reason)
    out = tmp_path / "results"
    argv = [
        sys.executable, "-m", "bench", "--mixed", "--mixed-rounds", "1", "--mixed-connections", "2",
        "--cell-seconds", "1", "--budget", "120", "--out", str(out),
    ]  # fmt: skip
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=240, check=False)
    assert run.returncode == 0, f"bench exited {run.returncode}: {run.stdout[-1500:]} {run.stderr[-1500:]}"
    doc = json.loads((out / "results.json").read_text())
    cells = {c["target"]: c for c in doc["cells"]}
    assert set(cells) == {
        "mixed-pylmq", "mixed-erlang", "mixed-shared-pylmq", "mixed-shared-erlang", "mixed-erlang-in-node",
        "mixed-shared-joined-pylmq", "mixed-shared-joined-erlang",
    }, cells  # fmt: skip
    for target, cell in cells.items():
        assert cell["workload"] == "cycle" and cell["error"] is None, f"{target}: {cell}"
        assert cell["msgs"] > 0, f"{target}: expected acked cycles, got {cell}"
        if target != "mixed-erlang-in-node":  # no load generator there: Erlang processes only
            assert cell["gen_cpu_pct"] is not None, f"{target}: {cell}"
    for target in ("mixed-pylmq", "mixed-erlang", "mixed-erlang-in-node"):
        per = cells[target]["extra"]["cpu_ms_per_cycle"]
        assert set(per) == {"pylmq", "erlang_joined", "erlang_measured"} and all(v >= 0 for v in per.values()), per
        assert 0 <= cells[target]["extra"]["host_busy_pct"] <= 100, cells[target]["extra"]
    # The measured Erlang node does the work of its own clients: most of its cycle's CPU is there.
    erl = cells["mixed-erlang"]["extra"]["cpu_ms_per_cycle"]
    assert erl["erlang_measured"] > erl["erlang_joined"], erl
    assert cells["mixed-shared-pylmq"]["param"] == "c=2+2"
    s = doc["meta"]["targets"]["mixed"]["summary"]
    assert s["ratio_pylmq_over_erlang"] > 0 and 0 < s["smaller_share_of_shared"] <= 0.5, s
    assert 0 < s["smaller_share_of_shared_joined"] <= 0.5, s
    assert set(s["cpu_ms_per_cycle"]) == {"mixed-pylmq", "mixed-erlang", "mixed-erlang-in-node"}, s
    assert "## Mixed cluster" in (out / "results.md").read_text()
    assert "CPU ms per cycle, by process" in (out / "results.md").read_text()


def test_the_summary_takes_ratios_within_a_round_and_medians_over_rounds() -> None:
    from bench.model import Cell

    def cell(target: str, rate: float, rnd: int) -> Cell:
        c = Cell(target, "http", "cycle", "c=8", msgs_per_s=rate, p99_ms=10.0)
        c.extra["round"] = rnd
        return c

    cells = [
        cell("mixed-pylmq", 300, 1), cell("mixed-erlang", 100, 1), cell("mixed-shared-pylmq", 90, 1),
        cell("mixed-shared-erlang", 10, 1), cell("mixed-pylmq", 200, 2), cell("mixed-erlang", 200, 2),
        cell("mixed-shared-pylmq", 50, 2), cell("mixed-shared-erlang", 50, 2), cell("mixed-pylmq", 400, 3),
        cell("mixed-erlang", 200, 3), cell("mixed-shared-pylmq", 60, 3), cell("mixed-shared-erlang", 40, 3),
    ]  # fmt: skip
    s = summary(cells)
    assert s["ratio_pylmq_over_erlang"] == 2.0  # rounds 3.0, 1.0, 2.0
    assert s["smaller_share_of_shared"] == 0.4  # rounds 0.1, 0.5, 0.4
    assert s["smaller_share_of_shared_joined"] is None  # not measured in these rounds
    assert s["ratio_ok"] and s["share_ok"] and s["p99_ok"] and s["rounds"] == 3
    # The Erlang side's clients on the joined node: both shares must reach a third.
    joined = [cell("mixed-shared-joined-pylmq", 90, r) for r in (1, 2, 3)]
    joined += [cell("mixed-shared-joined-erlang", rate, r) for r, rate in ((1, 10), (2, 20), (3, 30))]
    s = summary(cells + joined)
    assert s["smaller_share_of_shared_joined"] == pytest.approx(20 / 110)  # rounds 0.1, 0.18, 0.25
    assert not s["share_ok"]
