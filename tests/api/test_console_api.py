"""The web console over HTTP: its static files and headers, and its JSON routes' shapes and bounds.

The shapes asserted here are the contract the page (pylmq/api/web/assets) is written against.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pylmq.core.clock import ManualClock
from pylmq.errors import ClusterUnavailable
from pylmq.metrics import RateHistory
from pylmq.node import LMQNode, NodeOptions
from tests.api.api_helpers import Api, Reply, base_url

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
ROW_KEYS = {
    "name", "size", "visible", "in_flight", "delayed", "memory", "push_rate", "pull_rate", "push_1m", "pull_1m",
    "dead_letter", "dead_letters",
}  # fmt: skip


def assert_console_headers(r: Reply) -> None:
    assert r.headers["Content-Security-Policy"] == CSP
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Referrer-Policy"] == "no-referrer"
    assert r.headers["Cross-Origin-Opener-Policy"] == "same-origin"
    assert r.headers["Cross-Origin-Resource-Policy"] == "same-origin"


async def get(api: Api, path: str, **query: Any) -> Reply:
    return await api.request("GET", path, query or None)


async def overview(api: Api, **query: Any) -> dict[str, Any]:
    r = await get(api, "/console/api/overview", **query)
    assert r.status == 200, r
    assert r.headers["Cache-Control"] == "no-store"
    assert_console_headers(r)
    doc: dict[str, Any] = r.json()
    return doc


# -- static files ------------------------------------------------------------------------------


async def test_console_redirects_to_its_slash(node: LMQNode, session: aiohttp.ClientSession) -> None:
    async with session.get(base_url(node) + "/console", allow_redirects=False) as r:
        assert (r.status, r.headers["Location"]) == (301, "/console/")
        assert r.headers["Content-Security-Policy"] == CSP


async def test_index_is_served_with_the_security_headers(api: Api) -> None:
    r = await get(api, "/console/")
    assert r.status == 200
    assert r.headers["Content-Type"] == "text/html; charset=utf-8"
    assert r.headers["Cache-Control"] == "no-cache"
    assert_console_headers(r)
    assert b'<script type="module" src="app.js"></script>' in r.body


@pytest.mark.parametrize(
    ("name", "ctype"),
    [
        ("app.js", "text/javascript; charset=utf-8"),
        ("api.js", "text/javascript; charset=utf-8"),
        ("dom.js", "text/javascript; charset=utf-8"),
        ("console.css", "text/css; charset=utf-8"),
        ("favicon.svg", "image/svg+xml"),
    ],
)
async def test_assets_have_their_type_and_an_etag_that_gives_304(api: Api, name: str, ctype: str) -> None:
    packaged = (Path(__file__).parents[2] / "pylmq/api/web/assets" / name).read_bytes()
    r = await get(api, f"/console/{name}")
    assert (r.status, r.headers["Content-Type"], r.body) == (200, ctype, packaged)
    etag = r.headers["ETag"]
    again = await api.request("GET", f"/console/{name}", headers={"If-None-Match": etag})
    assert (again.status, again.body, again.headers["ETag"]) == (304, b"", etag)
    assert_console_headers(again)
    other = await api.request("GET", f"/console/{name}", headers={"If-None-Match": '"not-it"'})
    assert other.status == 200


@pytest.mark.parametrize(
    "path",
    ["/console/nope.js", "/console/assets/app.js", "/console/..%2Fhttp.py", "/console/%2E%2E/__init__.py",
     "/console/app.js/", "/console/api/", "/console/api/queue/", "/console/api/queue/a/b", "/console/api/nope"],
)  # fmt: skip
async def test_only_known_names_are_served(api: Api, path: str) -> None:
    r = await get(api, path)
    assert (r.status, r.json()["error"]) == (404, "not_found")
    assert_console_headers(r)


async def test_console_answers_get_only(api: Api) -> None:
    for method, path in (("POST", "/console/"), ("DELETE", "/console/api/overview"), ("PUT", "/console/app.js")):
        r = await api.request(method, path)
        assert (r.status, r.json()["error"], r.headers["Allow"]) == (405, "method_not_allowed", "GET")


async def test_neighbouring_paths_stay_the_apis_404(api: Api) -> None:
    for path in ("/consoles", "/console.js", "/Console/"):
        r = await get(api, path)
        assert (r.status, r.json()["error"]) == (404, "not_found")
        assert "Content-Security-Policy" not in r.headers


async def test_a_node_without_the_console_answers_404(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    n = LMQNode(NodeOptions(http=("127.0.0.1", 0), rpc=None, store="memory", console=False))
    await n.start()
    try:
        assert n.web is None
        r = await get(Api(session, base_url(n)), "/console/")
        assert (r.status, r.json()) == (404, {"error": "not_found", "detail": "no such resource: /console/"})
        assert "Content-Security-Policy" not in r.headers
    finally:
        await n.stop()


# -- JSON --------------------------------------------------------------------------------------


async def test_session_says_auth_is_off_and_what_the_node_supports(api: Api) -> None:
    r = await get(api, "/console/api/session")
    assert (r.status, r.headers["Cache-Control"]) == (200, "no-store")
    assert r.json() == {
        "auth": "off",
        "authorized": True,
        "protect": "mutating",
        "node": "nonode@nohost",
        "features": {"dead_letters": True, "push_options": True, "purge": True},
    }


async def test_overview_lists_queues_with_their_counts(api: Api, node: LMQNode) -> None:
    for _ in range(3):
        assert (await api.push("orders")).status == 200
    await api.push("jobs")
    await api.set_props("work", retry=0, dead_letter="work.dead")
    await api.push("work.dead")
    got = await api.pull("orders")
    assert got.status == 200
    doc = await overview(api)
    assert set(doc) == {"node", "time", "unavailable", "cluster", "totals", "rates", "page"}
    assert (doc["node"], doc["unavailable"]) == ("nonode@nohost", None)
    assert doc["cluster"] == {
        "node": "nonode@nohost", "runtime": "python", "store": node.store.kind, "mode": None, "mode_detail": None,
        "nodes": [{"name": "nonode@nohost", "runtime": "python", "self": True, "state": "active", "silent_for": None}],
    }  # fmt: skip
    assert set(doc["rates"]) == {"step", "seq", "t", "push", "pull"}  # filled: test_overview_rates_*
    assert doc["rates"]["step"] == 2
    totals = doc["totals"]
    assert {k: totals[k] for k in ("queues", "messages", "in_flight")} == {"queues": 4, "messages": 5, "in_flight": 1}
    page = doc["page"]
    assert {k: page[k] for k in ("total", "matched", "offset", "limit")} == {
        "total": 4, "matched": 4, "offset": 0, "limit": 50,
    }  # fmt: skip
    rows = {row["name"]: row for row in page["queues"]}
    assert [row["name"] for row in page["queues"]] == ["jobs", "orders", "work", "work.dead"]
    assert all(set(row) == ROW_KEYS for row in rows.values())
    orders = rows["orders"]
    assert (orders["size"], orders["visible"], orders["in_flight"], orders["delayed"]) == (3, 2, 1, 0)
    assert orders["memory"] > 0
    assert (rows["work"]["dead_letter"], rows["work"]["dead_letters"]) == ("work.dead", 1)
    assert (rows["jobs"]["dead_letter"], rows["jobs"]["dead_letters"]) == (None, None)


async def test_overview_pages_filters_and_sorts(api: Api) -> None:
    for i in range(12):
        for _ in range(i % 4):
            await api.push(f"q-{i:02d}")
        if i % 4 == 0:
            await api.set_props(f"q-{i:02d}", retry=1)  # exists, empty
    await api.set_props("Other", retry=1)
    doc = await overview(api, offset=5, limit=3)
    assert [r["name"] for r in doc["page"]["queues"]] == ["q-04", "q-05", "q-06"]  # "Other" sorts first
    assert (doc["page"]["total"], doc["page"]["matched"]) == (13, 13)
    doc = await overview(api, filter="Q-1", limit=50)  # case-insensitive substring
    assert [r["name"] for r in doc["page"]["queues"]] == ["q-10", "q-11"]
    assert (doc["page"]["total"], doc["page"]["matched"]) == (13, 2)
    doc = await overview(api, filter=".*")  # not a regex
    assert doc["page"]["queues"] == []
    doc = await overview(api, sort="size", order="desc", limit=4)
    assert [(r["name"], r["size"]) for r in doc["page"]["queues"]] == [
        ("q-03", 3),
        ("q-07", 3),
        ("q-11", 3),
        ("q-02", 2),
    ]
    doc = await overview(api, order="desc", limit=2)
    assert [r["name"] for r in doc["page"]["queues"]] == ["q-11", "q-10"]
    doc = await overview(api, offset=13)
    assert (doc["page"]["queues"], doc["page"]["matched"]) == ([], 13)


@pytest.mark.parametrize(
    "query",
    [
        {"limit": "0"}, {"limit": "201"}, {"limit": "x"}, {"limit": ""}, {"limit": "1e2"}, {"offset": "-1"},
        {"offset": "1.5"}, {"offset": "99999999999"}, {"filter": "x" * 256}, {"sort": "memory"}, {"order": "up"},
        {"since": "-3"}, {"since": "abc"},
    ],
)  # fmt: skip
async def test_overview_refuses_bad_parameters(api: Api, query: dict[str, str]) -> None:
    r = await get(api, "/console/api/overview", **query)
    assert (r.status, r.json()["error"]) == (400, "bad_request"), r
    assert next(iter(query)) in r.json()["detail"]
    assert_console_headers(r)


async def test_overview_takes_the_largest_bounds(api: Api) -> None:
    await api.push("x" * 255)
    doc = await overview(api, limit=200, offset=0, filter="x" * 255, since=5)
    assert [r["size"] for r in doc["page"]["queues"]] == [1]


async def test_queue_view(api: Api) -> None:
    await api.set_props("work", retry=0, timeout=5, dead_letter="work.dead")
    await api.push("work")
    await api.push("work.dead")
    await api.push("work.dead")
    r = await get(api, f"/console/api/queue/{api.q('work')}")
    assert (r.status, r.headers["Cache-Control"]) == (200, "no-store")
    doc = r.json()
    meters = doc.pop("meters")
    retention = doc.pop("retention")
    assert set(doc.pop("rates")) == {"step", "seq", "t", "push", "pull"}  # test_queue_view_has_its_rate_history
    assert doc == {
        "name": "work",
        "counts": {"size": 1, "visible": 1, "in_flight": 0, "delayed": 0},
        "memory": doc["memory"],
        "props": {"accum": 0, "dead_letter": "work.dead", "retry": 0, "timeout": 5},
        "own_props": {"retry": 0, "timeout": 5, "dead_letter": "work.dead"},
        "dead_letter": "work.dead",
        "dead_letters": 2,
        "virtual_of": [],
    }
    assert doc["memory"] > 0
    assert meters["push"]["count"] == 1 and set(meters["pull"]) == {"count", "one", "five", "fifteen"}
    assert retention is not None and retention["n"] == 0


async def test_queue_view_of_a_name_that_needs_escaping(api: Api) -> None:
    name = "a/b %?#ü<img>"
    await api.push(name)
    r = await get(api, f"/console/api/queue/{api.q(name)}")
    assert (r.status, r.json()["name"], r.json()["counts"]["size"]) == (200, name, 1)


async def test_an_unknown_queue_is_404_and_not_created(api: Api, node: LMQNode) -> None:
    for name in ("nope", "a%2Fb", "%E9"):
        r = await get(api, f"/console/api/queue/{name}")
        assert r.status in (400, 404), r
        assert r.json()["error"] in ("queue_not_found", "invalid_queue_name")
    assert node.manager.queue_names() == []
    assert (await get(api, "/console/api/queue/nope")).json()["error"] == "queue_not_found"


async def test_an_unavailable_node_shows_why_and_lists_no_queues(api: Api, node: LMQNode) -> None:
    await api.push("orders")
    node.manager.unavailable = ClusterUnavailable("rejoining the cluster")
    try:
        doc = await overview(api)
        assert doc["unavailable"] == "rejoining the cluster"
        assert (doc["page"]["queues"], doc["totals"]["queues"]) == ([], 0)
        r = await get(api, "/console/api/queue/orders")
        assert (r.status, r.json()["error"]) == (503, "cluster_unavailable")
        assert (await get(api, "/console/api/session")).status == 200
    finally:
        node.manager.unavailable = None


@pytest.fixture
async def many(tmp_path: Path, session: aiohttp.ClientSession) -> AsyncIterator[Api]:
    n = LMQNode(NodeOptions(http=("127.0.0.1", 0), rpc=None, store="memory"))
    await n.start()
    try:
        for i in range(2500):
            await n.manager.ensure(f"q-{i:05d}")
        yield Api(session, base_url(n))
    finally:
        await n.stop()


async def test_overview_of_thousands_of_queues_is_one_page(many: Api) -> None:
    doc = await overview(many, offset=2450, limit=200, sort="size")
    assert (doc["page"]["total"], len(doc["page"]["queues"])) == (2500, 50)
    assert doc["page"]["queues"][-1]["name"] == "q-02499"
    doc = await overview(many, filter="q-0099")
    assert [r["name"] for r in doc["page"]["queues"]] == [f"q-0099{i}" for i in range(10)]


# -- rates -------------------------------------------------------------------------------------


async def _manual_history(node: LMQNode) -> tuple[RateHistory, ManualClock]:
    """The console's history swapped for one on a manual clock, started (its first sample)."""
    assert node.web is not None and node.metrics is not None
    clock = ManualClock()
    history = node.web.history = RateHistory(node.metrics, clock)
    await history.sample()
    return history, clock


