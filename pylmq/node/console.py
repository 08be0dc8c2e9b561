"""``lmq_console``: what a running node answers to the admin tools, and how they print it.

The node registers these functions for Erlang distribution (``rpc:call(Node, lmq_console, F,
Args)``), so they are reachable exactly like LMQ's: by a node that knows the cookie. They
return terms, never print: ``lmq-admin`` formats the terms in the layout of LMQ's
``lmq_console`` (which prints on the caller's terminal through the rpc group leader).

Terms (shaped after LMQ's ``lmq:status/0`` and ``lmq:stats/0``, queue names as binaries)::

    status() -> [{all_nodes, [Node]}, {active_nodes, [Node]},
                 {queues, [{Name, [{size, N}, {memory, Bytes},
                                   {props, [{accum, Ms}, {retry, N | infinity}, {timeout, S}]}]}]}]
    stats()  -> [{Name, [{push, Rates}, {pull, Rates}, {retention, Stats}]}]
                Rates = [{count, C}, {one, R}, {five, R}, {fifteen, R}, {day, R}]  (per second)
                Stats = [{n, N}, {min, S}, {max, S}, {arithmetic_mean, S}, {median, S}] (seconds)
    join(Node), leave(), standalone() -> ok | {error, {Reason, Detail}}  (docs/mixed-clusters.md)
    stop() -> ok, then the node stops gracefully (also as init:stop(), what nodetool sends)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pylmq.core.manager import QueueManager
from pylmq.erlang.terms import Atom, Term
from pylmq.metrics import HistogramStats, MeterRates, QueueMetrics, QueueStats

__all__ = [
    "MODULE",
    "format_stats",
    "format_status",
    "stats_term",
    "status_term",
]

MODULE = "lmq_console"

A = Atom
_NO_RATES = MeterRates(0, 0.0, 0.0, 0.0, 0.0)
_IDLE = QueueStats(_NO_RATES, _NO_RATES, HistogramStats())


def status_term(
    manager: QueueManager,
    all_nodes: Iterable[str],
    active_nodes: Iterable[str],
    *,
    mode: str | None = None,
    mode_detail: str = "",
    stalled: Mapping[str, float] | None = None,
) -> Term:
    """``mode`` (a node that can cluster): ``local``, ``cluster``, ``standalone`` or ``rejoining``;
    ``mode_detail``: why it is standalone or rejoining; ``stalled``: connected members that send
    nothing -> seconds since heard from."""
    queues: list[Term] = []
    for q in manager.status():
        p = q["props"]
        retry: Term = A("infinity") if p.retry is None else p.retry
        # LMQ keeps accum in milliseconds and timeout in seconds.
        props = [(A("accum"), p.accum * 1000.0), (A("retry"), retry), (A("timeout"), float(p.timeout))]
        info = [(A("size"), q["size"]), (A("memory"), q["memory"]), (A("props"), props)]
        queues.append((q["name"].encode(), info))
    term: list[Term] = [
        (A("all_nodes"), [A(n) for n in all_nodes]),
        (A("active_nodes"), [A(n) for n in active_nodes]),
        (A("queues"), queues),
    ]
    if mode is not None:
        term.insert(2, (A("mode"), A(mode)))
        if mode_detail:
            term.insert(3, (A("mode_detail"), mode_detail.encode()))
    if stalled:
        term.insert(2, (A("stalled_nodes"), [(A(n), round(s, 1)) for n, s in sorted(stalled.items())]))
    return term


def _rates_term(m: MeterRates) -> Term:
    return [(A("count"), m.count), (A("one"), m.one), (A("five"), m.five), (A("fifteen"), m.fifteen), (A("day"), m.day)]


def _queue_stats_term(s: QueueStats) -> Term:
    r = s.retention
    retention = [(A("n"), r.n), (A("min"), r.min), (A("max"), r.max), (A("arithmetic_mean"), r.mean)]
    retention.append((A("median"), r.median))
    return [(A("push"), _rates_term(s.push)), (A("pull"), _rates_term(s.pull)), (A("retention"), retention)]


def stats_term(manager: QueueManager, metrics: QueueMetrics | None) -> Term:
    """Every queue, as LMQ (whose meters exist from the queue's start): zeros where nothing
    was pushed or pulled since this node started."""
    out: list[Term] = []
    for name in sorted(manager.queue_names()):
        s = metrics.stats(name) if metrics is not None else None
        out.append((name.encode(), _queue_stats_term(s or _IDLE)))
    return out


# -- printing, on the admin side ------------------------------------------------------------------


def _proplist(term: Term) -> dict[str, Term]:
    if not isinstance(term, list):
        raise ValueError(f"expected a proplist, got {term!r:.200}")
    return {k.name: v for k, v in (x for x in term if isinstance(x, tuple) and len(x) == 2) if isinstance(k, Atom)}


def text(term: Term) -> str:
    """An atom, binary or Erlang string as text."""
    return _text(term)


def _text(term: Term) -> str:
    if isinstance(term, Atom):
        return term.name
    if isinstance(term, bytes):
        return term.decode("utf-8", "replace")
    if isinstance(term, list):
        return "".join(chr(c) for c in term if isinstance(c, int))
    return str(term)


def _erl_float(x: Term) -> str:
    """A float as Erlang's ``~p`` prints it (``30.0``, ``1.5``, ``1.0e16``)."""
    text = repr(float(x))
    if "e" in text:
        mantissa, exp = text.split("e")
        text = f"{mantissa if '.' in mantissa else mantissa + '.0'}e{int(exp)}"
    return text


def format_status(term: Term) -> str:
    """``lmq-admin status``, laid out as LMQ's ``lmq_console:status/1`` prints it."""
    status = _proplist(term)
    lines = [
        f"   All nodes: {', '.join(_text(n) for n in status.get('all_nodes', []))}",
        f"Active nodes: {', '.join(_text(n) for n in status.get('active_nodes', []))}",
        "",
    ]
    mode, detail = _text(status.get("mode", "")), _text(status.get("mode_detail", ""))
    if mode == "standalone":
        lines.insert(2, f"Standalone: {detail or 'every Erlang node of the cluster is gone'}; serving alone")
    elif mode == "rejoining":
        lines.insert(2, f"Rejoining: {detail}")
        lines.insert(3, "  queue operations answer 503 until it has rejoined; lmq-admin standalone serves alone")
    stalled = ", ".join(f"{_text(n)} (silent {s:g} s)" for n, s in status.get("stalled_nodes", []))
    if stalled:
        lines.insert(2, f"     Stalled: {stalled}")
    for name, info in status.get("queues", []):
        q = _proplist(info)
        props = _proplist(q.get("props", []))
        retry = props.get("retry")
        lines.append(f"{_text(name):<40} {q.get('size', 0):7d} messages {q.get('memory', 0):15d} bytes")
        lines.append(
            f"  accum: {_erl_float(props.get('accum', 0) / 1000)}, "
            f"retry: {retry if isinstance(retry, int) else _text(retry)}, "
            f"timeout: {_erl_float(props.get('timeout', 0))}"
        )
    return "".join(line + "\n" for line in lines)


def format_stats(term: Term) -> str:
    """``lmq-admin stats``, laid out as LMQ's ``lmq_console:stats/1`` prints it."""
    lines: list[str] = []
    for name, info in term:
        q = _proplist(info)
        lines.append(_text(name))
        for label in ("push", "pull"):
            r = _proplist(q.get(label, []))
            lines.append(
                f"  {label} rate: 1min {r.get('one', 0.0):.2f}, 5min {r.get('five', 0.0):.2f}, "
                f"15min {r.get('fifteen', 0.0):.2f}, 1day {r.get('day', 0.0):.2f}"
            )
        t = _proplist(q.get("retention", []))
        lines.append(
            f"  retention time: min {t.get('min', 0.0):.3f}, max {t.get('max', 0.0):.3f}, "
            f"mean {t.get('arithmetic_mean', 0.0):.3f}, median {t.get('median', 0.0):.3f}"
        )
    return "".join(line + "\n" for line in lines)
