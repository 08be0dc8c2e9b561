"""``python -m bench``: measure pylmq against its references in one run.

    python -m bench                  # full run (under 15 minutes)
    python -m bench --quick          # smoke run (under 3 minutes): fewer targets, small counts
    python -m bench --targets memory,ceiling --workloads w3_steady
    python -m bench --lmq-url http://127.0.0.1:9980 --lmq-rpc 127.0.0.1:18800   # + an Erlang LMQ
    make bench LMQ_URL=http://127.0.0.1:9980 LMQ_RPC=127.0.0.1:18800 LMQ_PID=<beam pid>   # full run + it
    python -m bench --mixed          # only the mixed-cluster targets (real LMQ nodes from the kit)
    make bench MIXED=1               # the same; BENCH_ARGS="--mixed --targets memory" adds targets
    python -m bench --spark          # only the Spark data source (bench/spark.py, about 2 minutes)
    python -m bench --qs             # only queue_server's protocol beside HTTP and RPC (bench/qs.py)
    python -m bench --sqs            # only Amazon SQS's API: pylmq against moto's server (bench/sqs.py)
    python -m bench --pg             # only 1, 2, 3 pylmq nodes on one PostgreSQL vs plain SKIP LOCKED (bench/pg.py)
    make bench SPARK=1               # the same; --spark-rows N sets the rows per step

The external LMQ (target ``lmq``) is spoken to over RPC in old-spec msgpack (no str8/bin), the
only one the original LMQ parses (--no-lmq-rpc-oldspec for a server that parses the current
spec); pylmq targets always get the current spec. --lmq-pid reports its RSS and CPU.

Writes bench/results/<timestamp>/results.json, results.md and chart.png, and prints the table.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import platform
import signal
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from bench.install import ensure
from bench.mixed import run_mixed
from bench.mixed import summary as mixed_summary
from bench.mixed import summary_md as mixed_summary_md
from bench.model import FULL, LIGHT_DEPTHS, LIGHT_WORKLOADS, QUICK, Cell, Skip
from bench.report import write
from bench.runner import WORKLOADS, Ctx, run_target
from bench.targets import TARGETS, Env, Target, _deb_version

ALL_WORKLOADS = (*WORKLOADS, "w5_depth")
FULL_TARGETS = ("ceiling", "memory", "durable-interval", "redis", "rabbitmq", "lmq", "durable-always", "durable-none")
# Measured with fewer workloads in a full run (LIGHT_WORKLOADS), unless named with --workloads.
LIGHT_TARGETS = ("durable-always", "durable-none")
QUICK_TARGETS = ("ceiling", "memory", "durable-interval", "redis", "rabbitmq", "lmq")
RESULTS = Path(__file__).with_name("results")
PYLMQ = ("memory", "durable-always", "durable-interval", "durable-none")


def _parser() -> argparse.ArgumentParser:
    head, _, rest = __doc__.partition("\n\n")
    p = argparse.ArgumentParser(
        prog="python -m bench", description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="smoke run: small counts, fewest targets, < 3 min")
    p.add_argument("--targets", help=f"comma list of {', '.join(TARGETS)}")
    p.add_argument("--workloads", help=f"comma list of {', '.join(ALL_WORKLOADS)}")
    p.add_argument("--lmq-url", help="an external LMQ's HTTP API, e.g. the original Erlang LMQ")
    p.add_argument("--lmq-rpc", help="that LMQ's MessagePack-RPC address HOST:PORT")
    p.add_argument(
        "--lmq-rpc-oldspec",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="pack RPC requests to that LMQ as old-spec msgpack, strings and bytes as raw without str8/bin "
        "(default on: the original LMQ's msgpack-erlang 0.2.3 closes the connection on a str8)",
    )
    p.add_argument("--lmq-pid", type=int, help="OS pid of that LMQ's server (beam.smp): report its RSS and CPU")
    p.add_argument(
        "--mixed",
        action="store_true",
        help="the mixed-cluster targets (bench/mixed.py): two real LMQ nodes from the reference kit and a "
        "pylmq node joined; alone unless --targets is given too",
    )
    p.add_argument(
        "--spark",
        action="store_true",
        help="the Spark target (bench/spark.py): rows/s through the lmq data source into a local node, "
        "Parquet in the same session as the yardstick; alone unless --targets is given too",
    )
    p.add_argument(
        "--qs",
        action="store_true",
        help="the produce->consume->confirm cycle over queue_server's protocol (UDP, TCP) beside HTTP and RPC "
        "on one node, c=1/8/64 (bench/qs.py); alone unless --targets is given too",
    )
    p.add_argument("--qs-seconds", type=float, default=5.0, help="seconds per cell of the --qs section")
    p.add_argument(
        "--sqs",
        action="store_true",
        help="Amazon SQS's API: send->receive->delete and its batch of 10, c=1/16/64, on pylmq's SQS endpoint "
        "and on moto's server (bench/sqs.py); alone unless --targets is given too",
    )
    p.add_argument("--sqs-seconds", type=float, default=4.0, help="seconds per cell of the --sqs section")
    p.add_argument("--sqs-stores", default="memory,durable", help="the pylmq stores of the --sqs section (comma list)")
    p.add_argument(
        "--pg",
        action="store_true",
        help="the push->pull->ack cycle on 1, 2 and 3 pylmq nodes sharing one PostgreSQL (fsync on) against "
        "the plain SKIP LOCKED queue with the same driver (bench/pg.py); alone unless --targets is given too",
    )
    p.add_argument("--pg-seconds", type=float, default=6.0, help="seconds per cell of the --pg section")
    p.add_argument("--pg-clients", type=int, default=16, help="clients of every cell of the --pg section")
    p.add_argument("--pg-nodes", default="1,2,3", help="the node counts of the --pg section (comma list)")
    p.add_argument("--qs-store", choices=("memory", "durable"), default="memory", help="the --qs node's store")
    p.add_argument("--spark-rows", type=int, default=200_000, help="rows per step of the Spark target")
    p.add_argument("--mixed-rounds", type=int, default=3, help="rounds of the mixed targets (medians; default 3)")
    p.add_argument("--mixed-connections", type=int, default=8, help="connections per side (default 8)")
    p.add_argument("--no-install", action="store_true", help="never apt-get install missing servers")
    p.add_argument("--budget", type=float, help="time budget of the whole run in seconds")
    p.add_argument("--cell-seconds", type=float, help="time bound of one measured cell")
    p.add_argument("--out", type=Path, help="results directory (default bench/results/<timestamp>)")
    return p


def _versions() -> dict[str, Any]:
    libs = {}
    for name in (
        "pylmq",
        "aiohttp",
        "msgpack",
        "uvloop",
        "multidict",
        "yarl",
        "aio-pika",
        "hiredis",
        "matplotlib",
        "moto",
    ):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            libs[name] = importlib.metadata.version(name)
    try:
        import msgpack

        libs["msgpack_c_extension"] = msgpack.Packer.__module__ != "msgpack.fallback"
    except ImportError:
        pass
    debs = {p: _deb_version(p) for p in ("wrk", "nginx-light", "redis-server", "rabbitmq-server", "erlang-base")}
    return {"python_packages": libs, "debian_packages": debs}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    budget = QUICK if args.quick else FULL
    if args.cell_seconds:
        budget = replace(budget, cell_seconds=args.cell_seconds)
    total = args.budget or (150.0 if args.quick else 800.0)
    names = args.targets.split(",") if args.targets else list(QUICK_TARGETS if args.quick else FULL_TARGETS)
    if (args.mixed or args.spark or args.qs or args.sqs or args.pg) and not args.targets:
        names = []
    workloads = args.workloads.split(",") if args.workloads else list(ALL_WORKLOADS)
    for n in names:
        if n not in TARGETS:
            print(f"bench: unknown target {n!r}; known: {', '.join(TARGETS)}", file=sys.stderr)
            return 2
    for w in workloads:
        if w not in ALL_WORKLOADS:
            print(f"bench: unknown workload {w!r}; known: {', '.join(ALL_WORKLOADS)}", file=sys.stderr)
            return 2
    # The quick run installs only wrk and nginx; the references run if already there.
    allow_install = not args.no_install
    started = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or RESULTS / started
    out.mkdir(parents=True, exist_ok=True)

    def log(msg: str) -> None:
        print(msg, flush=True)

    # SIGTERM ends the run like Ctrl-C: servers are stopped in the finally below.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with contextlib.suppress(ValueError, OSError):
        import resource

        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    t0 = time.monotonic()
    deadline = t0 + total
    # The Spark target alone needs no wrk (nothing to install for it).
    wrk = ensure("wrk", allow_install=allow_install) if names or args.mixed else None
    cells: list[Cell] = []
    targets_meta: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="pylmq-bench-") as scratch:
        env = Env(
            Path(scratch), allow_install and not args.quick, allow_install, args.lmq_url, args.lmq_rpc,
            args.lmq_rpc_oldspec, args.lmq_pid,
        )  # fmt: skip
        for name in names:
            target: Target = TARGETS[name](env)
            if time.monotonic() > deadline:
                targets_meta[target.name] = {"skipped": "the run's time budget was spent"}
                continue
            log(f"== {target.name}")
            try:
                target.start()
            except Skip as e:
                log(f"  skipped: {e}")
                targets_meta[target.name] = {"skipped": str(e)}
                continue
            try:
                targets_meta[target.name] = target.info()
                todo, b = workloads, budget
                if name in LIGHT_TARGETS and not args.quick and not args.workloads:
                    todo = [w for w in workloads if w in LIGHT_WORKLOADS]
                    b = replace(budget, depths=LIGHT_DEPTHS)
                ctx = Ctx(target, b, wrk, log, deadline)
                cells += run_target(ctx, todo, deadline)
            except Exception as e:  # one target's failure must not lose the others' results
                log(f"  {target.name} failed: {e!r}")
                targets_meta[target.name] = {"failed": repr(e)[:500]}
            finally:
                target.stop()
        if args.mixed:
            log("== mixed cluster")
            try:
                got, info = run_mixed(
                    wrk, Path(scratch), rounds=args.mixed_rounds, connections=args.mixed_connections,
                    seconds=budget.cell_seconds, log=log,
                )  # fmt: skip
                cells += got
                targets_meta["mixed"] = {**info, "summary": mixed_summary(got)}
            except Skip as e:
                log(f"  skipped: {e}")
                targets_meta["mixed"] = {"skipped": str(e)}
    qs_md = ""
    if args.qs:
        log("== queue_server's protocol")
        from bench.qs import run_qs
        from bench.qs import summary_md as qs_summary_md

        with tempfile.TemporaryDirectory(prefix="pylmq-bench-qs-") as scratch:
            try:
                got, info = run_qs(
                    Env(Path(scratch), False, False), seconds=args.qs_seconds, log=log, store=args.qs_store
                )
                cells += got
                targets_meta["qs"] = info
                qs_md = qs_summary_md(got)
            except Skip as e:
                log(f"  skipped: {e}")
                targets_meta["qs"] = {"skipped": str(e)}
    sqs_md = ""
    if args.sqs:
        log("== Amazon SQS's API")
        from bench.sqs import run_sqs
        from bench.sqs import summary_md as sqs_summary_md

        stores = tuple(s for s in args.sqs_stores.split(",") if s)
        if any(s not in ("memory", "durable") for s in stores):
            print(f"bench: --sqs-stores takes memory and durable, not {args.sqs_stores!r}", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="pylmq-bench-sqs-") as scratch:
            got, info = run_sqs(Env(Path(scratch), False, False), seconds=args.sqs_seconds, log=log, stores=stores)
            cells += got
            targets_meta["sqs"] = info
            sqs_md = sqs_summary_md(got)
    pg_md = ""
    if args.pg:
        log("== pylmq nodes sharing one PostgreSQL")
        from bench.pg import run_pg
        from bench.pg import summary_md as pg_summary_md

        try:
            counts = tuple(int(n) for n in args.pg_nodes.split(",") if n)
        except ValueError:
            counts = ()
        if not counts or any(n < 1 for n in counts):
            print(f"bench: --pg-nodes takes a comma list of node counts, not {args.pg_nodes!r}", file=sys.stderr)
            return 2
        with tempfile.TemporaryDirectory(prefix="pylmq-bench-pg-") as scratch:
            try:
                got, info = run_pg(
                    Path(scratch), seconds=args.pg_seconds, log=log, clients=args.pg_clients, nodes=counts
                )
                cells += got
                targets_meta["pg"] = info
                pg_md = pg_summary_md(got)
            except Skip as e:
                log(f"  skipped: {e}")
                targets_meta["pg"] = {"skipped": str(e)}
    spark_md = ""
    if args.spark:
        log("== spark")
        try:
            from bench.spark import run_spark, summary_md

            with tempfile.TemporaryDirectory(prefix="pylmq-bench-spark-") as scratch:
                result = run_spark(Path(scratch), rows=args.spark_rows, log=log)
            targets_meta["spark"] = result
            spark_md = summary_md(result)
        except ImportError as e:
            log(f"  skipped: {e} (the spark extra is not installed)")
            targets_meta["spark"] = {"skipped": str(e)}
    meta = {
        "started": started,
        "mode": "quick" if args.quick else "full",
        "seconds": time.monotonic() - t0,
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "budget": asdict(budget),
        "targets": targets_meta,
        "load_generator": {
            "http": "wrk + bench/lua/lmq.lua, one thread per connection",
            "other": "bench/pygen.py (uvloop), Target.gen_procs processes (2; 4 for Redis and RabbitMQ)",
        },
        **_versions(),
    }
    md = write(out, cells, meta)
    if any(c.workload == "cycle" for c in cells):
        mixed_md = mixed_summary_md(cells)
        md += "\n" + mixed_md
        with open(out / "results.md", "a") as f:
            f.write("\n" + mixed_md)
    if qs_md:
        md += "\n" + qs_md
        with open(out / "results.md", "a") as f:
            f.write("\n" + qs_md)
    if sqs_md:
        md += "\n" + sqs_md
        with open(out / "results.md", "a") as f:
            f.write("\n" + sqs_md)
    if pg_md:
        md += "\n" + pg_md
        with open(out / "results.md", "a") as f:
            f.write("\n" + pg_md)
    if spark_md:
        md += "\n" + spark_md
        with open(out / "results.md", "a") as f:
            f.write("\n" + spark_md)
    print(md)
    print(f"results: {out}/results.md, {out}/results.json, chart {out}/chart.png")
    # A smoke run asserts no speed, but a pylmq that answers nothing at all is a failure.
    if not any(c.msgs and c.target.startswith("pylmq-") for c in cells) and any(n in names for n in PYLMQ):
        print("bench: no pylmq cell measured anything", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
