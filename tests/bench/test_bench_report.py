"""The bench's honesty rules, on hand-made cells: when a load generator counts as saturated, the
server's CPU per completed message, and that generator-bound cells stay out of the ratios, the
performance targets and the LMQ headline (no server is started here)."""

from __future__ import annotations

from pathlib import Path

from bench.model import Cell, flag_saturated, saturation, server_us_per_msg
from bench.pygen import LaneSet
from bench.report import check_targets, headlines, ratios, server_cpu_md, table, write


def _cell(
    target: str,
    rate: float,
    *,
    protocol: str = "http",
    workload: str = "w3_steady",
    param: str = "c=16",
    server_pct: float = 95.0,
    gen_pct: float = 40.0,
    units: int = 32,
    server_cpu_s: float = 1.0,
) -> Cell:
    c = Cell(target, protocol, workload, param, msgs=int(rate * 2), seconds=2.0, msgs_per_s=rate, p99_ms=2.0)
    c.server_cpu_pct, c.gen_cpu_pct, c.gen_units, c.server_cpu_s = server_pct, gen_pct, units, server_cpu_s
    return flag_saturated(c, cpus=2)


def test_one_python_generator_process_near_a_full_core_is_saturated() -> None:
    assert saturation(gen_cpu_pct=95.0, gen_units=1, server_cpu_pct=20.0, cpus=2) is not None
    assert saturation(gen_cpu_pct=85.0, gen_units=1, server_cpu_pct=20.0, cpus=2) is None


def test_several_processes_are_saturated_only_over_the_cores_they_can_use() -> None:
    # 4 processes on 2 cores can use 2 cores: 170 % is below 90 % of 200 % on that rule ...
    assert saturation(gen_cpu_pct=170.0, gen_units=4, server_cpu_pct=None, cpus=2) is None
    # ... and 185 % is at it
    assert saturation(gen_cpu_pct=185.0, gen_units=4, server_cpu_pct=None, cpus=2) is not None


def test_a_full_host_where_the_generator_takes_most_of_it_is_saturated() -> None:
    # Redis driven by Python: the generator holds the cores, the server idles at 24 %
    why = saturation(gen_cpu_pct=165.0, gen_units=4, server_cpu_pct=24.0, cpus=2)
    assert why is not None and "host CPU full" in why
    # pylmq at a full core with the generator below it: the server is the bottleneck
    assert saturation(gen_cpu_pct=85.0, gen_units=2, server_cpu_pct=98.0, cpus=2) is None
    # a host with room left is not full, whoever takes more
    assert saturation(gen_cpu_pct=110.0, gen_units=4, server_cpu_pct=40.0, cpus=2) is None


def test_wrk_threads_well_below_the_cores_are_not_saturated() -> None:
    assert saturation(gen_cpu_pct=40.0, gen_units=32, server_cpu_pct=98.0, cpus=2) is None


def test_no_generator_figures_means_no_flag() -> None:
    assert saturation(gen_cpu_pct=None, gen_units=2, server_cpu_pct=50.0, cpus=2) is None
    assert saturation(gen_cpu_pct=99.0, gen_units=0, server_cpu_pct=50.0, cpus=2) is None


def test_server_cpu_per_message_is_server_seconds_over_completed_messages_in_microseconds() -> None:
    assert server_us_per_msg(0.5, 2_500) == 200.0
    assert server_us_per_msg(1.3, 1_000) == 1300.0
    assert server_us_per_msg(0.5, 0) is None
    assert server_us_per_msg(None, 100) is None
    # a few clock ticks of CPU (workload 5's probes) give no figure: it would be mostly rounding
    assert server_us_per_msg(0.02, 100) is None


def test_flag_saturated_fills_the_cell_from_its_own_figures() -> None:
    c = _cell("redis", 3_000, protocol="redis", server_pct=24.0, gen_pct=165.0, units=4, server_cpu_s=0.48)
    assert c.saturated is not None
    assert c.server_us_per_msg == 80.0  # 0.48 s over 6,000 messages
    assert c.to_json()["saturated"] == c.saturated


def test_a_generator_bound_reference_is_left_out_of_the_ratios(tmp_path: Path) -> None:
    cells = [
        _cell("pylmq-memory", 4_000),
        _cell("ceiling-nginx", 8_000),
        _cell("redis", 3_000, protocol="redis", server_pct=24.0, gen_pct=165.0, units=4),
    ]
    (row,) = ratios(cells)
    assert row["ceiling-nginx"] == 0.5
    assert row["redis"] is None and row["excluded"] == ["redis"]
    assert "gen-bound" in write_md(tmp_path, cells)


