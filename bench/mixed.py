"""Mixed-cluster targets: two real Erlang LMQ nodes (the reference kit) and a pylmq node joined.

Workload ``cycle``: with wrk, one connection per thread, each connection repeats push, pull and
ack (bench/lua/lmq.lua ``cycle`` mode); one cycle is one acked message. Measured in one run,
on one cluster:

- ``mixed-pylmq``: the connections all go to the pylmq node;
- ``mixed-erlang``: the connections all go to an Erlang node of the same cluster (the one the
  pylmq node did not join, so neither side is favoured by being the node pylmq calls first);
- ``mixed-shared-pylmq`` / ``mixed-shared-erlang``: both at once, C connections each, on one
  queue: the two wrk processes run side by side, and each side's rate and p99 are its own;
- ``mixed-shared-joined-pylmq`` / ``mixed-shared-joined-erlang``: the same, with the Erlang
  side's clients on the node pylmq joined (the one whose table events feed its mirror, where
  its queue runners do not go unless, as here, the clients of that node write the queue too);
- ``mixed-erlang-in-node``: no HTTP and no pylmq request at all: C Erlang processes on the
  measured Erlang node call its queue process (``lmq_queue:push/pull/done``) directly. It is the
  rate LMQ's own transactions allow one queue of this cluster on this host, the ceiling of
  any front end that runs them one at a time per queue.

For the two single-side targets and the in-node one, each cell also records the CPU time every
process of the cluster spent per cycle (``extra.cpu_ms_per_cycle``: the pylmq node, the Erlang
node it joined, the measured Erlang node) and how busy the host was (``extra.host_busy_pct``):
on a host whose cores are all busy, CPU per cycle is what bounds the rate.

Each round runs the three in turn; ``--mixed-rounds`` rounds give medians (other load on the
host moves single runs a lot). The summary gives the goals: pylmq's cycle rate over the Erlang
node's (>= 1.5, p99 no worse), and on the shared queue each side's share of the combined rate
(>= 1/3). Without the kit (or OTP 25) the targets are skipped with the reason.
"""

from __future__ import annotations

import json
import re
import secrets
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.model import Cell, Skip
from bench.procs import GroupUsage, Proc, group_usage, wait_port
from bench.refkit import HOST, RefNode, free_port, kit_missing_reason
from bench.wrk import WrkRun, run_wrk

__all__ = ["MixedCluster", "mixed_cluster", "run_mixed", "summary_md"]

WORKLOAD = "cycle"
JOIN_TIMEOUT = 60.0


@dataclass
class MixedCluster:
    erl: list[RefNode]
    py: Proc
    py_url: str

    def erl_usage(self, i: int) -> GroupUsage | None:
        pid = self.erl[i].pid()
        return group_usage([pid]) if pid is not None else None


def _http(method: str, url: str, body: bytes | None = None) -> tuple[int, bytes, dict[str, str]]:
    req = urllib.request.Request(url, data=body, method=method, headers={"content-type": "text/plain"})
    try:
        with urllib.request.urlopen(req, timeout=15) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def _joined(py_url: str, erl_url: str) -> bool:
    """A push through pylmq is pulled on the Erlang node: pylmq serves the cluster's queues."""
    q = "mixed-probe-" + secrets.token_hex(3)
    try:
        if _http("POST", f"{py_url}/messages/{q}", b"probe")[0] != 200:
            return False
        status, body, headers = _http("GET", f"{erl_url}/messages/{q}?t=1")
        if status != 200 or body != b"probe":
            return False
        mid = {k.lower(): v for k, v in headers.items()}["x-lmq-message-id"]
        _http("POST", f"{erl_url}/messages/{q}/{mid}?reply=ack")
        _http("DELETE", f"{erl_url}/queues/{q}")
        return True
    except (OSError, KeyError):
        return False


