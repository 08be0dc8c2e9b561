"""The console's overview of a node of 10,000 queues: pages in every order, the names sorted once
per change of the queue set (not per request), and the loop kept free while the work is done."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from pylmq.api.web.views import YIELD_EVERY
from pylmq.node import LMQNode, NodeOptions
from tests.api.api_helpers import Api, base_url

QUEUES = 10_000


@pytest.fixture
async def big(session: aiohttp.ClientSession) -> AsyncIterator[tuple[LMQNode, Api]]:
    n = LMQNode(NodeOptions(http=("127.0.0.1", 0), rpc=None, store="memory"))
    await n.start()
    try:
        for i in range(QUEUES):
            await n.manager.ensure(f"q-{i:05d}")
        api = Api(session, base_url(n))
        for i, depth in ((7, 3), (4242, 5), (9999, 1)):
            for _ in range(depth):
                assert (await api.push(f"q-{i:05d}")).status == 200
        yield n, api
    finally:
        await n.stop()


async def overview(api: Api, **query: Any) -> tuple[dict[str, Any], int]:
    r = await api.request("GET", "/console/api/overview", query or None)
    assert r.status == 200, r
    doc: dict[str, Any] = r.json()
    return doc, len(r.body)


def names(doc: dict[str, Any]) -> list[str]:
    return [row["name"] for row in doc["page"]["queues"]]


async def test_pages_of_10000_queues_in_every_order(big: tuple[LMQNode, Api]) -> None:
    _, api = big
    doc, size = await overview(api, limit=200)
    assert (doc["page"]["total"], doc["page"]["matched"], doc["totals"]["queues"]) == (QUEUES, QUEUES, QUEUES)
    assert doc["totals"]["messages"] == 9
    assert names(doc) == [f"q-{i:05d}" for i in range(200)]
    assert size <= 300_000
    doc, _ = await overview(api, offset=50, limit=3, order="desc")
    assert names(doc) == ["q-09949", "q-09948", "q-09947"]
    doc, _ = await overview(api, offset=9998, limit=5, order="desc")
    assert names(doc) == ["q-00001", "q-00000"]
    doc, _ = await overview(api, offset=QUEUES, limit=5)
    assert (names(doc), doc["page"]["matched"]) == ([], QUEUES)
    doc, _ = await overview(api, sort="size", order="desc", limit=4)
    assert names(doc) == ["q-04242", "q-00007", "q-09999", "q-00000"]  # ties by name
    doc, _ = await overview(api, sort="size", order="asc", offset=9997, limit=5)
    assert names(doc) == ["q-09999", "q-00007", "q-04242"]
    doc, _ = await overview(api, sort="in_flight", order="desc", limit=2)
    assert names(doc) == ["q-00000", "q-00001"]
    doc, _ = await overview(api, filter="Q-0424", sort="size", order="desc")
    assert doc["page"]["matched"] == 10
    assert names(doc)[0] == "q-04242"


async def test_names_are_sorted_once_per_change_of_the_queue_set(big: tuple[LMQNode, Api]) -> None:
    node, api = big
    assert node.web is not None
    index = node.web.index
    for offset in range(0, 20 * 50, 50):
        await overview(api, offset=offset)
    await overview(api, filter="q-01")
    assert index.rebuilds == 1
    # A new queue is seen at once, also by a filter asked before.
    await api.push("q-01-new")
    doc, _ = await overview(api, filter="q-01-")
    assert names(doc) == ["q-01-new"]
    assert (doc["page"]["total"], index.rebuilds) == (QUEUES + 1, 2)
    await node.manager.delete("q-01-new")
    doc, _ = await overview(api, filter="q-01-")
    assert (names(doc), doc["page"]["total"], index.rebuilds) == ([], QUEUES, 3)


async def test_an_order_by_counts_is_reused_for_its_ttl_only(big: tuple[LMQNode, Api]) -> None:
    node, api = big
    assert node.web is not None
    doc, _ = await overview(api, sort="size", order="desc", limit=1)
    assert names(doc) == ["q-04242"]
    for _ in range(10):
        await api.push("q-00008")
    node.web.index.ttl = 0.0  # the cached order is stale at once
    doc, _ = await overview(api, sort="size", order="desc", limit=1)
    assert names(doc) == ["q-00008"]
    assert doc["totals"]["messages"] == 19


async def test_overview_work_yields_to_the_loop(big: tuple[LMQNode, Api]) -> None:
    """Structural: a cold overview (sort of every name, totals, an order by size) lets the loop
    run between slices of YIELD_EVERY queues; and, with a generous bound, no request holds the
    loop for long (a probe task measures the longest gap between its wake-ups)."""
    node, api = big
    assert node.web is not None
    passes = 0
    longest = 0.0
    done = False

    async def probe() -> None:
        nonlocal passes, longest
        last = time.perf_counter()
        while not done:
            await asyncio.sleep(0)
            now = time.perf_counter()
            passes, longest = passes + 1, max(longest, now - last)
            last = now

    task = asyncio.create_task(probe())
    try:
        await asyncio.sleep(0)
        node.web.index.ttl = 0.0  # every request redoes its totals and its order
        before = passes
        await node.manager.ensure("cold")  # the names are sorted again by the next request
        await overview(api, sort="size", order="desc", filter="q-")
        # names sort (runs + merge), totals, filter, order: each over 10,000 names in slices
        assert passes - before >= 4 * QUEUES // YIELD_EVERY
        for i in range(20):
            await overview(api, sort="size", order="desc", offset=i * 50)
    finally:
        done = True
        await task
    print(f"longest loop gap {longest * 1000:.1f} ms")
    assert longest < 0.5, f"the loop was held {longest * 1000:.0f} ms"
