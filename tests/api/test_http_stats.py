"""GET /stats: nodes, and per queue size, memory, nodes, props and push/pull/retention meters."""

from __future__ import annotations

import aiohttp

from pylmq.api.http import HttpApi
from pylmq.api.http_server import HttpServer
from pylmq.node import LMQNode
from tests.api.api_helpers import Api
from tests.suite_store import node_eager


async def test_stats_lists_the_node_and_each_queue(api: Api) -> None:
    await api.set_props("s/a", retry=4)
    await api.push("s/b", b"12345")
    r = await api.request("GET", "/stats")
    assert (r.status, r.headers["content-type"]) == (200, "application/json"), r
    doc = r.json()
    assert doc["active_nodes"] == doc["all_nodes"] == ["nonode@nohost"], doc
    assert sorted(doc["queues"]) == ["s/a", "s/b"]
    a, b = doc["queues"]["s/a"], doc["queues"]["s/b"]
    assert (a["size"], a["props"], a["nodes"]) == (0, {"accum": 0, "retry": 4, "timeout": 30}, ["nonode@nohost"])
    assert b["size"] == 1 and b["memory"] >= 5, b


async def test_stats_count_pushes_and_pulls(api: Api) -> None:
    for _ in range(3):
        await api.push("counted")
    await api.pull("counted")
    await api.pull("counted")
    stats = (await api.request("GET", "/stats")).json()["queues"]["counted"]["stats"]
    assert (stats["push"]["count"], stats["pull"]["count"]) == (3, 2), stats
    for meter in ("push", "pull"):
        assert set(stats[meter]) >= {"count", "one", "five", "fifteen", "day"}, stats[meter]


async def test_stats_show_retention_figures(api: Api) -> None:
    for _ in range(5):
        await api.push("kept")
    for _ in range(5):
        await api.pull("kept")
    retention = (await api.request("GET", "/stats")).json()["queues"]["kept"]["stats"]["retention"]
    assert retention["n"] == 5, retention
    assert 0 <= retention["min"] <= retention["median"] <= retention["max"], retention
    assert set(retention["percentiles"]) == {"50", "75", "90", "95", "99", "99.9"}, retention


async def test_stats_of_a_queue_without_traffic_show_zero_meters(api: Api) -> None:
    await api.set_props("quiet")
    stats = (await api.request("GET", "/stats")).json()["queues"]["quiet"]["stats"]
    assert (stats["push"]["count"], stats["pull"]["count"], stats["retention"]["n"]) == (0, 0, 0), stats


async def test_stats_without_metrics_still_give_size_memory_and_props(node: LMQNode) -> None:
    server = HttpServer(HttpApi(node.manager, node_name="lmq@here"), eager=node_eager(node))
    host, port = await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"http://{host}:{port}/messages/bare", data=b"x") as r:
                assert r.status == 200
            async with s.get(f"http://{host}:{port}/stats") as r:
                doc = await r.json()
    finally:
        await server.close()
    assert doc["all_nodes"] == ["lmq@here"]
    assert doc["queues"]["bare"]["size"] == 1
    assert "stats" not in doc["queues"]["bare"], doc
