"""The web console over HTTP: its static files and headers, and its JSON routes' shapes and bounds.

The shapes asserted here are the contract the page (pylmq/api/web/assets) is written against.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from pylmq.errors import ClusterUnavailable
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


async def test_overview_lists_queues_with_their_counts(api: Api) -> None:
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
        "node": "nonode@nohost", "runtime": "python", "store": "memory", "mode": None, "mode_detail": None,
        "nodes": [{"name": "nonode@nohost", "runtime": "python", "self": True, "state": "active", "silent_for": None}],
    }  # fmt: skip
    assert doc["rates"] == {"step": 2, "seq": 0, "t": [], "push": [], "pull": []}
    assert doc["totals"] == {"queues": 4, "messages": 5, "in_flight": 1, "push_rate": 0.0, "pull_rate": 0.0}
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
    assert doc == {
        "name": "work",
        "counts": {"size": 1, "visible": 1, "in_flight": 0, "delayed": 0},
        "memory": doc["memory"],
        "props": {"accum": 0, "dead_letter": "work.dead", "retry": 0, "timeout": 5},
        "own_props": {"retry": 0, "timeout": 5, "dead_letter": "work.dead"},
        "dead_letter": "work.dead",
        "dead_letters": 2,
        "virtual_of": [],
        "rates": None,
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
