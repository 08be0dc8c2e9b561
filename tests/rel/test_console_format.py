"""lmq_console terms and their printing in LMQ's lmq-admin layout (no node, no sockets)."""

from __future__ import annotations

from pylmq.core.clock import SystemClock
from pylmq.core.manager import QueueManager
from pylmq.erlang.terms import Atom
from pylmq.metrics import QueueMetrics
from pylmq.node.console import (
    format_stats,
    format_status,
    stats_term,
    status_term,
)
from pylmq.store.memory import MemoryStore

A = Atom


def _props(accum_ms: float, retry: object, timeout: float) -> list[tuple[Atom, object]]:
    return [(A("accum"), accum_ms), (A("retry"), retry), (A("timeout"), timeout)]


def test_status_is_laid_out_like_lmq_console() -> None:
    term = [
        (A("all_nodes"), [A("lmq@a"), A("py@b")]),
        (A("active_nodes"), [A("lmq@a")]),
        (A("queues"), [
            (b"q1", [(A("size"), 3), (A("memory"), 1544), (A("props"), _props(1500.0, 2, 30.0))]),
            (b"q2", [(A("size"), 0), (A("memory"), 0), (A("props"), _props(0.0, A("infinity"), 0.5))]),
        ]),
    ]  # fmt: skip
    assert format_status(term) == (
        "   All nodes: lmq@a, py@b\n"
        "Active nodes: lmq@a\n"
        "\n"
        f"{'q1':<40}       3 messages            1544 bytes\n"
        "  accum: 1.5, retry: 2, timeout: 30.0\n"
        f"{'q2':<40}       0 messages               0 bytes\n"
        "  accum: 0.0, retry: infinity, timeout: 0.5\n"
    )


def test_status_names_stalled_nodes_and_how_long_they_are_silent() -> None:
    manager = QueueManager(MemoryStore(SystemClock()))
    term = status_term(manager, ["lmq@a", "lmq@b", "py@c"], ["lmq@a", "py@c"], mode="cluster", stalled={"lmq@b": 4.26})
    assert (A("stalled_nodes"), [(A("lmq@b"), 4.3)]) in term
    assert format_status(term) == (
        "   All nodes: lmq@a, lmq@b, py@c\nActive nodes: lmq@a, py@c\n     Stalled: lmq@b (silent 4.3 s)\n\n"
    )
    assert (A("stalled_nodes"), []) not in status_term(manager, ["py@c"], ["py@c"], mode="cluster", stalled={})


def test_stats_are_laid_out_like_lmq_console() -> None:
    rates = [(A("count"), 9), (A("one"), 1.234), (A("five"), 0.5), (A("fifteen"), 0.25), (A("day"), 0.001)]
    retention = [(A("n"), 6), (A("min"), 0.001), (A("max"), 2.5), (A("arithmetic_mean"), 1.0), (A("median"), 0.75)]
    term = [(b"q1", [(A("push"), rates), (A("pull"), rates), (A("retention"), retention)])]
    assert format_stats(term) == (
        "q1\n"
        "  push rate: 1min 1.23, 5min 0.50, 15min 0.25, 1day 0.00\n"
        "  pull rate: 1min 1.23, 5min 0.50, 15min 0.25, 1day 0.00\n"
        "  retention time: min 0.001, max 2.500, mean 1.000, median 0.750\n"
    )


async def test_stats_term_lists_idle_queues_with_zeros() -> None:
    manager = QueueManager(MemoryStore(SystemClock()))
    await manager.start()
    await manager.ensure("idle")
    metrics = QueueMetrics()
    metrics.on_push("busy")
    await manager.ensure("busy")
    term = stats_term(manager, metrics)
    assert [name for name, _ in term] == [b"busy", b"idle"]
    idle = dict((k.name, v) for k, v in term[1][1])
    assert dict((k.name, v) for k, v in idle["push"])["count"] == 0
    busy = dict((k.name, v) for k, v in term[0][1])
    assert dict((k.name, v) for k, v in busy["push"])["count"] == 1
    await manager.close()