async def test_overview_rates_are_the_live_rates_of_the_last_sample(api: Api, node: LMQNode) -> None:
    history, clock = await _manual_history(node)
    for _ in range(8):
        await api.push("fast")
    for _ in range(2):
        await api.push("slow")
    for _ in range(4):
        assert (await api.pull("fast")).status == 200
    clock.advance(2.0)
    await history.sample()
    doc = await overview(api)
    assert doc["rates"] == {"step": 2, "seq": 1, "t": [clock.now()], "push": [5.0], "pull": [2.0]}
    assert (doc["totals"]["push_rate"], doc["totals"]["pull_rate"]) == (5.0, 2.0)
    rows = {r["name"]: r for r in doc["page"]["queues"]}
    assert (rows["fast"]["push_rate"], rows["fast"]["pull_rate"]) == (4.0, 2.0)
    assert (rows["slow"]["push_rate"], rows["slow"]["pull_rate"]) == (1.0, 0.0)
    assert rows["fast"]["push_1m"] == node.metrics.stats("fast").push.one  # type: ignore[union-attr]
    # Sorted by the live rate the rows show.
    doc = await overview(api, sort="push", order="desc")
    assert [r["name"] for r in doc["page"]["queues"]] == ["fast", "slow"]
    doc = await overview(api, sort="pull", order="asc")
    assert [r["name"] for r in doc["page"]["queues"]] == ["slow", "fast"]
    # A page that has the points up to seq asks for the newer ones only.
    await api.push("slow")
    clock.advance(2.0)
    await history.sample()
    doc = await overview(api, since=1)
    assert doc["rates"] == {"step": 2, "seq": 2, "t": [clock.now()], "push": [0.5], "pull": [0.0]}