def test_a_generator_bound_pylmq_cell_has_no_ratio_row() -> None:
    cells = [
        _cell("pylmq-memory", 4_000, protocol="rpc", server_pct=60.0, gen_pct=185.0, units=2),
        _cell("pylmq-memory", 4_000),
        _cell("ceiling-nginx", 8_000),
    ]
    rows = ratios(cells)
    assert [(r["protocol"], r["ceiling-nginx"]) for r in rows] == [("http", 0.5)]


def test_the_performance_targets_do_not_use_a_generator_bound_ceiling() -> None:
    mem = _cell("pylmq-memory", 4_000)
    ok = check_targets([mem, _cell("ceiling-nginx", 8_000)])[0]
    assert ok["met"] is True and ok["value"] == 0.5
    bound = _cell("ceiling-nginx", 8_000, server_pct=60.0, gen_pct=130.0, units=32)
    assert bound.saturated is not None
    got = check_targets([mem, bound])[0]
    assert got["met"] is None and got["value"] is None and "ceiling-nginx" in got["detail"]


def test_the_table_shows_server_cpu_per_message_and_flags_generator_bound_cells() -> None:
    cells = [
        _cell("pylmq-memory", 4_000, server_cpu_s=1.6),
        _cell("redis", 3_000, protocol="redis", server_pct=24.0, gen_pct=165.0, units=4, server_cpu_s=0.48),
    ]
    cells[1].extra["gen_cpu_pct_per_proc"] = [41.0, 42.0, 40.0, 42.0]
    cells[1].generator = "python x4"
    md = table(cells)
    assert "server µs/msg" in md.splitlines()[0]
    mem_row, redis_row = md.splitlines()[2:4]
    assert "| 200 |" in mem_row and "GEN-BOUND" not in mem_row
    assert "| 80 |" in redis_row and "GEN-BOUND" in redis_row and "41/42/40/42% each" in redis_row
    pivot = server_cpu_md(cells)
    assert "| pylmq-memory | http | 200 |" in pivot and "| redis | redis | 80 |" in pivot


def test_the_lmq_headline_gives_both_shapes_of_load_with_server_cpu_per_message(tmp_path: Path) -> None:
    cells = [
        _cell("pylmq-memory", 4_400, server_cpu_s=2.0),
        _cell("lmq-external", 134, server_pct=140.0, gen_pct=24.0, server_cpu_s=2.8),
        _cell("pylmq-memory", 5_600, workload="w7_cycle", units=16, server_cpu_s=2.0),
        _cell("lmq-external", 1_600, workload="w7_cycle", server_pct=137.0, gen_pct=21.0, units=16, server_cpu_s=2.8),
    ]
    rows = {r["workload"]: r for r in headlines(cells)}
    assert rows["w3_steady"]["ratio"] == round(4_400 / 134, 2)
    assert rows["w7_cycle"]["ratio"] == 3.5
    assert rows["w7_cycle"]["lmq_us_per_msg"] == 875.0  # 2.8 s over 3,200 messages
    md = write_md(tmp_path, cells)
    assert "pulls are answered 204" in md and "3.5×" in md


def test_the_lmq_headline_gives_no_ratio_for_a_generator_bound_side() -> None:
    cells = [
        _cell("pylmq-memory", 5_600, workload="w7_cycle", server_pct=60.0, gen_pct=190.0, units=2),
        _cell("lmq-external", 1_600, workload="w7_cycle", server_pct=137.0, gen_pct=21.0),
    ]
    (row,) = headlines(cells)
    assert row["ratio"] is None and row["excluded"] == "generator-bound"


def test_worker_results_keep_each_process_cpu() -> None:
    total = LaneSet()
    for cpu in (0.8, 0.6):
        one = LaneSet(acked=10, first=1.0, last=2.0, cpu_s=cpu)
        total.merge(one.__dict__)
    assert total.proc_cpu_s == [0.8, 0.6] and total.cpu_s == 1.4


def write_md(out: Path, cells: list[Cell]) -> str:
    """results.md as :func:`bench.report.write` writes it into ``out``."""
    meta = {"started": "t", "cpu_count": 2, "python": "3", "mode": "quick", "seconds": 1.0}
    write(out, cells, meta)
    return (out / "results.md").read_text()