@contextmanager
def mixed_cluster(scratch: Path) -> Iterator[MixedCluster]:
    """Two Erlang LMQ nodes in one cluster and one pylmq node (``python -m pylmq``, the release's
    entry point) joined to the first through ``{lmq, [{join, Node}]}``; all stopped on exit."""
    reason = kit_missing_reason()
    if reason is not None:
        raise Skip(reason)
    cookie = "bench" + secrets.token_hex(8)
    base = scratch / "mixed"
    base.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        erl: list[RefNode] = []
        for i in range(2):
            node = RefNode(f"bench{i + 1}", cookie, base)
            stack.callback(node.stop)
            try:
                node.start(join=erl[0].name if erl else None)
            except RuntimeError as e:
                raise Skip(str(e)[-400:]) from e
            erl.append(node)
        d = base / "pylmq"
        d.mkdir()
        (d / "app.config").write_text(f"[{{lmq, [{{join, '{erl[0].name}'}}]}}].\n")
        http, rpc = free_port(), free_port()
        argv = [
            sys.executable, "-m", "pylmq", "--app-config", str(d / "app.config"), "--name",
            f"pybench_{secrets.token_hex(3)}@{HOST}", "--cookie", cookie, "--http", f"{HOST}:{http}",
            "--rpc", f"{HOST}:{rpc}", "--qs", "off", "--store", "memory", "--log-level", "warning", "--statsd", "off",
            "--stats-interval", "0",
        ]  # fmt: skip
        py = Proc(argv, name="pylmq-in-cluster", log=d / "server.log", cwd=d)
        stack.callback(py.stop)
        if not wait_port(http, time.monotonic() + 30, py.popen):
            raise Skip(f"pylmq did not start: {py.tail()[-400:]}")
        py_url = f"http://{HOST}:{http}"
        deadline = time.monotonic() + JOIN_TIMEOUT
        while not _joined(py_url, erl[1].url):
            if time.monotonic() > deadline or not py.alive():
                raise Skip(f"pylmq did not join the cluster: {py.tail()[-400:]}")
            time.sleep(0.5)
        yield MixedCluster(erl, py, py_url)


def _cell(target: str, param: str, run: WrkRun, usage: tuple[GroupUsage | None, GroupUsage | None]) -> Cell:
    s = run.stats
    c = Cell(target, "http", WORKLOAD, param, generator="wrk")
    c.msgs = int(s["acked"])
    c.seconds = round(s["span"], 3)
    c.msgs_per_s = round(c.msgs / s["span"], 1) if s["span"] > 0 and c.msgs else None
    c.p50_ms, c.p99_ms, c.p999_ms = (round(s[k] / 1000.0, 3) for k in ("p50_us", "p99_us", "p999_us"))
    c.gen_cpu_pct = round(run.cpu_s / run.wall * 100, 1) if run.wall > 0 else None
    u0, u1 = usage
    if u0 is not None and u1 is not None and run.wall > 0:
        c.server_cpu_pct = round((u1.cpu_s - u0.cpu_s) / run.wall * 100, 1)
        c.server_rss_mb = round(u1.rss_bytes / 2**20, 1)
    c.extra.update(requests=s["requests"], empties=s["empties"], bad=s["bad"] + s["wrk_errors"])
    if s["bad"] + s["wrk_errors"]:
        c.error = f"{s['bad'] + s['wrk_errors']} failed requests"
    return c


def _host_ticks() -> tuple[int, int]:
    """(idle, total) jiffies of the host since boot."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[3] + v[4], sum(v)


class _Accounting:
    """CPU seconds of each cluster process and the host's busy share over one cell."""

    def __init__(self, m: MixedCluster) -> None:
        pid = m.py.popen.pid
        self.pids = {"pylmq": pid, "erlang_joined": m.erl[0].pid(), "erlang_measured": m.erl[1].pid()}
        self.cpu0 = self._cpu()
        self.host0 = _host_ticks()

    def _cpu(self) -> dict[str, float]:
        return {k: group_usage([p]).cpu_s for k, p in self.pids.items() if p is not None}

    def record(self, cell: Cell, cycles: int) -> None:
        cpu1, host1 = self._cpu(), _host_ticks()
        if cycles > 0:
            cell.extra["cpu_ms_per_cycle"] = {
                k: round((cpu1[k] - self.cpu0[k]) / cycles * 1000, 3) for k in cpu1 if k in self.cpu0
            }
        idle, total = host1[0] - self.host0[0], host1[1] - self.host0[1]
        if total > 0:
            cell.extra["host_busy_pct"] = round(100 * (1 - idle / total), 1)


