"""results.json, results.md (the table, the ratios, the performance targets) and chart.png."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.model import Cell
from pylmq.core.store import DEFAULT_FSYNC

__all__ = ["check_targets", "headlines", "ratios", "server_cpu_md", "table", "write"]

PYLMQ_PREFIX = "pylmq-"
REFERENCES = ("ceiling-nginx", "lmq-external", "rabbitmq", "redis")


def _f(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def table(cells: list[Cell]) -> str:
    head = (
        "| target | proto | workload | param | msgs | msgs/s | p50 ms | p99 ms | p99.9 ms | server RSS MB "
        "| server CPU % | server µs/msg | gen CPU % | generator | note |\n"
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|\n"
    )
    rows = []
    for c in cells:
        note = c.error or ""
        if c.workload == "w5_depth" and c.extra:
            note = (
                f"ack p50 {c.extra.get('ack_p50_ms')} ms, pull p50 {c.extra.get('pull_p50_ms')} ms, "
                f"RSS +{c.extra.get('rss_delta_mb')} MB" + (f"; {c.error}" if c.error else "")
            )
        if c.saturated:
            note = f"**GEN-BOUND** ({c.saturated}; left out of ratios)" + (f"; {note}" if note else "")
        gen = c.generator
        per = c.extra.get("gen_cpu_pct_per_proc")
        if per:
            gen += ": " + "/".join(f"{v:.0f}" for v in per) + "% each"
        rows.append(
            f"| {c.target} | {c.protocol} | {c.workload} | {c.param} | {c.msgs} | {_f(c.msgs_per_s)} "
            f"| {_f(c.p50_ms, 2)} | {_f(c.p99_ms, 2)} | {_f(c.p999_ms, 2)} | {_f(c.server_rss_mb, 0)} "
            f"| {_f(c.server_cpu_pct)} | {_f(c.server_us_per_msg)} | {_f(c.gen_cpu_pct)} | {gen} "
            f"| {note.replace('|', '/')} |"
        )
    return head + "\n".join(rows) + "\n"


def _find(cells: list[Cell], target: str, protocol: str | None, workload: str, param: str) -> Cell | None:
    for c in cells:
        if (
            c.target == target
            and (protocol is None or c.protocol == protocol)
            and c.workload == workload
            and c.param == param
            and c.msgs_per_s
        ):
            return c
    return None


def _rate(cells: list[Cell], target: str, protocol: str | None, workload: str, param: str) -> float | None:
    """The rate of that cell, or None when it was not measured or its generator was saturated
    (then its rate is the generator's: no ratio or performance target is built on it)."""
    c = _find(cells, target, protocol, workload, param)
    return None if c is None or c.saturated else c.msgs_per_s


def ratios(cells: list[Cell]) -> list[dict[str, Any]]:
    """For each pylmq cell: its rate over the ceiling's, each reference's and pylmq-memory's.

    Cells whose generator was saturated are left out on both sides: no row for such a pylmq
    cell, and None (listed in the row's ``excluded``) for such a reference."""
    out = []
    for c in cells:
        if not c.target.startswith(PYLMQ_PREFIX) or not c.msgs_per_s or c.workload == "w5_depth" or c.saturated:
            continue
        row: dict[str, Any] = {"target": c.target, "protocol": c.protocol, "workload": c.workload, "param": c.param}
        for ref in REFERENCES:
            # the ceiling and an LMQ compare over the same protocol; brokers over their own
            proto = c.protocol if ref in ("ceiling-nginx", "lmq-external") else None
            r = _rate(cells, ref, proto, c.workload, c.param)
            row[ref] = None if r is None else round(c.msgs_per_s / r, 3)
        m = _rate(cells, "pylmq-memory", c.protocol, c.workload, c.param)
        row["pylmq-memory"] = None if m is None else round(c.msgs_per_s / m, 3)
        row["excluded"] = [
            ref
            for ref in (*REFERENCES, "pylmq-memory")
            if (x := _find(cells, ref, None if ref in ("rabbitmq", "redis") else c.protocol, c.workload, c.param))
            and x.saturated
        ]
        out.append(row)
    return out


def _ratio_table(rows: list[dict[str, Any]]) -> str:
    cols = (*REFERENCES, "pylmq-memory")
    head = "| target | proto | workload | param | " + " | ".join(f"/{c}" for c in cols) + " |\n"
    head += "|---|---|---|---|" + "---:|" * len(cols) + "\n"
    lines = [
        f"| {r['target']} | {r['protocol']} | {r['workload']} | {r['param']} | "
        + " | ".join(
            ("gen-bound" if c in r.get("excluded", ()) else "-") if r[c] is None else f"{r[c]:.2f}" for c in cols
        )
        + " |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def server_cpu_md(cells: list[Cell]) -> str:
    """Server µs per completed message by target and cell: the efficiency comparison that holds
    whatever drove the server (a saturated generator lowers the rate, not the CPU per message)."""
    measured = [c for c in cells if c.server_us_per_msg is not None and c.workload != "w5_depth"]
    keys = sorted({(c.workload, c.param) for c in measured})
    series = list(dict.fromkeys((c.target, c.protocol) for c in measured))
    if not keys:
        return "No cell measured its server's CPU.\n"
    head = "| target | proto | " + " | ".join(f"{w} {p}" for w, p in keys) + " |\n"
    head += "|---|---|" + "---:|" * len(keys) + "\n"
    lines = []
    for target, proto in series:
        vals = []
        for w, p in keys:
            c = next((x for x in cells if (x.target, x.protocol, x.workload, x.param) == (target, proto, w, p)), None)
            vals.append("-" if c is None or c.server_us_per_msg is None else _f(c.server_us_per_msg))
        lines.append(f"| {target} | {proto} | " + " | ".join(vals) + " |")
    return head + "\n".join(lines) + "\n"


LMQ_W3 = (
    "In workload 3 (w3_steady) C connections only push and C others only pull (t=1) and ack. The "
    "original LMQ's queue process hands a message to a waiting pull only when it is idle: while "
    "pushes keep it busy, pulls are answered 204 (empty) and go round again, so its rate collapses "
    "and its p99 grows with C. That is real LMQ behaviour under separate producers and consumers, "
    "and the ratio there says so; it is not what LMQ does when each connection pushes, pulls and "
    "acks its own messages, which workload 7 (w7_cycle) measures, where LMQ is not pathological."
)


def headlines(cells: list[Cell]) -> list[dict[str, Any]]:
    """pylmq-memory against the Erlang LMQ over HTTP in both shapes of load (w3_steady, w7_cycle),
    with each side's rate, p99 and server µs per message; a generator-bound side gives no ratio."""
    out = []
    for workload in ("w3_steady", "w7_cycle"):
        params = sorted(
            {c.param for c in cells if c.workload == workload and c.target == "lmq-external" and c.msgs_per_s},
            key=lambda p: int(p.partition("=")[2] or 0),
        )
        for param in params:
            py = _find(cells, "pylmq-memory", "http", workload, param)
            erl = _find(cells, "lmq-external", "http", workload, param)
            if py is None or erl is None or not py.msgs_per_s or not erl.msgs_per_s:
                continue
            ok = not py.saturated and not erl.saturated
            out.append(
                {
                    "workload": workload,
                    "param": param,
                    "pylmq": py.msgs_per_s,
                    "lmq": erl.msgs_per_s,
                    "ratio": round(py.msgs_per_s / erl.msgs_per_s, 2) if ok else None,
                    "pylmq_p99_ms": py.p99_ms,
                    "lmq_p99_ms": erl.p99_ms,
                    "pylmq_us_per_msg": py.server_us_per_msg,
                    "lmq_us_per_msg": erl.server_us_per_msg,
                    "excluded": "" if ok else "generator-bound",
                }
            )
    return out


def _headlines_md(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "Not measured (needs pylmq-memory and lmq-external over HTTP in w3_steady or w7_cycle).\n"
    lines = [
        "| workload | param | pylmq-memory msgs/s | Erlang LMQ msgs/s | ratio | p99 ms pylmq / LMQ "
        "| server µs/msg pylmq / LMQ |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in rows:
        ratio = f"{r['ratio']:.1f}×" if r["ratio"] is not None else r["excluded"]
        lines.append(
            f"| {r['workload']} | {r['param']} | {_f(r['pylmq'])} | {_f(r['lmq'])} | {ratio} "
            f"| {_f(r['pylmq_p99_ms'], 1)} / {_f(r['lmq_p99_ms'], 1)} "
            f"| {_f(r['pylmq_us_per_msg'])} / {_f(r['lmq_us_per_msg'])} |"
        )
    return "\n".join(lines) + "\n\n" + LMQ_W3 + "\n"


def check_targets(cells: list[Cell]) -> list[dict[str, Any]]:
    """The performance targets (docs/decisions/performance-targets.md), each met, missed or not
    measured, with its numbers."""
    out: list[dict[str, Any]] = []

    bound = sorted({c.target for c in cells if c.saturated and c.workload == "w3_steady" and c.param == "c=16"})

    def add(name: str, value: float | None, limit: str, ok: bool | None, detail: str) -> None:
        if ok is None and bound and name.startswith("w3"):
            detail += f" (generator-bound, left out: {', '.join(bound)})"
        out.append({"target": name, "value": value, "limit": limit, "met": ok, "detail": detail})

    mem = _rate(cells, "pylmq-memory", "http", "w3_steady", "c=16")
    ceil = _rate(cells, "ceiling-nginx", "http", "w3_steady", "c=16")
    erl = _rate(cells, "lmq-external", "http", "w3_steady", "c=16")
    dur = _rate(cells, f"pylmq-durable-{DEFAULT_FSYNC}", "http", "w3_steady", "c=16")
    v = None if mem is None or ceil is None else mem / ceil
    add("w3 http c=16: memory / ceiling", v, ">= 0.40", None if v is None else v >= 0.40, f"{mem} / {ceil} msg/s")
    v = None if mem is None or erl is None else mem / erl
    add("w3 http c=16: memory / Erlang LMQ", v, ">= 2.0", None if v is None else v >= 2.0, f"{mem} / {erl} msg/s")
    v = None if mem is None or dur is None else dur / mem
    add(f"w3 http c=16: durable default ({DEFAULT_FSYNC}) / memory", v, ">= 0.70", None if v is None else v >= 0.70,
        f"{dur} / {mem} msg/s")  # fmt: skip

    def ack_p50(depth: int) -> float | None:
        for c in cells:
            if c.target == "pylmq-memory" and c.workload == "w5_depth" and c.param == f"depth={depth}" \
                    and c.protocol == "http":  # fmt: skip
                return c.extra.get("ack_p50_ms")
        return None

    lo, hi = ack_p50(1_000), ack_p50(1_000_000)
    v = None if lo is None or hi is None or lo == 0 else hi / lo
    add("w5 http: ack p50 at 1M / at 1k (memory)", v, "<= 1.2", None if v is None else v <= 1.2, f"{hi} / {lo} ms")
    rss = None
    for c in cells:
        if c.target == "pylmq-memory" and c.workload == "w5_depth" and c.param == "depth=1000000":
            rss = c.extra.get("rss_mb")
    add("RSS with 1M queued 100-byte messages (memory)", rss, "<= 300 MB", None if rss is None else rss <= 300,
        "server RSS after pre-fill")  # fmt: skip
    return out


def _targets_md(rows: list[dict[str, Any]]) -> str:
    lines = ["| target | value | limit | met | detail |", "|---|---:|---|---|---|"]
    for r in rows:
        met = "not measured" if r["met"] is None else ("yes" if r["met"] else "**no**")
        v = "-" if r["value"] is None else f"{r['value']:.3f}"
        lines.append(f"| {r['target']} | {v} | {r['limit']} | {met} | {r['detail']} |")
    return "\n".join(lines) + "\n"


def chart(cells: list[Cell], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rated = [c for c in cells if c.msgs_per_s and c.workload != "w5_depth"]
    keys = sorted({(c.workload, c.param) for c in rated})
    series = sorted({(c.target, c.protocol) for c in rated})
    if not keys:
        return
    fig, axes = plt.subplots(2, 1, figsize=(max(10, len(keys) * 1.3), 10))
    width = 0.8 / max(1, len(series))
    for i, (target, proto) in enumerate(series):
        tp = [next((c.msgs_per_s for c in rated if (c.target, c.protocol, c.workload, c.param) ==
                    (target, proto, *k)), 0) or 0 for k in keys]  # fmt: skip
        p99 = [next((c.p99_ms for c in rated if (c.target, c.protocol, c.workload, c.param) ==
                     (target, proto, *k)), 0) or 0 for k in keys]  # fmt: skip
        xs = [x + i * width for x in range(len(keys))]
        axes[0].bar(xs, tp, width, label=f"{target} ({proto})")
        axes[1].bar(xs, p99, width, label=f"{target} ({proto})")
    labels = [f"{w}\n{p}" for w, p in keys]
    for ax, title in ((axes[0], "throughput (msgs/s)"), (axes[1], "p99 latency (ms, log)")):
        ax.set_xticks([x + 0.4 - width / 2 for x in range(len(keys))])
        ax.set_xticklabels(labels, fontsize=7)
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_yscale("log")
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write(out: Path, cells: list[Cell], meta: dict[str, Any]) -> str:
    rows = ratios(cells)
    checks = check_targets(cells)
    heads = headlines(cells)
    bound = [c for c in cells if c.saturated]
    doc = {
        "meta": meta,
        "cells": [c.to_json() for c in cells],
        "ratios": rows,
        "targets": checks,
        "headlines": heads,
    }
    (out / "results.json").write_text(json.dumps(doc, indent=1))
    md = (
        f"# pylmq bench {meta['started']}\n\n"
        f"{meta['cpu_count']} CPUs, Python {meta['python']}, mode {meta['mode']}, "
        f"{meta['seconds']:.0f} s total.\n\n"
        "## Headline: pylmq against the original Erlang LMQ (HTTP)\n\n"
        + _headlines_md(heads)
        + "\n## Results\n\nmsgs/s counts messages completed (pushed for w1, pushed+pulled+acked for the "
        "others); latency is per request (push, pull or ack) as the generator saw it. server µs/msg is the "
        "server's CPU time over the cell per completed message: it does not depend on the generator. "
        f"**GEN-BOUND** marks a cell whose load generator was saturated ({len(bound)} here: see "
        "bench/README.md); its rate is the generator's, so it is left out of the ratios and the targets.\n\n"
        + table(cells)
        + "\n## Server CPU per completed message (µs; the fair efficiency comparison)\n\n"
        + server_cpu_md(cells)
        + "\n## Ratios (pylmq rate / reference rate, same workload and parameter; gen-bound cells left out)\n\n"
        + _ratio_table(rows)
        + "\n## Performance targets\n\n"
        + _targets_md(checks)
        + "\nChart: chart.png\n"
    )
    (out / "results.md").write_text(md)
    try:
        chart(cells, out / "chart.png")
    except Exception as e:  # a missing chart must not lose the measurements
        md += f"\n(chart failed: {e!r})\n"
    return md
