"""The PostgreSQL bench section: its baseline driver runs the plain SKIP LOCKED cycle on a real
database, and the section measures the baseline and pylmq nodes sharing one database (no speed
asserted)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import asyncpg
import pytest

from bench.drivers import PG_SCHEMA, PG_TABLE, make_driver
from bench.model import Cell
from bench.pg import WORKLOAD, Stmt, limit, round_trips, run_pg, summary_md
from tests.bench.bench_helpers import run_cycles


@pytest.mark.parametrize("kind", ["pg", "pg-psycopg"])
async def test_pg_drivers_run_the_cycle(kind: str, pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute(PG_SCHEMA)
        d = make_driver(kind, pg_dsn)
        await d.connect()
        await run_cycles(d, "q", int)
        # a delivered, unacked row is not delivered again before its deadline
        await d.push("q", b"y")
        assert isinstance(await d.pull("q", 0), int)
        assert await d.pull("q", 0) is None
        await d.close()
        assert await conn.fetchval(f"SELECT count(*) FROM {PG_TABLE} WHERE queue = 'q'") == 1
    finally:
        await conn.close()


def test_limit_names_what_held_a_cell_back() -> None:
    def cell(server: float, gen: float, pg: float = 50.0) -> Cell:
        return Cell(
            "t", "http", WORKLOAD, "c=16", server_cpu_pct=server, gen_cpu_pct=gen, extra={"postgres_cpu_pct": pg}
        )

    assert limit(cell(server=100, gen=90), cpus=2) == "generator-bound"
    assert limit(cell(server=150, gen=30, pg=90), cpus=2).startswith("host CPU (180% of 200%; PostgreSQL 90%)")
    assert limit(cell(server=60, gen=20), cpus=2).startswith("not CPU (80% of 200%)")
    assert limit(Cell("t", "http", WORKLOAD, ""), cpus=2) == ""


def test_round_trips_count_a_pool_reset_once() -> None:
    queries = ("RESET ALL", "CLOSE ALL", "UNLISTEN *", "SELECT pg_advisory_unlock_all()")
    reset = [Stmt(7, True, 1.0, q) for q in queries]
    call = Stmt(5, True, 9.0, "SELECT lmq.push($1)")
    nested = Stmt(5, False, 8.0, "INSERT INTO lmq.message VALUES ($1)")
    assert round_trips([call, nested, *reset]) == 12
    # without a RESET ALL, every top-level statement is a round trip of its own
    assert round_trips([Stmt(5, True, 1.0, "SELECT 1"), Stmt(3, True, 1.0, "CLOSE ALL"), nested]) == 8


@pytest.mark.slow  # a PostgreSQL, node processes and generator processes
def test_pg_section_measures_the_baseline_and_each_node_count() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        cells, info = run_pg(Path(scratch), seconds=0.5, log=print, clients=4, nodes=(1, 2))
    assert [c.target for c in cells] == [
        "postgres-skip-locked",
        "postgres-skip-locked-psycopg",
        "pylmq-postgres-x1",
        "pylmq-postgres-x2",
    ]
    for c in cells:
        assert c.workload == WORKLOAD and c.msgs > 0 and c.error is None, c
        assert c.gen_cpu_pct is not None and c.extra["postgres_cpu_pct"] is not None
        assert c.extra["write_xacts_per_cycle"] and c.extra["wal_bytes_per_cycle"]
        if info["pg_stat_statements"]:
            assert c.extra["statements_per_cycle"] and c.extra["top_statements"]
            assert c.extra["round_trips_per_cycle"] <= c.extra["statements_per_cycle"]
        assert c.extra["host_busy_pct"] is not None and c.extra["postgres_cpu_ms_per_cycle"] is not None
    # a baseline is three statements, three transactions a cycle, by construction, either driver
    for base in cells[:2]:
        # (autovacuum's analyze may take a transaction id of its own)
        assert abs(base.extra["write_xacts_per_cycle"] - 3.0) < 0.05 and base.extra["per_node"] == []
        if info["pg_stat_statements"]:
            assert base.extra["statements_per_cycle"] == base.extra["round_trips_per_cycle"] == 3.0
    assert len(cells[2].extra["per_node"]) == 1 and len(cells[3].extra["per_node"]) == 2
    assert all(p["msgs_per_s"] > 0 and p["cpu_pct"] is not None for p in cells[3].extra["per_node"])
    assert cells[3].extra["pylmq_cpu_ms_per_cycle"] is not None and cells[0].extra["pylmq_cpu_ms_per_cycle"] is None
    if info["pg_stat_statements"]:
        # the functions' own statements are seen, not only the calls
        assert any(not s["toplevel"] for s in cells[3].extra["top_statements"])
    md = summary_md(cells)
    assert "| postgres-skip-locked |" in md and "| pylmq-postgres-x2 |" in md
    assert info["settings"]["fsync"] == "on"
