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

pylmq's own (docs/http-api-extensions.md; LMQ has no such functions)::

    peek(Name, After | undefined, N, Body) -> [Entry] | {error, {Reason, Detail}}
                Entry = [{id, Bin}, {state, Atom}, {retry, N | infinity}, {attempts, N}, {ts, S},
                         {expires, S | undefined}, {priority, P}, {size, Bytes}, {type, Bin},
                         {content_type, Bin | undefined}, {dead, [{origin, Bin}, {failures, N},
                         {last_delivery, S | undefined}, {reason, Bin}]}, {body, Bin}]
                (dead only for a dead letter, body only when asked: as api/peek.py shows them)
    requeue(Dlq, N, To | undefined) -> {ok, Count} | {error, {Reason, Detail}}
    virtual_queues() -> [{Name, [Queue]}]
    virtual_set(Name, [Queue]), virtual_delete(Name) -> ok | {error, {Reason, Detail}}
"""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any

from pylmq.api import peek as _peek
from pylmq.api.peek import MAX_PEEK, raw_page
from pylmq.core.manager import MAX_BATCH, QueueManager
from pylmq.erlang import Node
from pylmq.erlang.terms import Atom, Term
from pylmq.errors import BadRequest, LMQError, NotFound
from pylmq.metrics import HistogramStats, MeterRates, QueueMetrics, QueueStats

__all__ = [
    "MODULE",
    "error_term",
    "format_peek",
    "format_stats",
    "format_status",
    "format_virtual",
    "from_term",
    "register_extensions",
    "stats_term",
    "status_term",
    "to_term",
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


# -- pylmq's extensions: peek, dead letters, requeue, virtual queues ----------------------------


def to_term(value: Any) -> Term:
    """A JSON-like value (what :func:`pylmq.api.peek.peek_entry` gives) as an Erlang term:
    maps become proplists with atom keys, text binaries, None ``undefined``."""
    if value is None:
        return A("undefined")
    if isinstance(value, bool):
        return A("true" if value else "false")
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, dict):
        return [(A(k), to_term(v)) for k, v in value.items()]
    if isinstance(value, list | tuple):
        return [to_term(v) for v in value]
    if isinstance(value, int | float | bytes):
        return value
    raise TypeError(f"no term for {type(value).__name__}")


def from_term(term: Term) -> Any:
    """The inverse of :func:`to_term` for what it makes (binaries come back as text)."""
    if isinstance(term, Atom):
        return None if term.name == "undefined" else {"true": True, "false": False}.get(term.name, term.name)
    if isinstance(term, bytes):
        return term.decode("utf-8", "replace")
    if isinstance(term, list):
        if term and all(isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], Atom) for x in term):
            return {k.name: from_term(v) for k, v in term}
        return [from_term(x) for x in term]
    return term


def error_term(e: LMQError) -> Term:
    """``{error, {Reason, Detail}}``, what lmq-admin prints and exits 1 on."""
    return (A("error"), (A(e.reason), e.detail.encode()))


def _utc(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


SHOWN_BODY = 1000
"""Characters of a body ``lmq-admin peek --body`` prints (then ``...``): a page stays readable."""


def _body_lines(entry: Mapping[str, Any]) -> list[str]:
    parts = entry.get("parts")
    holders: list[Mapping[str, Any]] = parts if isinstance(parts, list) else [entry]
    lines = []
    for i, h in enumerate(holders):
        label = f"part {i + 1}" if parts is not None else "body"
        if "body" in h:
            text, kind = str(h["body"]), ""
        elif "body_base64" in h:
            text, kind = str(h["body_base64"]), " (base64)"
        else:
            continue
        shown = text if len(text) <= SHOWN_BODY else text[:SHOWN_BODY] + "..."
        lines.append(f"  {label}{kind}: {shown!r}"[: SHOWN_BODY + 40])
    return lines


def format_peek(term: Term, queue: str, count: int, *, dead: bool = False) -> str:
    """``lmq-admin peek Q`` (``dead=False``) or ``lmq-admin dead Q``: one line per record, the
    body under it when asked, and how to see the next page when this one is full or was cut."""
    entries = [e for e in from_term(term) if isinstance(e, dict)] if isinstance(term, list) else []
    lines: list[str] = []
    if dead:
        lines.append(f"{'ID':<36}  {'ORIGIN':<24} {'FAILURES':>8}  {'REASON':<8} {'LAST DELIVERY (UTC)':<23}  SIZE")
    else:
        lines.append(
            f"{'ID':<36}  {'STATE':<10} {'RETRY':>8} {'ATTEMPTS':>8} {'PRIO':>4}  "
            f"{'DUE / DEADLINE (UTC)':<23}  {'EXPIRES (UTC)':<23}  SIZE"
        )
    shown = 0
    for e in entries:
        d = e.get("dead")
        if dead:
            if not isinstance(d, dict):
                continue  # pushed to this queue directly: not a dead letter
            lines.append(
                f"{e['id']:<36}  {d.get('origin', ''):<24} {d.get('failures', 0):>8}  {d.get('reason', ''):<8} "
                f"{_utc(d.get('last_delivery')):<23}  {e.get('size', 0)}"
            )
        else:
            lines.append(
                f"{e['id']:<36}  {e.get('state', ''):<10} {e.get('retry', ''):>8} {e.get('attempts', 0):>8} "
                f"{e.get('priority', 0):>4}  {_utc(e.get('ts')):<23}  {_utc(e.get('expires')):<23}  {e.get('size', 0)}"
            )
            if isinstance(d, dict):
                lines.append(f"  dead letter from {d.get('origin')}: {d.get('failures')} failures, {d.get('reason')}")
        lines.extend(_body_lines(e))
        shown += 1
    if not entries:
        lines.append(f"({queue} holds no messages here)")
    # A full page, or one the node cut when the bodies shown reached its byte budget.
    if entries and (len(entries) >= count or sum(e.get("size", 0) for e in entries) >= _peek.MAX_PEEK_BYTES):
        command = "dead" if dead else "peek"
        lines.append(f"(more may follow: lmq-admin {command} {queue} --after {entries[-1]['id']})")
    return "".join(line + "\n" for line in lines)


def format_virtual(term: Term) -> str:
    """``lmq-admin virtual``: one line per virtual queue, ``name -> a, b``."""
    lines = []
    for name, queues in term if isinstance(term, list) else []:
        lines.append(f"{_text(name)} -> {', '.join(_text(q) for q in queues)}")
    return "".join(line + "\n" for line in lines) or "(no virtual queues)\n"


async def _refused(op: Awaitable[Term]) -> Term:
    try:
        return await op
    except LMQError as e:
        return error_term(e)


def _optional_text(term: Term) -> str | None:
    return None if term == A("undefined") or term is None else _text(term)


def register_extensions(node: Node, manager: QueueManager) -> None:
    """peek, requeue and the virtual queue functions, for ``lmq-admin`` (terms in the module
    docstring); a refusal answers ``{error, {Reason, Detail}}``."""

    async def peek(name: Term, after: Term, count: Term, body: Term = False) -> Term:
        async def run() -> Term:
            n = count if isinstance(count, int) and not isinstance(count, bool) else 0
            if not 1 <= n <= MAX_PEEK:
                raise BadRequest(f"n must be a whole number of messages from 1 to {MAX_PEEK}, got {count!r}")
            records = await manager.peek(_text(name), _optional_text(after), n)
            return to_term(raw_page(records, body=body is True or body == A("true"), raw=False))

        return await _refused(run())

    async def requeue(name: Term, count: Term, to: Term) -> Term:
        async def run() -> Term:
            n = count if isinstance(count, int) and not isinstance(count, bool) else 0
            if not 1 <= n <= MAX_BATCH:
                raise BadRequest(f"n must be a whole number of messages from 1 to {MAX_BATCH}, got {count!r}")
            return (A("ok"), await manager.requeue(_text(name), n, _optional_text(to)))

        return await _refused(run())

    def virtual_queues() -> Term:
        return [(k.encode(), [q.encode() for q in v]) for k, v in sorted(manager.virtual_queues().items())]

    async def virtual_set(name: Term, queues: Term) -> Term:
        async def run() -> Term:
            await manager.set_virtual(_text(name), [_text(q) for q in queues] if isinstance(queues, list) else [])
            return A("ok")

        return await _refused(run())

    async def virtual_delete(name: Term) -> Term:
        async def run() -> Term:
            if not await manager.delete_virtual(_text(name)):
                raise NotFound(f"no virtual queue named {_text(name)!r}")
            return A("ok")

        return await _refused(run())

    for fn in (peek, requeue, virtual_queues, virtual_set, virtual_delete):
        node.register_function(MODULE, fn.__name__, fn)
