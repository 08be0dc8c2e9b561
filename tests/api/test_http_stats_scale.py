"""GET /stats over many queues: the same bytes as before, built without holding the loop."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from pylmq.api.http import HttpApi, stats_body, stats_document
from pylmq.api.http_server import HttpServer
from pylmq.metrics import QueueMetrics, QueueStats
from pylmq.node import LMQNode
from tests.suite_store import node_eager

_dumps = json.JSONEncoder(separators=(",", ":")).encode


async def test_stats_body_is_the_document_as_json_dumps_writes_it(node: LMQNode) -> None:
    names = [f"q{i:03d}" for i in range(150)] + ["é/ü", "tab\there", 'quote"d', "日本"]
    for name in names:
        await node.manager.push(name, (((b"content-type", b"text/plain"),), b"x" * len(name)))
    await node.manager.update_props("q007", {"retry": 7, "accum": 0.25}, merge=True)
    await node.manager.pull("q001", 0)
    metrics = QueueMetrics(clock=node.clock)  # not started: no tick changes rates in between
    for name in names[::3]:
        metrics.on_push(name)
    expected = _dumps(stats_document(node.manager, metrics, "n@h")).encode()
    for step in (1, 2, 7, 64, 1000):
        got = await stats_body(node.manager, metrics, "n@h", step=step)
        assert got == expected, (step, got[:300], expected[:300])
    assert json.loads(expected)["queues"]["q007"]["props"] == {"accum": 250, "retry": 7, "timeout": 30}


async def test_stats_body_of_a_node_without_queues(node: LMQNode) -> None:
    got = await stats_body(node.manager, None, "n@h")
    assert got == b'{"active_nodes":["n@h"],"all_nodes":["n@h"],"queues":{}}'
    assert got == _dumps(stats_document(node.manager, None, "n@h")).encode()


async def test_stats_body_yields_to_the_loop_every_step_of_queues(node: LMQNode) -> None:
    for i in range(2000):
        await node.manager.ensure(f"many/{i}")
    rounds = 0
    done = False

    async def count_rounds() -> None:
        nonlocal rounds
        while not done:
            rounds += 1
            await asyncio.sleep(0)

    counter = asyncio.create_task(count_rounds())
    await asyncio.sleep(0)
    rounds = 0
    body = await stats_body(node.manager, None, "n@h", step=50)
    done = True
    await counter
    assert len(json.loads(body)["queues"]) == 2000
    # 2000 / 50 entry batches (and 2000 / 800 sorted runs) each end with a yield.
    assert rounds >= 40, f"the loop ran {rounds} other rounds while /stats was built"


class _Watched:
    """A StatsSource that says when the /stats handler starts asking for meters."""

    def __init__(self, inner: QueueMetrics) -> None:
        self.inner = inner
        self.started = asyncio.Event()
        self.calls = 0

    def stats(self, queue: str) -> QueueStats | None:
        self.calls += 1
        self.started.set()
        return self.inner.stats(queue)


async def test_a_small_request_is_answered_while_stats_of_20k_queues_are_built(node: LMQNode) -> None:
    # Created 50 at a time: on the postgres store each creation is a transaction, 30 s one by one.
    for k in range(0, 20_000, 50):
        await asyncio.gather(*(node.manager.ensure(f"scale/{i}") for i in range(k, k + 50)))
    await node.manager.update_props("small", {"retry": 3}, merge=True)
    watched = _Watched(QueueMetrics(clock=node.clock))
    server = HttpServer(HttpApi(node.manager, metrics=watched, node_name="n@h"), eager=node_eager(node))
    host, port = await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:

            async def get(path: str) -> bytes:
                async with s.get(f"http://{host}:{port}{path}") as r:
                    assert r.status == 200, (path, r.status)
                    return await r.read()

            stats = asyncio.create_task(get("/stats"))
            await watched.started.wait()  # the handler is building the document now
            props = await get("/properties/small")
            entries_built = watched.calls
            body = await stats
    finally:
        await server.close()
    assert json.loads(props)["retry"] == 3
    assert entries_built < 20_001, "GET /properties was answered only once the whole /stats document was built"
    doc = json.loads(body)
    assert len(doc["queues"]) == 20_001 and doc["queues"]["scale/19999"]["size"] == 0
