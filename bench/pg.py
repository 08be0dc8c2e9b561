"""pylmq nodes sharing one PostgreSQL (``--store postgres``) against the plain SKIP LOCKED queue.

One throwaway PostgreSQL (tests/pg_helpers.py ``PgServer``) with fsync on, synchronous_commit on
and ``pg_stat_statements`` loaded when the server has it. Four configurations, each on a fresh
database, each with the same C clients (``--pg-clients``, 16 by default) on queues of their own:

- ``baseline``: no LMQ: C asyncpg connections each repeat an INSERT, an UPDATE of the first due
  row chosen by ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1`` (the delivery, its visibility
  deadline pushed on) and a DELETE (bench/drivers.py ``PgDriver``): what an application gets
  from PostgreSQL alone with the same driver, three round trips a message;
- ``baseline psycopg``: the same statements through psycopg 3 (async, prepared), the driver
  check: whether pylmq's choice of asyncpg costs the database anything (skipped without it);
- ``pylmq x1``, ``x2``, ``x3``: 1, 2, 3 pylmq node processes on the database, the C clients
  spread over them round-robin, each repeating push, pull (t=0) and ack over LMQ's HTTP API.

One cycle is one message's whole life. Each cell reports cycles/s (aggregate, and per node),
p50/p99 of one request, and where the cost goes: top-level statements per cycle (the round
trips nodes make to PostgreSQL, from ``pg_stat_statements``; none without it), write
transactions per cycle (transaction ids consumed), WAL bytes per cycle (``pg_current_wal_lsn``)
and the CPU of PostgreSQL (postmaster and backends), of the pylmq nodes and of the generator
(bench/pygen.py, uvloop; in % of one core). As in bench/qs.py a cell whose generator took most
of what the host left it is flagged (it may measure the generator); the summary says what the
limit was: the host's CPU when PostgreSQL, nodes and generator together use nearly all of it.

    python -m bench --pg [--pg-seconds 6] [--pg-clients 16]
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cells import fmt
from bench.drivers import PG_SCHEMA
from bench.model import Cell, Skip, percentile
from bench.procs import GroupUsage, Proc, free_port, group_usage, wait_port
from bench.pygen import Lane, LaneSet, Workers

__all__ = ["BASELINES", "NODES", "WORKLOAD", "limit", "run_pg", "summary_md"]

WORKLOAD = "pg_cycle"
NODES = (1, 2, 3)
BASELINE = "postgres-skip-locked"
# generator driver -> (target, protocol) of the baseline cells; the first is the one compared with
BASELINES = {"pg": (BASELINE, "asyncpg"), "pg-psycopg": (f"{BASELINE}-psycopg", "psycopg")}
_QUOTA = 10**9  # rounds per lane: the time bound ends a cell
_WARM_ROUNDS = 5  # per lane before a cell: queues created, statements prepared, caches warm
# What pg_stat_statements counts of the bench's own probes (psql): left out of the figures.
_PROBES = ("pg_stat_statements", "pg_current_wal_lsn")
_TICK = os.sysconf("SC_CLK_TCK")


# What asyncpg's pool sends, as one message, each time a connection goes back to the pool (its
# reset): pg_stat_statements counts four statements, the network sees one round trip.
_RESET = ("RESET ALL", "CLOSE ALL", "UNLISTEN *", "SELECT pg_advisory_unlock_all()")


def host_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole host so far, every process of every user: the
    cell's own processes are not all that runs on a shared machine."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])
    return (total - idle) / _TICK, total / _TICK


@dataclass(frozen=True)
class Stmt:
    """One row of pg_stat_statements."""

    calls: int
    toplevel: bool
    ms: float  # total execution time
    query: str


def round_trips(statements: list[Stmt]) -> int:
    """Top-level statements, with each pool reset counted once (see :data:`_RESET`)."""
    top = [st for st in statements if st.toplevel]
    calls = sum(st.calls for st in top)
    by_query = {st.query: st.calls for st in top}
    if _RESET[0] in by_query:
        calls -= sum(by_query.get(q, 0) for q in _RESET[1:])
    return calls


def _children(ppid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(raw[raw.rindex(")") + 2 :].split()[1]) == ppid:
            out.append(int(entry))
    return out


class Postgres:
    """The bench's PostgreSQL: a ``PgServer`` with fsync on, and what it is asked about."""

    def __init__(self) -> None:
        from tests.pg_helpers import PgServer, pg_missing_reason

        reason = pg_missing_reason()
        if reason is not None:
            raise Skip(reason)
        base = {"shared_buffers": "256MB", "max_wal_size": "4GB"}
        try:
            # track = all: the statements inside pylmq's functions too, to see where their time goes
            preload = {"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}
            self.server = PgServer(fsync=True, settings={**base, **preload})
            self.stat_statements = True
        except subprocess.CalledProcessError:
            # Without the contrib module the figures per statement are missing, not the run.
            self.server = PgServer(fsync=True, settings=base)
            self.stat_statements = False
        self.version = self.server.psql("SHOW server_version")

    def database(self) -> str:
        dsn = self.server.new_database()
        if self.stat_statements:
            self.server.psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements", _db(dsn))
        return dsn

    def pids(self) -> list[int]:
        try:
            pid = int((self.server.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return []
        return [pid, *_children(pid)]

    def usage(self) -> GroupUsage:
        """CPU of the live processes plus what the postmaster reaped: the backends of clients
        that have disconnected since (the baseline's) count too."""
        pids = self.pids()
        live = group_usage(pids)
        reaped = 0.0
        if pids:
            with contextlib.suppress(OSError, ValueError, IndexError):
                raw = Path(f"/proc/{pids[0]}/stat").read_text()
                st = raw[raw.rindex(")") + 2 :].split()
                reaped = (int(st[13]) + int(st[14])) / _TICK
        return GroupUsage(live.cpu_s + reaped, live.rss_bytes)

    def snapshot(self, dsn: str) -> tuple[str, int]:
        """WAL position and the next transaction id (this probe takes one)."""
        lsn, xid = self.server.psql("SELECT pg_current_wal_lsn(), pg_current_xact_id()", _db(dsn)).split("|")
        return lsn, int(xid)

    def wal_since(self, dsn: str, lsn: str) -> int:
        return int(self.server.psql(f"SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '{lsn}')::bigint", _db(dsn)))

    def reset_statements(self, dsn: str) -> None:
        if self.stat_statements:
            self.server.psql("SELECT pg_stat_statements_reset()", _db(dsn))

    def statements(self, dsn: str) -> list[Stmt]:
        """The database's statements since the reset, top-level (sent by a client) and nested
        (run inside a function), the most time first."""
        if not self.stat_statements:
            return []
        out = self.server.psql(
            "SELECT calls, toplevel, total_exec_time, regexp_replace(query, '\\s+', ' ', 'g') "
            "FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            + "".join(f"AND query NOT LIKE '%{p}%' " for p in _PROBES)
            + "ORDER BY total_exec_time DESC",
            _db(dsn),
        )
        rows = []
        for line in out.splitlines():
            parts = line.split("|", 3)
            if len(parts) == 4 and parts[0].isdigit():
                rows.append(Stmt(int(parts[0]), parts[1] == "t", float(parts[2]), parts[3]))
        return rows

    def close(self) -> None:
        self.server.close()


def _db(dsn: str) -> str:
    return dsn.rsplit("/", 1)[1]


class PgNode:
    """A pylmq node process on the bench's PostgreSQL (HTTP only)."""

    def __init__(self, scratch: Path, dsn: str, index: int) -> None:
        self.port = free_port()
        where = scratch / f"node{index}"
        where.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable, "-m", "pylmq", "--store", "postgres", "--dsn", dsn,
            "--http", f"127.0.0.1:{self.port}", "--rpc", f"127.0.0.1:{free_port()}", "--qs", "off",
            "--sqs", "off", "--statsd", "off", "--stats-interval", "0", "--log-level", "warning",
        ]  # fmt: skip
        # Run in the scratch directory: no etc/ or log/ of the checkout is read or written.
        self.proc = Proc(argv, name=f"pylmq-pg{index}", log=where / "server.log", cwd=where)

    def wait(self) -> None:
        if not wait_port(self.port, time.monotonic() + 60, self.proc.popen):
            tail = self.proc.tail()
            self.proc.stop()
            raise Skip(f"a pylmq node on PostgreSQL did not start: {tail[-400:]}")

    def usage(self) -> GroupUsage:
        return self.proc.usage()


@dataclass
class _Group:
    """The lanes of one node (or of the baseline) and the generator processes that run them."""

    driver: str
    addr: Any
    lanes: list[Lane]
    procs: int


def _run(groups: list[_Group], seconds: float) -> list[LaneSet]:
    """All groups' generators connected first, then released together; a LaneSet per group."""
    workers = [Workers(g.driver, g.addr, g.lanes, procs=g.procs, seconds=seconds) for g in groups]
    try:
        for w in workers:
            w.ready()
        for w in workers:
            w.go()
        return [w.results() for w in workers]
    finally:
        for w in workers:
            w.kill()


def _groups(driver: str, addrs: list[Any], clients: int, quota: int) -> list[_Group]:
    # Lane i on node i mod N; two generator processes in all when one node (or the baseline)
    # takes every lane, one per node otherwise: at most three on the two-core host.
    n = len(addrs)
    procs = 2 if n == 1 else 1
    return [
        _Group(driver, addrs[k], [Lane("cycle", f"pgb-{i}", quota=quota) for i in range(k, clients, n)], procs)
        for k in range(n)
    ]


def run_pg(
    scratch: Path,
    *,
    seconds: float,
    log: Callable[[str], None],
    clients: int = 16,
    nodes: tuple[int, ...] = NODES,
) -> tuple[list[Cell], dict[str, Any]]:
    pg = Postgres()
    cells: list[Cell] = []
    try:
        info: dict[str, Any] = {
            "cpus": os.cpu_count(),
            "postgres": pg.version,
            "settings": {k: pg.server.options[k] for k in ("fsync", "synchronous_commit", "shared_buffers")},
            "pg_stat_statements": pg.stat_statements,
            "clients": clients,
            "seconds_per_cell": seconds,
            "generator": "bench/pygen.py (uvloop): 2 processes for one node or the baseline, else one per node",
        }
        for driver in BASELINES:
            cells.append(_baseline(pg, driver, clients, seconds, log))
        for n in nodes:
            cells.append(_nodes(pg, scratch / f"x{n}", n, clients, seconds, log))
    finally:
        pg.close()
    return cells, info


def _baseline(pg: Postgres, driver: str, clients: int, seconds: float, log: Callable[[str], None]) -> Cell:
    target, protocol = BASELINES[driver]
    cell = Cell(target, protocol, WORKLOAD, f"c={clients}", generator="pygen")
    if driver == "pg-psycopg":
        try:
            import psycopg  # noqa: F401
        except ImportError as e:
            cell.error = f"skipped: psycopg 3 is not installed (the bench extra has it): {e}"
            log(f"  {target}: {cell.error}")
            return cell
    dsn = pg.database()
    pg.server.psql(PG_SCHEMA, _db(dsn))
    _measure(cell, pg, dsn, driver, [dsn], [], clients, seconds)
    _log(cell, log)
    return cell


def _nodes(pg: Postgres, scratch: Path, n: int, clients: int, seconds: float, log: Callable[[str], None]) -> Cell:
    dsn = pg.database()
    cell = Cell(f"pylmq-postgres-x{n}", "http", WORKLOAD, f"c={clients}", generator="pygen")
    started: list[PgNode] = []
    try:
        for i in range(n):
            started.append(PgNode(scratch, dsn, i))
            # One at a time: the first creates the schema, the others find it.
            started[-1].wait()
        _measure(cell, pg, dsn, "http", [["127.0.0.1", node.port] for node in started], started, clients, seconds)
    except Skip as e:
        cell.error = str(e)[:300]
    finally:
        for node in started:
            node.proc.stop()
    _log(cell, log)
    return cell


def _measure(
    cell: Cell,
    pg: Postgres,
    dsn: str,
    driver: str,
    addrs: list[Any],
    nodes: list[PgNode],
    clients: int,
    seconds: float,
) -> None:
    try:
        warm = _run(_groups(driver, addrs, clients, _WARM_ROUNDS), 10.0)
        if any(r.errors for r in warm):
            cell.error = next(r.error_text for r in warm if r.errors)[:300]
            return
        pg.reset_statements(dsn)
        lsn, xid = pg.snapshot(dsn)
        pg0, nodes0, host0 = pg.usage(), [node.usage() for node in nodes], host_busy()
        t0 = time.monotonic()
        results = _run(_groups(driver, addrs, clients, _QUOTA), seconds)
        wall = time.monotonic() - t0
        pg1, nodes1, host1 = pg.usage(), [node.usage() for node in nodes], host_busy()
        wal = pg.wal_since(dsn, lsn)
        xacts = pg.snapshot(dsn)[1] - xid - 1  # the second probe's own transaction id
        statements = pg.statements(dsn)
    except RuntimeError as e:
        cell.error = str(e)[:300]
        return
    first = min((r.first for r in results if r.first), default=0.0)
    last = max(r.last for r in results)
    span = last - first if last > first else seconds
    cycles = sum(r.acked for r in results)
    lat = sorted(x for r in results for x in r.lat)
    cell.msgs = cycles
    cell.seconds = round(span, 3)
    cell.msgs_per_s = round(cycles / span, 1)
    cell.p50_ms, cell.p99_ms, cell.p999_ms = percentile(lat, 50), percentile(lat, 99), percentile(lat, 99.9)
    gen_cpu = sum(r.cpu_s for r in results)
    pg_cpu = (pg1.cpu_s - pg0.cpu_s) / wall * 100
    node_cpu = [(b.cpu_s - a.cpu_s) / wall * 100 for a, b in zip(nodes0, nodes1, strict=True)]
    cell.server_cpu_pct = round(pg_cpu + sum(node_cpu), 1)
    cell.gen_cpu_pct = round(gen_cpu / span * 100, 1)
    per_node = []
    for r, cpu in zip(results if nodes else [], node_cpu, strict=True):
        span_r = r.last - r.first if r.last > r.first else span
        node_lat = sorted(r.lat)
        per_node.append(
            {
                "msgs_per_s": round(r.acked / span_r, 1),
                "p50_ms": percentile(node_lat, 50),
                "p99_ms": percentile(node_lat, 99),
                "cpu_pct": round(cpu, 1),
            }
        )
    calls = sum(st.calls for st in statements if st.toplevel)
    host_total = host1[1] - host0[1]
    cell.extra = {
        # of all cores: 100 = the whole host busy, with whatever else runs on it
        "host_busy_pct": round((host1[0] - host0[0]) / host_total * 100, 1) if host_total > 0 else None,
        "per_node": per_node,
        "mean_ms": round(statistics.fmean(lat), 3) if lat else None,
        "empties": sum(r.empties for r in results),
        "postgres_cpu_pct": round(pg_cpu, 1),
        "pylmq_cpu_pct": round(sum(node_cpu), 1) if nodes else None,
        "statements_per_cycle": round(calls / cycles, 2) if cycles and statements else None,
        "round_trips_per_cycle": round(round_trips(statements) / cycles, 2) if cycles and statements else None,
        "write_xacts_per_cycle": round(xacts / cycles, 2) if cycles else None,
        "wal_bytes_per_cycle": round(wal / cycles) if cycles else None,
        # CPU per cycle does not depend on what else runs on the host: the robust figure on a
        # shared machine (the rates do)
        "postgres_cpu_ms_per_cycle": round((pg1.cpu_s - pg0.cpu_s) * 1000 / cycles, 3) if cycles else None,
        "pylmq_cpu_ms_per_cycle": (
            round(sum(b.cpu_s - a.cpu_s for a, b in zip(nodes0, nodes1, strict=True)) * 1000 / cycles, 3)
            if cycles and nodes
            else None
        ),
        "top_statements": [
            {
                "per_cycle": round(st.calls / cycles, 3),
                "us_per_cycle": round(st.ms * 1000 / cycles, 1),
                "toplevel": st.toplevel,
                "query": st.query[:160],
            }
            for st in statements[:10]
            if cycles
        ],
    }
    errors = [r.error_text for r in results if r.errors]
    if errors:
        cell.error = errors[0][:300]


def _log(cell: Cell, log: Callable[[str], None]) -> None:
    if cell.msgs_per_s is None:
        log(f"  {cell.target}: failed: {cell.error}")
        return
    x = cell.extra
    nodes = " / ".join(fmt(p["msgs_per_s"]) for p in x["per_node"])
    log(
        f"  {cell.target:22} {cell.msgs_per_s:>8,.0f} cycles/s"
        + (f" (per node {nodes})" if len(x["per_node"]) > 1 else "")
        + f"  p50 {fmt(cell.p50_ms, 2)} ms p99 {fmt(cell.p99_ms, 2)} ms"
        f"  stmts/cycle {fmt(x['statements_per_cycle'], 2)} round trips/cycle {fmt(x['round_trips_per_cycle'], 2)}"
        f" xacts/cycle {fmt(x['write_xacts_per_cycle'], 2)}"
        f" WAL {fmt(x['wal_bytes_per_cycle'])} B/cycle"
        f"  CPU pg {x['postgres_cpu_pct']}% pylmq {x['pylmq_cpu_pct']}% gen {cell.gen_cpu_pct}%"
        f" ({fmt(x['postgres_cpu_ms_per_cycle'], 2)} / {fmt(x['pylmq_cpu_ms_per_cycle'], 2)} ms a cycle)"
        f" host busy {x['host_busy_pct']}%" + (f"  error: {cell.error}" if cell.error else "")
    )


def limit(cell: Cell, cpus: int) -> str:
    """What held a cell back, from its CPU figures: the generator when it took most of what the
    others left; the host's CPU when it was nearly all busy (by the cell's processes, or by
    others on a shared machine: both are said); else waiting (commit flushes, round trips)."""
    if cell.server_cpu_pct is None or cell.gen_cpu_pct is None:
        return ""
    ours = cell.server_cpu_pct + cell.gen_cpu_pct
    pg = cell.extra.get("postgres_cpu_pct") or 0.0
    host = cell.extra.get("host_busy_pct")
    if cell.gen_cpu_pct >= 0.8 * (cpus * 100 - cell.server_cpu_pct):
        return "generator-bound"
    if ours >= 0.85 * cpus * 100:
        return f"host CPU ({ours:.0f}% of {cpus * 100}%; PostgreSQL {pg:.0f}%)"
    if host is not None and host >= 85:
        return (
            f"host CPU, shared: {host:.0f}% busy, this cell {ours:.0f}% of {cpus * 100}% "
            f"(PostgreSQL {pg:.0f}%), other processes the rest"
        )
    return f"not CPU ({ours:.0f}% of {cpus * 100}%): waits (commit flush, round trips)"


def summary_md(cells: list[Cell], cpus: int | None = None) -> str:
    cpus = cpus or os.cpu_count() or 1
    mine = [c for c in cells if c.workload == WORKLOAD]
    base = next((c.msgs_per_s for c in mine if c.target == BASELINE), None)
    rows = []
    for c in mine:
        x = c.extra
        per_node = " / ".join(fmt(p["msgs_per_s"]) for p in x.get("per_node", []))
        ratio = f"{c.msgs_per_s / base:.2f}x" if c.msgs_per_s and base else ""
        cpu = f"{fmt(x.get('postgres_cpu_pct'))} / {fmt(x.get('pylmq_cpu_pct'))} / {fmt(c.gen_cpu_pct)}" if x else "-"
        rows.append(
            f"| {c.target} | {fmt(c.msgs_per_s)} | {ratio} | {per_node} | {fmt(c.p50_ms, 2)} | {fmt(c.p99_ms, 2)} "
            f"| {fmt(x.get('round_trips_per_cycle'), 2)} ({fmt(x.get('statements_per_cycle'), 2)}) "
            f"| {fmt(x.get('write_xacts_per_cycle'), 2)} "
            f"| {fmt(x.get('wal_bytes_per_cycle'))} | {cpu} "
            f"| {fmt(x.get('postgres_cpu_ms_per_cycle'), 2)} / {fmt(x.get('pylmq_cpu_ms_per_cycle'), 2)} "
            f"| {c.error or limit(c, cpus)} |"
        )
    tops = []
    for c in mine:
        for s in c.extra.get("top_statements", [])[:7]:
            level = "top" if s["toplevel"] else "nested"
            query = s["query"][:110].replace("|", "/")
            tops.append(f"| {c.target} | {s['per_cycle']} | {s['us_per_cycle']} | {level} | `{query}` |")
    md = (
        f"## pylmq nodes sharing one PostgreSQL ({cpus} CPUs; fsync on; one cycle = push + pull + ack, "
        "or the baseline's INSERT + UPDATE ... SKIP LOCKED + DELETE)\n\n"
        "| target | cycles/s | x baseline | per node | p50 ms | p99 ms | round trips (statements)/cycle "
        "| write xacts/cycle "
        "| WAL B/cycle | CPU % pg / pylmq / gen | CPU ms/cycle pg / pylmq | limit |\n"
        "|---|---:|---:|---|---:|---:|---:|---:|---:|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    if tops:
        md += (
            "\nWhere PostgreSQL's time goes (pg_stat_statements, most execution time first; top-level "
            "statements are round trips, except asyncpg's pool reset: four statements in one message; "
            "nested ones run inside pylmq's functions, their time inside the caller's)\n\n"
            "| target | calls/cycle | exec µs/cycle | level | statement |\n|---|---:|---:|---|---|\n"
            + "\n".join(tops)
            + "\n"
        )
    return md
