"""The documents of the console's JSON routes, computed from the queue manager and the meters.

Shapes (the page's contract, which the JS modules in assets/ read): :func:`session_doc`, :func:`overview_doc`
(a page of queues, totals, node rates, the cluster) and :func:`queue_doc` (one queue). Reading
never creates a queue. Rates come from the node's :class:`~pylmq.metrics.RateHistory`. The
sorted names, filtered lists, orders by a count and totals are kept between requests by a
:class:`NameIndex`; work over every queue yields to the loop every :data:`YIELD_EVERY` queues,
so that a node of many queues keeps serving.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pylmq.api.http import Authenticator, StatsSource
from pylmq.core.manager import QueueManager
from pylmq.core.props import export_props
from pylmq.errors import BadRequest, QueueNotFound, Unauthorized
from pylmq.metrics import QueueStats, RateHistory

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_FILTER",
    "MAX_LIMIT",
    "SORTS",
    "ConsoleState",
    "NameIndex",
    "OverviewParams",
    "cluster_doc",
    "overview_doc",
    "overview_params",
    "queue_doc",
    "session_doc",
    "since_param",
]

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
MAX_FILTER = 255
MAX_OFFSET = 10**9
SORTS = ("name", "size", "in_flight", "push", "pull")
RATE_STEP = 2
"""Seconds between two points of the rate history (the node keeps 15 minutes of them)."""
YIELD_EVERY = 1000
CACHE_SECONDS = 2.0
"""How long an order by a count or rate, and the totals, are reused (the page polls every 2 s)."""
MAX_CACHED = 16


class ConsoleState(Protocol):
    """What the views read of :class:`pylmq.api.web.WebConsole`."""

    manager: QueueManager
    metrics: StatsSource | None
    node_name: str
    auth: Authenticator | None
    protect: str
    cluster_view: Callable[[], dict[str, Any]] | None
    history: RateHistory | None
    index: NameIndex


@dataclass(frozen=True, slots=True)
class OverviewParams:
    offset: int = 0
    limit: int = DEFAULT_LIMIT
    filter: str = ""
    sort: str = "name"
    order: str = "asc"
    since: int | None = None


def _whole(query: Mapping[str, str], key: str, low: int, high: int, default: int) -> int:
    value = query.get(key)
    if value is None:
        return default
    if not (value.isascii() and value.isdigit() and len(value) <= 10) or not low <= int(value) <= high:
        raise BadRequest(f"{key} must be a whole number from {low} to {high}, got {value!r:.40}")
    return int(value)


def since_param(query: Mapping[str, str]) -> int | None:
    """``since``: the sequence number of the last rate point the page has (None: send all)."""
    if "since" not in query:
        return None
    return _whole(query, "since", 0, 2**53, 0)


def overview_params(query: Mapping[str, str]) -> OverviewParams:
    """The query of ``/console/api/overview``, checked: 400 ``bad_request`` naming the bad one."""
    flt = query.get("filter", "")
    if len(flt) > MAX_FILTER:
        raise BadRequest(f"filter holds at most {MAX_FILTER} characters, got {len(flt)}")
    sort, order = query.get("sort", "name"), query.get("order", "asc")
    if sort not in SORTS:
        raise BadRequest(f"sort must be one of {', '.join(SORTS)}, got {sort!r:.40}")
    if order not in ("asc", "desc"):
        raise BadRequest(f"order must be asc or desc, got {order!r:.40}")
    return OverviewParams(
        offset=_whole(query, "offset", 0, MAX_OFFSET, 0),
        limit=_whole(query, "limit", 1, MAX_LIMIT, DEFAULT_LIMIT),
        filter=flt,
        sort=sort,
        order=order,
        since=since_param(query),
    )


def _features(manager: QueueManager) -> dict[str, bool]:
    # Serving an Erlang cluster's Mnesia tables, the node refuses dead letters and push options
    # (their records have no room for them): the page hides what would only fail.
    extended = manager.store.kind != "mnesia"
    return {"dead_letters": extended, "push_options": extended, "purge": True}


def session_doc(console: ConsoleState, headers: Mapping[bytes, bytes]) -> dict[str, Any]:
    authorized = True
    if console.auth is not None:
        try:
            console.auth.check(headers)
        except Unauthorized:
            authorized = False
    return {
        "auth": "off" if console.auth is None else "on",
        "authorized": authorized,
        "protect": console.protect,
        "node": console.node_name,
        "features": _features(console.manager),
    }


def cluster_doc(console: ConsoleState) -> dict[str, Any]:
    """The node's cluster, from the node's view when it has one, else this node alone."""
    if console.cluster_view is not None:
        return console.cluster_view()
    me = {"name": console.node_name, "runtime": "python", "self": True, "state": "active", "silent_for": None}
    return {
        "node": console.node_name,
        "runtime": "python",
        "store": console.manager.store.kind,
        "mode": None,
        "mode_detail": None,
        "nodes": [me],
    }


def _stats(console: ConsoleState, name: str) -> QueueStats | None:
    return None if console.metrics is None else console.metrics.stats(name)


def _live(console: ConsoleState, name: str, push_1m: float, pull_1m: float) -> tuple[float, float]:
    """The queue's push and pull rate over the last sample (the one-minute meter without a
    rate history: a node whose console has none still shows a rate)."""
    return (push_1m, pull_1m) if console.history is None else console.history.rate(name)


def _rates(console: ConsoleState, since: int | None) -> dict[str, Any]:
    if console.history is None:
        return {"step": RATE_STEP, "seq": 0, "t": [], "push": [], "pull": []}
    return console.history.node(since)


def _row(console: ConsoleState, name: str) -> dict[str, Any] | None:
    manager = console.manager
    q = manager.get(name)
    if q is None:
        return None  # deleted since its name was taken
    store = manager.store
    counts = store.counts(name)
    stats = _stats(console, name)
    push_1m = stats.push.one if stats else 0.0
    pull_1m = stats.pull.one if stats else 0.0
    push_rate, pull_rate = _live(console, name, push_1m, pull_1m)
    dead_letter = q.props.dead_letter
    dead_letters = store.size(dead_letter) if dead_letter is not None and manager.get(dead_letter) else None
    return {
        "name": name,
        "size": store.size(name),
        "visible": counts.visible,
        "in_flight": counts.in_flight,
        "delayed": counts.delayed,
        "memory": store.memory(name),
        "push_rate": push_rate,
        "pull_rate": pull_rate,
        "push_1m": push_1m,
        "pull_1m": pull_1m,
        "dead_letter": dead_letter,
        "dead_letters": dead_letters,
    }


def _sort_key(console: ConsoleState, sort: str) -> Callable[[str], float]:
    store = console.manager.store
    if sort == "size":
        return lambda n: float(store.size(n))
    if sort == "in_flight":
        return lambda n: float(store.counts(n).in_flight)
    side = 0 if sort == "push" else 1
    history = console.history
    if history is not None:  # the live rates, as the rows show them
        return lambda n: history.rate(n)[side]

    def rate(n: str) -> float:
        s = _stats(console, n)
        return 0.0 if s is None else (s.push.one, s.pull.one)[side]

    return rate


async def _sliced_sort(items: list[Any], key: Callable[[Any], Any] | None = None) -> list[Any]:
    """``sorted(items, key=key)`` with a pass of the loop every :data:`YIELD_EVERY` items:
    runs of that size are sorted one by one, then merged a slice at a time."""
    if len(items) <= YIELD_EVERY:
        return sorted(items, key=key)
    runs: list[list[Any]] = []
    for i in range(0, len(items), YIELD_EVERY):
        runs.append(sorted(items[i : i + YIELD_EVERY], key=key))
        await asyncio.sleep(0)
    out: list[Any] = []
    merged = heapq.merge(*runs, key=key)
    while chunk := list(itertools.islice(merged, YIELD_EVERY)):
        out += chunk
        await asyncio.sleep(0)
    return out


class NameIndex:
    """The queue names as the overview pages them, kept between requests.

    The sorted names are rebuilt only when the manager's :attr:`names_version` moves (a queue
    made or deleted), in slices; a filtered list lasts as long (names do not change under a
    version); an order by a count or a rate lasts :attr:`ttl` seconds, as the counts move, and
    at most :data:`MAX_CACHED` such lists are kept. The totals last :attr:`ttl` seconds too. So
    a page of a node of 10,000 queues costs its rows, not a sort of every name, and when work
    over every queue is due, it yields to the loop every :data:`YIELD_EVERY` queues.
    """

    def __init__(self, ttl: float = CACHE_SECONDS) -> None:
        self.ttl = ttl
        self.rebuilds = 0  # how often every name was sorted (for tests and curiosity)
        self._version: tuple[int, int] | None = None
        self._sorted: list[str] = []
        self._lock = asyncio.Lock()  # one rebuild at a time; the others wait for it
        self._lists: OrderedDict[tuple[str, str, str], tuple[float, list[str]]] = OrderedDict()
        self._totals: tuple[float, dict[str, Any]] | None = None

    async def names(self, manager: QueueManager) -> list[str]:
        """Every queue name, sorted (the same list while no queue is made or deleted)."""
        async with self._lock:
            version = manager.names_version
            if version != self._version:
                names = await _sliced_sort(manager.names_unsorted())
                self._sorted, self._version, self.rebuilds = names, version, self.rebuilds + 1
                self._lists.clear()
                self._totals = None
            return self._sorted

    async def matching(self, console: ConsoleState, params: OverviewParams) -> list[str]:
        """The names the filter keeps in the order asked for (name: ascending; a reader of a
        descending page counts from the end)."""
        names = await self.names(console.manager)
        version = self._version
        now = console.manager.clock.now()
        order = "" if params.sort == "name" else params.order  # a name order is read both ways
        key = (params.filter.casefold(), params.sort, order)
        got = self._lists.get(key)
        if got is not None and (params.sort == "name" or now - got[0] < self.ttl):
            self._lists.move_to_end(key)
            return got[1]
        if params.filter:
            needle = key[0]
            kept: list[str] = []
            for i in range(0, len(names), YIELD_EVERY):
                kept += [n for n in names[i : i + YIELD_EVERY] if needle in n.casefold()]
                await asyncio.sleep(0)
            names = kept
        if params.sort != "name":
            value = _sort_key(console, params.sort)
            sign = -1.0 if params.order == "desc" else 1.0
            keyed: list[tuple[float, str]] = []
            for i in range(0, len(names), YIELD_EVERY):
                keyed += [(sign * value(n), n) for n in names[i : i + YIELD_EVERY]]
                await asyncio.sleep(0)
            # Already in name order: a stable sort by the value alone keeps ties by name.
            keyed = await _sliced_sort(keyed, key=_first)
            names = [n for _, n in keyed]
        # Kept unless made from names replaced meanwhile.
        if (params.filter or params.sort != "name") and self._version == version:
            self._lists[key] = (now, names)
            while len(self._lists) > MAX_CACHED:
                self._lists.popitem(last=False)
        return names

    async def totals(self, console: ConsoleState) -> dict[str, Any]:
        names = await self.names(console.manager)
        now = console.manager.clock.now()
        if self._totals is None or now - self._totals[0] >= self.ttl:
            totals = await _totals(console, names)
            self._totals = (now, totals)
        totals = dict(self._totals[1])
        if console.history is not None:  # the node's rate is always the last sample's
            totals["push_rate"], totals["pull_rate"] = console.history.node_rate()
        return totals


def _first(kn: tuple[float, str]) -> float:
    return kn[0]


async def _totals(console: ConsoleState, names: list[str]) -> dict[str, Any]:
    store = console.manager.store
    messages = in_flight = 0
    push = pull = 0.0
    history = console.history
    for i in range(0, len(names), YIELD_EVERY):
        for n in names[i : i + YIELD_EVERY]:
            messages += store.size(n)
            in_flight += store.counts(n).in_flight
            if history is None and (s := _stats(console, n)) is not None:
                push += s.push.one
                pull += s.pull.one
        await asyncio.sleep(0)
    return {"queues": len(names), "messages": messages, "in_flight": in_flight, "push_rate": push, "pull_rate": pull}


def _page(names: list[str], params: OverviewParams, reverse: bool) -> list[str]:
    if not reverse:
        return names[params.offset : params.offset + params.limit]
    end = len(names) - params.offset
    return names[max(0, end - params.limit) : max(0, end)][::-1]


async def overview_doc(console: ConsoleState, params: OverviewParams) -> dict[str, Any]:
    manager = console.manager
    unavailable = manager.unavailable
    rates = _rates(console, params.since)
    doc: dict[str, Any] = {
        "node": console.node_name,
        "time": manager.clock.now(),
        "unavailable": None if unavailable is None else unavailable.detail,
        "cluster": cluster_doc(console),
        "rates": rates,
    }
    if unavailable is not None:  # the queues cannot be read: say why, list none
        doc["totals"] = {"queues": 0, "messages": 0, "in_flight": 0, "push_rate": 0.0, "pull_rate": 0.0}
        doc["page"] = {"total": 0, "matched": 0, "offset": params.offset, "limit": params.limit, "queues": []}
        return doc
    index = console.index
    doc["totals"] = await index.totals(console)
    total = manager.queue_count()
    matched = await index.matching(console, params)
    shown = _page(matched, params, reverse=params.sort == "name" and params.order == "desc")
    rows = [_row(console, n) for n in shown]
    doc["page"] = {
        "total": total,
        "matched": len(matched),
        "offset": params.offset,
        "limit": params.limit,
        "queues": [r for r in rows if r is not None],
    }
    return doc


def queue_doc(console: ConsoleState, name: str, since: int | None) -> dict[str, Any]:
    """One queue; :class:`QueueNotFound` (404) for a name that is no queue (never created)."""
    manager = console.manager
    manager.check_available()
    q = manager.get(name)
    if q is None:
        raise QueueNotFound(f"no queue named {name!r}")
    store = manager.store
    counts = store.counts(name)
    own = store.queue_props(name)
    stats = _stats(console, name)
    dead_letter = q.props.dead_letter
    meters = {
        side: {"count": m.count, "one": m.one, "five": m.five, "fifteen": m.fifteen}
        for side, m in (("push", stats.push), ("pull", stats.pull))
    } if stats else {
        side: {"count": 0, "one": 0.0, "five": 0.0, "fifteen": 0.0} for side in ("push", "pull")
    }  # fmt: skip
    retention = stats.to_json()["retention"] if stats else None
    return {
        "name": name,
        "counts": {
            "size": store.size(name),
            "visible": counts.visible,
            "in_flight": counts.in_flight,
            "delayed": counts.delayed,
        },
        "memory": store.memory(name),
        "props": export_props(q.props),
        "own_props": None if own is None else export_props(own),
        "dead_letter": dead_letter,
        "dead_letters": store.size(dead_letter) if dead_letter is not None and manager.get(dead_letter) else None,
        "virtual_of": sorted(v for v, members in manager.virtual_queues().items() if name in members),
        "meters": meters,
        "retention": retention,
        # None: the queue moved in the window, but more did than the history keeps rings for.
        "rates": _rates(console, since) if console.history is None else console.history.queue(name, since),
    }