# C Erlang processes on the node call its queue process until the deadline; the answer is
# {Cycles, Microseconds}. Only LMQ's own API, run by lmq-ref eval like any operator's command.
_IN_NODE = """
Q = '{queue}', Pid = lmq_queue_mgr:get(Q, [create]), Self = self(),
T0 = erlang:monotonic_time(microsecond), End = T0 + {micros},
Work = fun Work(N) ->
    case erlang:monotonic_time(microsecond) < End of
        true ->
            ok = lmq_queue:push(Pid, <<"cycle">>),
            {{message, {{_, UUID}}, _, _, _, _}} = lmq_queue:pull(Pid),
            ok = lmq_queue:done(Pid, UUID),
            Work(N + 1);
        false -> N
    end
end,
[spawn(fun() -> Self ! {{cycles, Work(0)}} end) || _ <- lists:seq(1, {c})],
Total = lists:sum([receive {{cycles, N}} -> N end || _ <- lists:seq(1, {c})]),
lmq_lib:delete(Q),
{{Total, erlang:monotonic_time(microsecond) - T0}}.
"""


def _in_node_cell(m: MixedCluster, c: int, seconds: float, tag: str) -> Cell:
    acct = _Accounting(m)
    out = m.erl[1].eval(_IN_NODE.format(queue=f"mx{tag}-in-node", micros=int(seconds * 1e6), c=c))
    found = re.search(r"\{(\d+),(\d+)\}", out.replace(" ", "").replace("\n", ""))
    cell = Cell("mixed-erlang-in-node", "erlang", WORKLOAD, f"c={c}", generator="lmq_queue")
    if found is None:
        cell.error = f"unexpected answer: {out[-300:]}"
        return cell
    cycles, micros = int(found[1]), int(found[2])
    cell.msgs, cell.seconds = cycles, round(micros / 1e6, 3)
    cell.msgs_per_s = round(cycles / (micros / 1e6), 1) if micros else None
    acct.record(cell, cycles)
    return cell


def _cycles(wrk: str, url: str, queue: str, c: int, seconds: float) -> WrkRun:
    # A quota no connection reaches: the cell is bounded by time, so both sides of the shared
    # queue run for the same span.
    return run_wrk(wrk, url, mode="cycle", queue=queue, connections=c, quota=10**9, pull_t="1", seconds=seconds)


def run_round(wrk: str, m: MixedCluster, c: int, seconds: float, tag: str, log: Callable[[str], None]) -> list[Cell]:
    cells: list[Cell] = []
    sides: list[tuple[str, str, Callable[[], GroupUsage | None]]] = [
        ("pylmq", m.py_url, m.py.usage),
        ("erlang", m.erl[1].url, lambda: m.erl_usage(1)),
    ]
    for side, url, usage in sides:
        u0 = usage()
        acct = _Accounting(m)
        run = _cycles(wrk, url, f"mx{tag}-{side}", c, seconds)
        cells.append(_cell(f"mixed-{side}", f"c={c}", run, (u0, usage())))
        acct.record(cells[-1], cells[-1].msgs)
        log(f"    {cells[-1].target} {c}: {cells[-1].msgs_per_s} cycles/s p99 {cells[-1].p99_ms} ms")
    cells.append(_in_node_cell(m, c, seconds, tag))
    log(f"    {cells[-1].target} {c}: {cells[-1].msgs_per_s} cycles/s")
    # Both at once on one queue: one wrk per side, started together. The Erlang side's clients
    # go to the measured node (where pylmq's queue runners run by default), then to the node
    # pylmq joined (where the runner of a queue its clients write goes).
    cells += _shared(wrk, f"mx{tag}-shared", c, seconds, sides, "mixed-shared", log)
    joined = [sides[0], ("erlang", m.erl[0].url, lambda: m.erl_usage(0))]
    cells += _shared(wrk, f"mx{tag}-shared-joined", c, seconds, joined, "mixed-shared-joined", log)
    return cells


