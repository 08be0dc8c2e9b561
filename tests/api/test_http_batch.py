"""pylmq's batch extension of the HTTP API: POST /batch/:name (push many), GET /batch/:name (pull many)."""

from __future__ import annotations

import asyncio

import msgpack
import pytest

from pylmq.core.manager import MAX_BATCH
from pylmq.node import LMQNode
from pylmq.store.durable import DurableStore
from tests.api.api_helpers import Api, Reply, StartNode

# api, node and start are tests/api/conftest.py's fixtures (pytest injects them by name).

MSGPACK = {"Content-Type": "application/x-msgpack"}


async def push_many(api: Api, name: str, entries: list[object]) -> Reply:
    body = msgpack.packb(entries, use_bin_type=True)
    return await api.request("POST", f"/batch/{api.q(name)}", data=body, headers=MSGPACK)


async def pull_many(api: Api, name: str, **query: object) -> list[dict[str, object]]:
    r = await api.request("GET", f"/batch/{api.q(name)}", query)
    assert (r.status, r.headers["content-type"]) == (200, "application/x-msgpack"), r
    got: list[dict[str, object]] = msgpack.unpackb(r.body, raw=False)
    return got


async def test_push_many_stores_each_message_in_order_with_its_content_type(api: Api) -> None:
    r = await push_many(api, "b", [b"one", ["text/plain", b"two"], [None, b"three"]])
    assert (r.status, r.json()) == (200, {"pushed": 3}), r
    seen = []
    for _ in range(3):
        m = await api.pull("b")
        seen.append((m.body, m.headers["content-type"]))
        await api.ack("b", m.id)
    octets = "application/octet-stream"
    assert seen == [(b"one", octets), (b"two", "text/plain"), (b"three", octets)]


async def test_pull_many_takes_up_to_n_in_order_and_leaves_the_rest(api: Api) -> None:
    await push_many(api, "b", [f"m{i}".encode() for i in range(10)])
    got = await pull_many(api, "b", n=4, t=0)
    assert [m["body"] for m in got] == [b"m0", b"m1", b"m2", b"m3"]
    assert {(m["queue"], m["type"], m["retry"], m["content_type"]) for m in got} == {
        ("b", "normal", 2, "application/octet-stream")
    }
    rest = await pull_many(api, "b", n=100, t=0)
    assert [m["body"] for m in rest] == [f"m{i}".encode() for i in range(4, 10)]


async def test_pull_many_says_how_many_messages_the_queue_holds(api: Api) -> None:
    await push_many(api, "s", [b"a", b"b", b"c"])
    r = await api.request("GET", "/batch/s", {"n": 1, "t": 0})
    assert r.headers["x-lmq-queue-size"] == "3", "waiting and in-processing messages count"


async def test_pulled_messages_are_in_processing_and_acked_by_their_ids(api: Api, node: LMQNode) -> None:
    await push_many(api, "b", [b"x", b"y"])
    got = await pull_many(api, "b", n=10, t=0)
    assert (await api.pull("b")).status == 204, "a message pulled in a batch must not be delivered again"
    for m in got:
        assert (await api.ack("b", str(m["id"]))).status == 204
    assert node.store.size("b") == 0


async def test_pull_many_on_an_empty_queue_answers_an_empty_array(api: Api) -> None:
    assert await pull_many(api, "none", n=5, t=0) == []


async def test_pull_many_waits_up_to_t_for_the_first_message(api: Api) -> None:
    async def later() -> None:
        await asyncio.sleep(0.2)
        await push_many(api, "w", [b"late"])

    pusher = asyncio.create_task(later())
    got = await pull_many(api, "w", n=5, t=5)
    await pusher
    assert [m["body"] for m in got] == [b"late"]


async def test_pull_many_gives_a_compound_message_as_parts(api: Api) -> None:
    await api.set_props("acc", accum=0.05)
    await api.push("acc", b"a", "text/plain")
    await api.push("acc", b"b")
    [m] = await pull_many(api, "acc", n=5, t=2)
    assert (m["type"], m["parts"]) == ("compound", [["text/plain", b"a"], ["application/octet-stream", b"b"]])
    assert "body" not in m


