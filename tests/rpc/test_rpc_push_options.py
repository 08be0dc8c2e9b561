"""push's options map, peek, requeue and the virtual queue methods over a real MessagePack-RPC
socket, on a node whose clock the test moves (docs/http-api-extensions.md)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgpack
import pytest

from pylmq.client import AsyncRpcClient, DeadLetterInfo, PushOptions, RpcClient
from pylmq.core.clock import ManualClock
from pylmq.errors import InvalidOptions, NotFound
from pylmq.node import LMQNode
from tests.rpc.rpc_helpers import RawClient, open_client
from tests.suite_store import SuiteOptions

START = 1_800_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
async def node(suite_options: SuiteOptions, clock: ManualClock) -> AsyncIterator[LMQNode]:
    n = LMQNode(suite_options(http=None, rpc=("127.0.0.1", 0)), clock=clock)
    await n.start()
    yield n
    await n.stop()


@pytest.fixture
async def client(node: LMQNode) -> AsyncIterator[RawClient]:
    assert node.rpc_address is not None
    c = await open_client(node.rpc_address)
    yield c
    await c.close()


@pytest.fixture
async def rpc(node: LMQNode) -> AsyncIterator[AsyncRpcClient]:
    assert node.rpc_address is not None
    host, port = node.rpc_address
    async with AsyncRpcClient(host, port, request_timeout=10) as c:
        yield c


async def test_lmqs_push_and_pull_keep_their_shapes(client: RawClient) -> None:
    assert await client.call("push", "plain", {"a": 1}) == "ok"
    got = await client.call("pull", "plain", 0)
    assert list(got) == ["queue", "id", "type", "retry", "content"]


async def test_push_with_options_answers_the_id_and_delays(client: RawClient, clock: ManualClock) -> None:
    reply = await client.call("push", "d", "later", {"delay": 10, "priority": 2})
    assert set(reply) == {"id"}
    assert await client.call("push", "d", "x") == "ok"
    empty = await client.call("push", "e", "x", {})  # an empty map: a plain push that answers its id
    assert set(empty) == {"id"}
    [entry] = await client.call("peek", "e")
    assert entry["id"] == empty["id"] and entry["priority"] == 0
    first = await client.call("pull", "d", 0)
    assert first["content"] == "x"
    assert await client.call("pull", "d", 0) == "empty"
    clock.advance(10)
    got = await client.call("pull", "d", 0)
    assert (got["content"], got["attempts"]) == ("later", 1)
    assert list(got)[:5] == ["queue", "id", "type", "retry", "content"]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"delay": "soon"}, "delay"),
        ({"delay": -1}, "delay"),
        ({"ttl": 5, "delay": 5}, "ttl"),
        ({"retry": "foo"}, "retry"),
        ({"retry": 1.5}, "retry"),
        ({"interval": 0}, "interval"),
        ({"priority": 300}, "priority"),
        ({"priority": True}, "priority"),
        ({"once": "maybe"}, "once"),
    ],
)
async def test_bad_options_are_rpc_errors_naming_the_option(
    node: LMQNode, client: RawClient, options: dict[str, Any], named: str
) -> None:
    error = await client.error("push", "bad", 1, options)
    assert error[0] == "invalid_options" and f"'{named}'" in error[1], error
    assert "bad" not in node.manager.queue_names()  # refused before the queue was even made


async def test_a_non_map_third_argument_is_a_bad_request(client: RawClient) -> None:
    error = await client.error("push", "q", 1, [1])
    assert error[0] == "bad_request" and "push" in error[1]


async def test_dead_letters_carry_their_history_and_requeue_brings_them_back(
    client: RawClient, clock: ManualClock
) -> None:
    assert await client.call("update_props", "jobs", {"dead_letter": "jobs.dead", "retry": 0, "timeout": 5}) == "ok"
    await client.call("push", "jobs", "work")
    assert (await client.call("pull", "jobs", 0))["attempts"] == 1
    clock.advance(6)
    assert await client.call("pull", "jobs", 0) == "empty"
    dead = await client.call("pull", "jobs.dead", 0)
    assert dead["content"] == "work" and dead["attempts"] == 1
    assert dead["dead"] == {"origin": "jobs", "failures": 1, "last_delivery": START, "reason": "retries"}
    assert await client.call("release", "jobs.dead", dead["id"]) == "ok"
    [entry] = await client.call("peek", "jobs.dead", None, 10, True)
    assert entry["body"] == msgpack.packb("work") and entry["dead"]["origin"] == "jobs"
    assert await client.call("requeue", "jobs.dead") == 1
    back = await client.call("pull", "jobs", 0)
    assert back["content"] == "work" and "dead" not in back


async def test_peek_pages_and_refuses_bad_arguments(client: RawClient, clock: ManualClock) -> None:
    ids = []
    for i in range(3):
        ids.append((await client.call("push", "pk", i, {}))["id"])
        clock.advance(0.001)
    page = await client.call("peek", "pk", None, 2)
    rest = await client.call("peek", "pk", page[-1]["id"], 2)
    assert [e["id"] for e in page + rest] == ids
    assert "body" not in page[0]
    for bad in (("pk", None, 0), ("pk", None, 1001), ("pk", None, 1, "yes"), ("pk", "not-an-id")):
        assert (await client.error("peek", *bad))[0] == "bad_request", bad


async def test_virtual_queue_methods(client: RawClient, clock: ManualClock) -> None:
    assert await client.call("virtual_set", "fan", ["a", "b"]) == "ok"
    assert await client.call("virtual_get") == {"fan": ["a", "b"]}
    assert await client.call("virtual_get", "fan") == ["a", "b"]
    assert await client.call("push", "fan", "m") == "ok"  # LMQ's push: LMQ's answer
    clock.advance(0.001)
    reply = await client.call("push", "fan", "n", {})
    assert set(reply) == {"queues"} and set(reply["queues"]) == {"a", "b"}
    for q in ("a", "b"):
        assert (await client.call("pull", q, 0))["content"] == "m"
    error = await client.error("pull", "fan", 0)
    assert error[0] == "bad_request" and "a, b" in error[1]
    assert (await client.error("virtual_set", "a", ["x"]))[0] == "bad_request"  # a is a queue
    assert (await client.error("virtual_set", "v2", ["fan"]))[0] == "bad_request"  # fan is virtual
    assert (await client.error("virtual_set", "v3", "a"))[0] == "bad_request"
    assert await client.call("virtual_delete", "fan") == "ok"
    assert (await client.error("virtual_delete", "fan"))[0] == "not_found"
    assert (await client.error("virtual_get", "fan"))[0] == "not_found"


async def test_the_client_speaks_the_extensions(rpc: AsyncRpcClient, clock: ManualClock) -> None:
    ids = await rpc.push_with("c", {"k": 1}, PushOptions(delay=1, ttl=60, priority=4))
    assert list(ids) == ["c"]
    assert await rpc.pull("c", 0) is None
    clock.advance(1)
    msg = await rpc.pull("c", 0)
    assert msg is not None and (msg.content, msg.attempts, msg.dead) == ({"k": 1}, 1, None)
    with pytest.raises(InvalidOptions):
        await rpc.push_with("c", 1, PushOptions(priority=256))
    await rpc.update_props("w", {"dead_letter": "w.dead", "retry": 0, "timeout": 1})
    await rpc.push("w", "x")
    assert await rpc.pull("w", 0) is not None
    clock.advance(2)
    assert await rpc.pull("w", 0) is None
    dead = await rpc.pull("w.dead", 0)
    assert dead is not None and dead.dead == DeadLetterInfo("w", 1, START + 1, "retries")
    await rpc.release("w.dead", dead.id)
    assert [e["dead"]["origin"] for e in await rpc.peek("w.dead")] == ["w"]
    assert await rpc.requeue("w.dead", 5, "w2") == 1
    await rpc.set_virtual("vv", ["p", "q"])
    assert await rpc.virtual_queues() == {"vv": ["p", "q"]} and await rpc.get_virtual("vv") == ["p", "q"]
    assert set(await rpc.push_with("vv", 1)) == {"p", "q"}
    await rpc.delete_virtual("vv")
    with pytest.raises(NotFound):
        await rpc.get_virtual("vv")


async def test_the_blocking_client_speaks_the_extensions(node: LMQNode, clock: ManualClock) -> None:
    assert node.rpc_address is not None
    host, port = node.rpc_address

    def blocking() -> None:
        with RpcClient(host, port, request_timeout=10) as c:
            [(queue, _)] = c.push_with("s", "x", PushOptions(once=True)).items()
            assert queue == "s"
            [entry] = c.peek("s")
            assert entry["retry"] == 1 and entry["state"] == "available"  # one delivery left
            c.set_virtual("sv", ["s1"])
            assert c.virtual_queues() == {"sv": ["s1"]} and c.get_virtual("sv") == ["s1"]
            c.delete_virtual("sv")
            assert c.requeue("s") == 0  # nothing there is a dead letter

    await asyncio.to_thread(blocking)


async def test_a_peek_with_bodies_stops_at_its_byte_budget_and_walks_on(
    client: RawClient, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pylmq.api import peek as peek_module

    monkeypatch.setattr(peek_module, "MAX_PEEK_BYTES", 1000)
    ids = []
    for i in range(5):
        ids.append((await client.call("push", "pb", bytes([i]) * 400, {}))["id"])
        clock.advance(0.001)
    assert [e["id"] for e in await client.call("peek", "pb", None, 5)] == ids  # no bodies: not cut
    page = await client.call("peek", "pb", None, 5, True)
    # As a batch pull: on until the bodies reach the budget, so the sizes say the page was cut.
    assert len(page) == 3 and sum(e["size"] for e in page) >= 1000
    rest = await client.call("peek", "pb", page[-1]["id"], 5, True)
    assert [e["id"] for e in page + rest] == ids
    assert [e["body"] for e in page + rest] == [msgpack.packb(bytes([i]) * 400) for i in range(5)]