def _shared(
    wrk: str,
    q: str,
    c: int,
    seconds: float,
    sides: list[tuple[str, str, Callable[[], GroupUsage | None]]],
    prefix: str,
    log: Callable[[str], None],
) -> list[Cell]:
    """Each side's cell of ``c`` connections per side on queue ``q``, all at once."""
    runs: dict[str, WrkRun] = {}
    errors: list[BaseException] = []
    u0s = {side: usage() for side, _, usage in sides}

    def go(side: str, url: str) -> None:
        try:
            runs[side] = _cycles(wrk, url, q, c, seconds)
        except BaseException as e:  # reported below, the other side still ends
            errors.append(e)

    threads = [threading.Thread(target=go, args=(side, url)) for side, url, _ in sides]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    cells = []
    for side, _, usage in sides:
        cells.append(_cell(f"{prefix}-{side}", f"c={c}+{c}", runs[side], (u0s[side], usage())))
        log(f"    {cells[-1].target} {c}+{c}: {cells[-1].msgs_per_s} cycles/s p99 {cells[-1].p99_ms} ms")
    return cells


def run_mixed(
    wrk: str | None, scratch: Path, *, rounds: int, connections: int, seconds: float, log: Callable[[str], None]
) -> tuple[list[Cell], dict[str, Any]]:
    """The mixed-cluster cells of ``rounds`` rounds, and what the targets of the run were."""
    if wrk is None:
        raise Skip("wrk is not installed")
    cells: list[Cell] = []
    with mixed_cluster(scratch) as m:
        info = {
            "erlang_nodes": [n.name for n in m.erl],
            "pylmq_joined": m.erl[0].name,
            "measured_erlang": m.erl[1].name,
        }
        for r in range(rounds):
            log(f"  mixed round {r + 1}/{rounds}")
            for cell in run_round(wrk, m, connections, seconds, f"{r}{secrets.token_hex(2)}", log):
                cell.extra["round"] = r + 1
                cells.append(cell)
    return cells, info


def _median(cells: list[Cell], target: str, attr: str) -> float | None:
    vals = [getattr(c, attr) for c in cells if c.target == target and getattr(c, attr) is not None]
    return statistics.median(vals) if vals else None


def summary(cells: list[Cell]) -> dict[str, Any]:
    """Medians over the rounds, and the goals: pylmq/Erlang >= 1.5 with a p99 no worse, and each
    side's share of the shared queue's combined rate >= 1/3 (ratios within a round, then median)."""
    med = {t: {a: _median(cells, t, a) for a in ("msgs_per_s", "p99_ms", "gen_cpu_pct", "server_cpu_pct")}
           for t in ("mixed-pylmq", "mixed-erlang", "mixed-shared-pylmq", "mixed-shared-erlang",
                     "mixed-shared-joined-pylmq", "mixed-shared-joined-erlang", "mixed-erlang-in-node")}  # fmt: skip
    cpu: dict[str, dict[str, float]] = {}
    for t in ("mixed-pylmq", "mixed-erlang", "mixed-erlang-in-node"):
        per = [c.extra["cpu_ms_per_cycle"] for c in cells if c.target == t and "cpu_ms_per_cycle" in c.extra]
        busy = [c.extra["host_busy_pct"] for c in cells if c.target == t and "host_busy_pct" in c.extra]
        if per:
            cpu[t] = {k: statistics.median(p[k] for p in per if k in p) for k in per[0]}
            cpu[t]["total"] = sum(cpu[t].values())
            if busy:
                cpu[t]["host_busy_pct"] = statistics.median(busy)
    by_round: dict[int, dict[str, Cell]] = {}
    for c in cells:
        by_round.setdefault(int(c.extra.get("round", 0)), {})[c.target] = c
    ratios: list[float] = []
    shares: dict[str, list[float]] = {"mixed-shared": [], "mixed-shared-joined": []}
    for r in by_round.values():
        p, e = r.get("mixed-pylmq"), r.get("mixed-erlang")
        if p and e and p.msgs_per_s and e.msgs_per_s:
            ratios.append(p.msgs_per_s / e.msgs_per_s)
        for prefix, got in shares.items():
            sp, se = r.get(f"{prefix}-pylmq"), r.get(f"{prefix}-erlang")
            if sp and se:
                a, b = sp.msgs_per_s or 0.0, se.msgs_per_s or 0.0
                if a + b > 0:
                    got.append(min(a, b) / (a + b))
    ratio = statistics.median(ratios) if ratios else None
    share, share_joined = (statistics.median(v) if v else None for v in shares.values())
    p99p, p99e = med["mixed-pylmq"]["p99_ms"], med["mixed-erlang"]["p99_ms"]
    return {
        "medians": med,
        "cpu_ms_per_cycle": cpu,
        "ratio_pylmq_over_erlang": ratio,
        "ratio_ok": ratio is not None and ratio >= 1.5,
        "p99_ok": p99p is not None and p99e is not None and p99p <= p99e,
        "smaller_share_of_shared": share,
        # The Erlang side's clients on the node pylmq joined (its subscription node).
        "smaller_share_of_shared_joined": share_joined,
        "share_ok": share is not None and share >= 1 / 3 and (share_joined is None or share_joined >= 1 / 3),
        "rounds": len(by_round),
    }