async def test_push_many_refuses_bad_bodies_and_pushes_nothing(api: Api, node: LMQNode) -> None:
    cases: list[tuple[bytes, dict[str, str], str]] = [
        (msgpack.packb([b"a"]), {"Content-Type": "application/json"}, "application/x-msgpack"),
        (b"\xc1", MSGPACK, "MessagePack"),
        (msgpack.packb({"a": 1}), MSGPACK, "array of messages"),
        (msgpack.packb([b"ok", 5]), MSGPACK, "message 1 is neither"),
        (msgpack.packb([[1, b"x"]]), MSGPACK, "message 0 is neither"),
        (msgpack.packb([b"x"] * (MAX_BATCH + 1)), MSGPACK, f"at most {MAX_BATCH}"),
        (msgpack.packb([b"a"]) + b"\x01", MSGPACK, "MessagePack"),
    ]
    for body, headers, words in cases:
        r = await api.request("POST", "/batch/bad", data=body, headers=headers)
        assert r.status == 400 and r.json()["error"] == "bad_request", (body[:20], r)
        assert words in r.json()["detail"], (words, r)
    assert node.store.size("bad") == 0


async def test_pull_many_refuses_a_count_out_of_bounds(api: Api, node: LMQNode) -> None:
    await push_many(api, "c", [b"x"])
    for n in ("0", str(MAX_BATCH + 1), "abc", "-1", "1.5", ""):
        r = await api.request("GET", "/batch/c", {"n": n, "t": 0})
        assert r.status == 400 and "n must be a whole number" in r.json()["detail"], (n, r)
    r = await api.request("GET", "/batch/c", {"n": 1, "t": "soon"})
    assert r.status == 400, r
    assert node.store.size("c") == 1 and len(await pull_many(api, "c", n=1, t=0)) == 1


async def test_pull_many_stops_at_the_payload_bound(node: LMQNode, api: Api) -> None:
    await push_many(api, "big", [b"x" * 1000] * 10)
    got = await node.manager.pull_many("big", 10, 0, max_bytes=2500)
    assert len(got) == 3, "takes messages until their payload reaches max_bytes, then answers"


async def test_pull_many_does_not_starve_a_waiting_long_poll(api: Api) -> None:
    waiting = asyncio.create_task(api.pull("lp", t=5))
    await asyncio.sleep(0.1)
    await push_many(api, "lp", [b"first", b"second"])
    r = await waiting
    assert (r.status, r.body) == (200, b"first"), "the client already waiting is served first"
    assert [m["body"] for m in await pull_many(api, "lp", n=5, t=0)] == [b"second"]


@pytest.mark.local_store("counts the durable store's journal group commits")
async def test_a_batch_is_one_group_commit_on_the_durable_store(start: StartNode) -> None:
    node, api = await start()
    assert isinstance(node.store, DurableStore)
    groups = node.store.stats.groups
    r = await push_many(api, "d", [f"m{i}".encode() for i in range(500)])
    assert r.status == 200, r
    commits = node.store.stats.groups - groups
    assert commits <= 2, f"500 pushes in one batch took {commits} commits"
    groups = node.store.stats.groups
    got = await pull_many(api, "d", n=300, t=0)
    assert len(got) == 300
    assert node.store.stats.groups - groups <= 2, "a pull-many commits its deliveries together"


async def test_a_batch_and_a_pull_many_survive_a_restart(start: StartNode) -> None:
    node, api = await start()
    r = await push_many(api, "d", [f"m{i}".encode() for i in range(500)])
    assert r.status == 200, r
    assert len(await pull_many(api, "d", n=300, t=0)) == 300
    await node.stop()
    node, api = await start()
    # The 300 pulled ones are in processing; the 200 others are there at once.
    rest = await pull_many(api, "d", n=500, t=0)
    assert [m["body"] for m in rest] == [f"m{i}".encode() for i in range(300, 500)]


async def test_a_pull_many_client_that_leaves_while_waiting_takes_nothing(api: Api, node: LMQNode) -> None:
    assert node.http_address is not None
    _reader, writer = await asyncio.open_connection(*node.http_address)
    writer.write(b"GET /batch/gone?n=5&t=10 HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.2)  # the pull is waiting for a first message
    writer.close()
    await writer.wait_closed()
    await asyncio.sleep(0.2)
    await push_many(api, "gone", [b"a", b"b"])
    got = await pull_many(api, "gone", n=5, t=0)
    assert [m["body"] for m in got] == [b"a", b"b"], "the client that left must not have taken a message"