async def test_queue_view_has_its_rate_history(api: Api, node: LMQNode) -> None:
    history, clock = await _manual_history(node)
    await api.push("idle")
    for _ in range(6):
        await api.push("busy")
    clock.advance(2.0)
    await history.sample()
    clock.advance(2.0)
    await history.sample()
    t = [clock.now() - 2.0, clock.now()]
    busy = (await get(api, "/console/api/queue/busy")).json()["rates"]
    assert busy == {"step": 2, "seq": 2, "t": t, "push": [3.0, 0.0], "pull": [0.0, 0.0]}
    assert (await get(api, "/console/api/queue/busy", since=1)).json()["rates"]["push"] == [0.0]
    # Past the cap of queues with a history: the page is told it is not known.
    history.max_tracked = 0
    history._rings.clear()
    await api.push("busy")
    clock.advance(2.0)
    await history.sample()
    assert (await get(api, "/console/api/queue/busy")).json()["rates"] is None


async def test_the_node_samples_rates_while_it_runs(tmp_path: Path, session: aiohttp.ClientSession) -> None:
    n = LMQNode(NodeOptions(http=("127.0.0.1", 0), rpc=None, store="memory", console_rate_step=0.05))
    await n.start()
    try:
        api = Api(session, base_url(n))
        for _ in range(200):
            await api.push("q")
            doc = await overview(api)
            if doc["rates"]["seq"] >= 2 and any(doc["rates"]["push"]):
                break
        assert doc["rates"]["seq"] >= 2
        assert any(p > 0 for p in doc["rates"]["push"])
        assert len(doc["rates"]["t"]) == doc["rates"]["seq"]
        assert n.history is not None
    finally:
        await n.stop()
    assert n.history is None  # stopped with the node
