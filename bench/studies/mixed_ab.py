"""``python -m bench.studies.mixed_ab BASE``: this tree's pylmq against another tree's, in one mixed cluster.

On this 2-core host the mixed targets move by 20-30% between runs minutes apart (the host's
phase), far more than most changes to pylmq's CPU cost: two separate bench runs cannot tell a
10% change. Here two pylmq nodes join the same two Erlang LMQ nodes (the reference kit): one
runs this tree, the other the tree at ``BASE`` (a checkout of another commit, e.g. made with
``git worktree add /tmp/base <commit>``; its code is put first on the node's PYTHONPATH). wrk's
per-connection cycle (push, pull, ack; ``mixed-pylmq``'s workload) goes to one node and then to
the other, in alternating order, for ``--rounds`` rounds. Each pair of cells ran minutes, not
runs, apart, on the same Erlang nodes.

For each cell: cycles/s, p99, and the CPU milliseconds per cycle of the node measured and of
each Erlang node (from /proc). The medians and the pairs are printed; the pylmq CPU per cycle
is the figure a change to pylmq's own code moves, the rate also depends on the Erlang side.

    python -m bench.studies.mixed_ab /tmp/base [--rounds 6] [--seconds 10] [--connections 8]
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.mixed import _cycles, _joined, mixed_cluster
from bench.procs import Proc, group_usage, wait_port
from bench.refkit import HOST, free_port


def _cpu(pids: list[int | None]) -> list[float]:
    return [group_usage([p]).cpu_s if p is not None else 0.0 for p in pids]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base", type=Path, help="a checkout of pylmq (the directory holding its pylmq package)")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--connections", type=int, default=8)
    args = ap.parse_args()
    base = args.base.resolve()
    if not (base / "pylmq" / "__init__.py").is_file():
        print(f"mixed_ab: {base} holds no pylmq package", file=sys.stderr)
        return 2
    wrk = shutil.which("wrk")
    if wrk is None:
        print("mixed_ab: wrk is not installed (make deps installs it)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mixed-ab-") as tmp, mixed_cluster(Path(tmp)) as m:
        d = Path(tmp) / "base"
        d.mkdir()
        (d / "app.config").write_text(f"[{{lmq, [{{join, '{m.erl[0].name}'}}]}}].\n")
        http, rpc = free_port(), free_port()
        argv = [
            sys.executable, "-m", "pylmq", "--app-config", str(d / "app.config"), "--name",
            f"pybase_{secrets.token_hex(3)}@{HOST}", "--cookie", m.erl[0].cookie, "--http", f"{HOST}:{http}",
            "--rpc", f"{HOST}:{rpc}", "--qs", "off", "--sqs", "off", "--store", "memory", "--log-level", "warning",
            "--statsd", "off", "--stats-interval", "0",
        ]  # fmt: skip
        env = dict(os.environ, PYTHONPATH=str(base))
        node = Proc(argv, name="pylmq-base", log=d / "server.log", cwd=d, env=env)
        try:
            if not wait_port(http, time.monotonic() + 30, node.popen):
                print(f"mixed_ab: the base node did not start: {node.tail()[-400:]}", file=sys.stderr)
                return 1
            base_url = f"http://{HOST}:{http}"
            deadline = time.monotonic() + 60
            while not _joined(base_url, m.erl[1].url):
                if time.monotonic() > deadline or not node.alive():
                    print(f"mixed_ab: the base node did not join: {node.tail()[-400:]}", file=sys.stderr)
                    return 1
                time.sleep(0.5)
            sides = {"this": (m.py_url, m.py.popen.pid), "base": (base_url, node.popen.pid)}
            for name, (url, _) in sides.items():
                _cycles(wrk, url, f"ab-warm-{name}", args.connections, 3)
            cells: dict[str, list[tuple[float, float, float]]] = {k: [] for k in sides}
            print("round side cycles/s p99_ms pylmq_ms erlang_joined_ms erlang_measured_ms", flush=True)
            for r in range(args.rounds):
                for name in list(sides) if r % 2 == 0 else list(reversed(sides)):
                    url, pid = sides[name]
                    pids = [pid, m.erl[0].pid(), m.erl[1].pid()]
                    before = _cpu(pids)
                    run = _cycles(wrk, url, f"ab{r}-{name}", args.connections, args.seconds)
                    after = _cpu(pids)
                    cycles = int(run.stats.get("acked", 0))
                    if cycles == 0:
                        print(f"mixed_ab: no cycle done by {name} in round {r}", file=sys.stderr)
                        return 1
                    ms = [(b - a) / cycles * 1000 for a, b in zip(before, after, strict=True)]
                    rate = cycles / float(run.stats["span"])
                    cells[name].append((rate, ms[0], ms[1] + ms[2]))
                    p99 = float(run.stats["p99_us"]) / 1000
                    print(f"{r} {name} {rate:.0f} {p99:.1f} {ms[0]:.3f} {ms[1]:.3f} {ms[2]:.3f}", flush=True)
            print("\nmedians: side cycles/s pylmq_ms erlang_ms")
            for name, rows in cells.items():
                med = [statistics.median(row[k] for row in rows) for k in range(3)]
                print(f"{name} {med[0]:.0f} {med[1]:.3f} {med[2]:.3f}")
            lower = sum(t[1] < b[1] for t, b in zip(cells["this"], cells["base"], strict=True))
            print(f"pairs where this tree's pylmq spent less CPU per cycle: {lower} of {args.rounds}")
        finally:
            node.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