def summary_md(cells: list[Cell]) -> str:
    s = summary(cells)
    med = s["medians"]

    def f(v: float | None, d: int = 0) -> str:
        return "-" if v is None else f"{v:,.{d}f}"

    rows = "\n".join(
        f"| {t} | {f(v['msgs_per_s'])} | {f(v['p99_ms'], 1)} | {f(v['server_cpu_pct'])} | {f(v['gen_cpu_pct'])} |"
        for t, v in med.items()
    )
    cpu_rows = "\n".join(
        f"| {t} | {f(v.get('pylmq'), 2)} | {f(v.get('erlang_joined'), 2)} | {f(v.get('erlang_measured'), 2)} "
        f"| {f(v.get('total'), 2)} | {f(v.get('host_busy_pct'))} |"
        for t, v in s["cpu_ms_per_cycle"].items()
    )
    cpu_table = (
        "\nCPU ms per cycle, by process (medians):\n\n"
        "| target | pylmq | Erlang node joined | Erlang node measured | total | host busy % |\n"
        "|---|---:|---:|---:|---:|---:|\n" + cpu_rows + "\n"
        if cpu_rows
        else ""
    )
    return (
        f"## Mixed cluster (medians of {s['rounds']} rounds, cycles/s = push+pull+ack per connection)\n\n"
        "| target | cycles/s | p99 ms | server CPU % | gen CPU % |\n|---|---:|---:|---:|---:|\n"
        + rows
        + f"\n\npylmq / Erlang node: {f(s['ratio_pylmq_over_erlang'], 2)} (goal >= 1.5: "
        f"{'met' if s['ratio_ok'] else 'NOT met'}); p99 no worse than the Erlang node's: "
        f"{'met' if s['p99_ok'] else 'NOT met'}.\n"
        f"Shared queue, smaller side's share of the combined rate: {f(s['smaller_share_of_shared'], 2)} "
        f"with the Erlang clients on the measured node, {f(s['smaller_share_of_shared_joined'], 2)} on the "
        f"node pylmq joined (goal >= 0.33 for both: {'met' if s['share_ok'] else 'NOT met'}).\n" + cpu_table
    )


if __name__ == "__main__":  # python -m bench.mixed: the mixed cells alone, printed as JSON
    import tempfile

    with tempfile.TemporaryDirectory(prefix="pylmq-mixed-") as tmp:
        got, _info = run_mixed(
            "wrk", Path(tmp), rounds=int(sys.argv[1]) if len(sys.argv) > 1 else 1, connections=8, seconds=6,
            log=lambda s: print(s, flush=True),
        )  # fmt: skip
        print(summary_md(got))
        print(json.dumps([c.to_json() for c in got]))
