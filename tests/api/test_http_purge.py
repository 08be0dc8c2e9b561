"""``POST /purge/:name`` (pylmq's extension, docs/http-api-extensions.md#purge): every message
goes, in flight or not; the queue stays, with its own props; the answer counts what went."""

from __future__ import annotations

import asyncio

from pylmq.node import LMQNode
from tests.api.api_helpers import Api, StartNode


async def test_purge_drops_waiting_and_in_flight_messages_and_counts_them(api: Api) -> None:
    for body in (b"a", b"b", b"c"):
        assert (await api.push("jobs", body)).status == 200
    taken = await api.pull("jobs")
    assert taken.status == 200
    r = await api.request("POST", "/purge/jobs")
    assert (r.status, r.json(), r.headers["Content-Type"]) == (200, {"purged": 3}, "application/json")
    assert (await api.pull("jobs")).status == 204
    # The delivery left with its queue's contents: its ack finds nothing.
    assert (await api.ack("jobs", taken.id)).status == 404
    stats = (await api.request("GET", "/stats")).json()
    assert stats["queues"]["jobs"]["size"] == 0, "the queue itself stays"


async def test_purge_keeps_the_queues_own_props(api: Api) -> None:
    await api.set_props("kept", retry=5, timeout=7)
    await api.push("kept", b"x")
    assert (await api.request("POST", "/purge/kept")).json() == {"purged": 1}
    props = (await api.props("kept")).json()
    assert (props["retry"], props["timeout"]) == (5, 7)


async def test_purge_of_an_empty_queue_is_zero(api: Api) -> None:
    await api.set_props("empty")
    assert (await api.request("POST", f"/purge/{api.q('empty')}")).json() == {"purged": 0}


async def test_purge_of_an_unknown_queue_is_404_and_creates_none(api: Api) -> None:
    r = await api.request("POST", "/purge/never")
    assert (r.status, r.json()["error"]) == (404, "queue_not_found")
    assert "never" not in (await api.request("GET", "/stats")).json()["queues"]


async def test_purge_of_a_virtual_queue_is_400_naming_its_queues(api: Api) -> None:
    r = await api.request("PUT", "/virtual/both", data=b'{"queues": ["left", "right"]}')
    assert r.status == 204, r
    r = await api.request("POST", "/purge/both")
    assert (r.status, r.json()["error"]) == (400, "bad_request")
    assert "left, right" in r.json()["detail"]


async def test_purge_names_a_queue_with_a_slash_by_its_encoded_segment(api: Api) -> None:
    await api.push("a/b", b"x")
    assert (await api.request("POST", "/purge/a%2Fb")).json() == {"purged": 1}
    assert (await api.pull("a/b")).status == 204


async def test_purge_is_a_post(api: Api) -> None:
    r = await api.request("GET", "/purge/q")
    assert (r.status, r.headers["Allow"]) == (405, "POST")
    r = await api.request("POST", "/purge/")
    assert r.status == 404, "an empty name names no queue"


async def test_purge_ends_a_waiting_pull_empty(api: Api, node: LMQNode) -> None:
    await api.set_props("idle")
    waiting = asyncio.create_task(api.pull("idle", t=10))
    for _ in range(500):  # until the pull waits on the queue (bounded)
        q = node.manager.get("idle")
        if q is not None and q.has_waiters():
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the pull never waited")
    assert (await api.request("POST", "/purge/idle")).status == 200
    assert (await asyncio.wait_for(waiting, 5)).status == 204
    await api.push("idle", b"after")
    assert (await api.pull("idle")).body == b"after", "the purged queue takes pushes again"


async def test_a_purge_is_durable(start: StartNode) -> None:
    node, api = await start()
    await api.set_props("d", retry=4)
    for _ in range(3):
        await api.push("d", b"x")
    assert (await api.request("POST", "/purge/d")).json() == {"purged": 3}
    await api.push("d", b"kept")
    await node.stop()
    _, api = await start()
    assert (await api.props("d")).json()["retry"] == 4
    assert (await api.pull("d")).body == b"kept"
    assert (await api.pull("d")).status == 204
