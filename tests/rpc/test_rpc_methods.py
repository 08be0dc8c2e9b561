"""Every MessagePack-RPC method against a real node over a real socket (docs/lmq-contract.md)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from pylmq.core import make_item
from pylmq.node import LMQNode
from tests.rpc.rpc_helpers import Connect, RawClient


async def pulled(client: RawClient, queue: str, timeout: float = 0) -> dict[str, Any]:
    r = await client.call("pull", queue, timeout)
    assert isinstance(r, dict), f"pull {queue}: expected a message, got {r!r}"
    return r


async def test_push_answers_ok_and_pull_returns_the_message_map(client: RawClient) -> None:
    assert await client.call("push", "q", "test data") == "ok"
    r = await pulled(client, "q")
    assert list(r) == ["queue", "id", "type", "retry", "content"]
    assert (r["queue"], r["type"], r["retry"], r["content"]) == ("q", "normal", 2, "test data")
    assert str(uuid.UUID(r["id"])) == r["id"]


async def test_pull_on_empty_queue_answers_empty_at_once_and_after_timeout(client: RawClient) -> None:
    assert await client.call("pull", "q", 0) == "empty"
    assert await client.call("pull", "q", 0.1) == "empty"


async def test_pull_without_timeout_waits_for_a_push(connect: Connect) -> None:
    a, b = await connect(), await connect()
    waiting = a.request("pull", "q")
    assert await b.call("pull", "q", 0.05) == "empty"  # a's pull is still waiting, unanswered
    assert await b.call("push", "q", "wake") == "ok"
    error, r = await a.response(waiting)
    assert error is None and r["content"] == "wake"


async def test_pull_with_nil_or_infinity_timeout_waits(connect: Connect) -> None:
    a, b = await connect(), await connect()
    w1 = a.request("pull", "q", None)
    w2 = a.request("pull", "q", "infinity")
    await b.call("push", "q", 1)
    await b.call("push", "q", 2)
    got = {(await a.response(w1))[1]["content"], (await a.response(w2))[1]["content"]}
    assert got == {1, 2}


async def test_retain_then_done_acknowledges_the_message(client: RawClient) -> None:
    await client.call("push", "q", "x")
    r = await pulled(client, "q")
    assert await client.call("retain", "q", r["id"]) == "ok"
    assert await client.call("done", "q", r["id"]) == "ok"
    assert (await client.error("done", "q", r["id"]))[0] == "not_found"
    assert await client.call("pull", "q", 0) == "empty"


async def test_release_makes_the_message_available_with_the_retry_spent(client: RawClient) -> None:
    await client.call("push", "q", "test data 2")
    first = await pulled(client, "q")
    assert first["retry"] == 2
    assert await client.call("release", "q", first["id"]) == "ok"
    assert (await client.error("done", "q", first["id"]))[0] == "not_found"
    again = await pulled(client, "q")
    assert (again["retry"], again["content"]) == (1, "test data 2")
    assert await client.call("done", "q", again["id"]) == "ok"


async def test_unacked_message_is_redelivered_with_a_new_id_after_timeout(client: RawClient) -> None:
    await client.call("update_props", "q", {"timeout": 0.2})
    await client.call("push", "q", "m")
    first = await pulled(client, "q")
    second = await pulled(client, "q", 3)
    assert second["id"] != first["id"] and second["content"] == "m" and second["retry"] == 1
    assert (await client.error("done", "q", first["id"]))[0] == "not_found"
    assert await client.call("done", "q", second["id"]) == "ok"


async def test_message_is_dropped_when_its_retries_are_spent(client: RawClient) -> None:
    assert await client.call("update_props", "q", {"retry": 1, "timeout": 0}) == "ok"
    await client.call("push", "q", "test")
    assert (await pulled(client, "q", 0.2))["retry"] == 1
    assert (await pulled(client, "q", 0))["retry"] == 0
    assert await client.call("pull", "q", 0.1) == "empty"


async def test_update_props_without_props_resets_them(client: RawClient, node: LMQNode) -> None:
    await client.call("update_props", "q", {"retry": 1, "timeout": 0})
    assert await client.call("update_props", "q") == "ok"
    assert node.manager.raw_props("q") == {}
    await client.call("push", "q", "test2")
    assert (await pulled(client, "q"))["retry"] == 2
    assert await client.call("pull", "q", 0) == "empty"


async def test_update_props_merges_with_existing_props(client: RawClient, node: LMQNode) -> None:
    await client.call("update_props", "q", {"retry": 0})
    await client.call("update_props", "q", {"timeout": 5})
    assert node.manager.raw_props("q") == {"retry": 0, "timeout": 5.0}
    await client.call("push", "q", "once")
    assert (await pulled(client, "q"))["retry"] == 0


@pytest.mark.parametrize("key", ["pack", "accum"])
async def test_update_props_pack_sets_accumulation_in_seconds(client: RawClient, node: LMQNode, key: str) -> None:
    assert await client.call("update_props", "q", {key: 0.5}) == "ok"
    assert node.manager.raw_props("q") == {"accum": 0.5}


async def test_retry_infinity_is_reported_as_infinity(client: RawClient) -> None:
    await client.call("update_props", "q", {"retry": "infinity"})
    await client.call("push", "q", 1)
    assert (await pulled(client, "q"))["retry"] == "infinity"


async def test_accumulated_pushes_are_pulled_as_one_package(client: RawClient) -> None:
    await client.call("update_props", "q", {"timeout": 30, "pack": 0.2})
    assert await client.call("push", "q", 1) == "packing started"
    assert await client.call("push", "q", 2) == "packed"
    assert await client.call("pull", "q", 0) == "empty"
    package = await pulled(client, "q", 3)
    assert (package["type"], package["retry"], package["content"]) == ("package", 2, [1, 2])
    assert await client.call("push", "q", 3) == "packing started"
    assert (await pulled(client, "q", 3))["content"] == [3]
    assert await client.call("done", "q", package["id"]) == "ok"


async def test_push_all_reaches_every_existing_matching_queue(client: RawClient) -> None:
    for name in ("lmq/foo", "lmq/bar"):
        assert await client.call("update_props", name) == "ok"
    assert await client.call("push_all", "lmq/.*", "data") == "ok"
    for name in ("lmq/foo", "lmq/bar"):
        r = await pulled(client, name)
        assert (r["queue"], r["content"], r["retry"]) == (name, "data", 2)


async def test_push_all_skips_queues_that_do_not_exist_yet(client: RawClient, node: LMQNode) -> None:
    assert await client.call("push_all", "^nothing/", "lost?") == "ok"
    assert node.manager.queue_names() == []


async def test_pull_any_takes_from_each_matching_queue(client: RawClient) -> None:
    names = ["lmq/foo", "lmq/bar"]
    for name in names:
        await client.call("update_props", name, {"retry": 0})
        await client.call("push", name, name)
    got = [await client.call("pull_any", "lmq/.*", 0) for _ in names]
    assert sorted(r["queue"] for r in got) == sorted(names)
    assert all(r["content"] == r["queue"] and r["retry"] == 0 for r in got)
    assert await client.call("pull_any", "lmq/.*", 0) == "empty"
    assert await client.call("pull_any", "lmq/.*", 0.1) == "empty"


async def test_pull_any_gets_a_message_from_a_queue_created_while_waiting(connect: Connect, node: LMQNode) -> None:
    a, b = await connect(), await connect()
    waiting = a.request("pull_any", "^late/", 5)
    # Requests start in arrival order: once this answers, a's pull_any is waiting.
    assert await a.call("get_default_props") == []
    assert node.manager.queue_names() == []
    await b.call("push", "late/1", "hello")
    error, r = await a.response(waiting)
    assert error is None and (r["queue"], r["content"]) == ("late/1", "hello")


async def test_pull_any_without_timeout_waits(connect: Connect) -> None:
    a, b = await connect(), await connect()
    waiting = a.request("pull_any", "^w/")
    assert await b.call("pull_any", "^w/", 0.05) == "empty"
    await b.call("push", "w/x", "late")
    error, r = await a.response(waiting)
    assert error is None and r["content"] == "late"


async def test_pull_any_with_zero_timeout_and_no_queue_answers_empty(client: RawClient) -> None:
    assert await client.call("pull_any", "^none/", 0) == "empty"


async def test_delete_drops_the_queue_and_its_messages(client: RawClient, node: LMQNode) -> None:
    await client.call("push", "q", 1)
    assert await client.call("delete", "q") == "ok"
    assert "q" not in node.manager.queue_names()
    assert await client.call("pull", "q", 0) == "empty"


async def test_delete_of_an_unknown_queue_answers_ok_as_lmq(client: RawClient) -> None:
    assert await client.call("delete", "never-was") == "ok"


async def test_default_props_are_set_listed_and_applied(client: RawClient) -> None:
    defaults = [["def/", {"retry": 0, "timeout": 0}], ["lmq/", {"timeout": 0}]]
    assert await client.call("set_default_props", defaults) == "ok"
    assert await client.call("get_default_props") == defaults
    await client.call("push", "def/a", 1)
    r = await pulled(client, "def/a")
    assert (r["queue"], r["retry"], r["content"]) == ("def/a", 0, 1)
    assert await client.call("pull", "def/a", 0) == "empty"


async def test_default_props_report_accumulation_as_pack_in_float_seconds(client: RawClient) -> None:
    await client.call("set_default_props", [["p/", {"pack": 0.5, "retry": "infinity"}], ["q/", {"accum": 1}]])
    got = await client.call("get_default_props")
    assert got == [["p/", {"pack": 0.5, "retry": "infinity"}], ["q/", {"pack": 1.0}]]
    assert type(got[1][1]["pack"]) is float


async def test_set_default_props_rejects_an_invalid_regex_and_keeps_the_old_list(client: RawClient) -> None:
    await client.call("set_default_props", [["ok/", {"retry": 1}]])
    assert (await client.error("set_default_props", [["(", {"retry": 1}]]))[0] == "invalid_regex"
    assert await client.call("get_default_props") == [["ok/", {"retry": 1}]]


ROUND_TRIP = [True, False, None, 0, -1, 2**64 - 1, 1.5, "text", "", b"\x00\xffbin", [1, [2]], {"a": {"b": [True]}}]


@pytest.mark.parametrize("content", [*ROUND_TRIP, {1: "x"}], ids=repr)
async def test_content_round_trips_with_its_msgpack_type(client: RawClient, content: Any) -> None:
    await client.call("push", "q", content)
    got = (await pulled(client, "q"))["content"]
    assert got == content and type(got) is type(content)


async def test_non_utf8_content_pushed_over_http_with_another_type_is_pulled_as_raw_bytes(
    client: RawClient, node: LMQNode
) -> None:
    # UTF-8 text comes as str, as LMQ sends it: tests/rpc/test_rpc_lmq_compat.py.
    await node.manager.push("q", make_item(b"plain \xff text", "text/plain"))
    await node.manager.push("q", make_item(b"\xc1 not msgpack", "application/x-msgpack"))
    assert (await pulled(client, "q"))["content"] == b"plain \xff text"
    assert (await pulled(client, "q"))["content"] == b"\xc1 not msgpack"


async def test_content_pushed_over_http_as_msgpack_is_pulled_as_its_value(client: RawClient, node: LMQNode) -> None:
    await node.manager.push("q", make_item(b"\x92\x01\xa1a", "application/x-msgpack; charset=binary"))
    assert (await pulled(client, "q"))["content"] == [1, "a"]


async def test_queue_and_id_may_be_sent_as_binary(client: RawClient) -> None:
    await client.call("push", b"bq", "x")
    r = await pulled(client, "bq")
    assert r["queue"] == "bq"
    assert await client.call("done", b"bq", r["id"].encode()) == "ok"


async def test_many_pulls_pipelined_on_one_connection_get_distinct_messages(client: RawClient) -> None:
    for i in range(20):
        await client.call("push", "q", i)
    ids = [client.request("pull", "q", 1) for _ in range(20)]
    results = [(await client.response(i))[1] for i in ids]
    assert sorted(r["content"] for r in results) == list(range(20))
    assert len({r["id"] for r in results}) == 20
    assert await client.call("pull", "q", 0) == "empty"


async def test_a_long_poll_does_not_hold_up_a_push_on_the_same_connection(client: RawClient) -> None:
    poll = client.request("pull", "q", 5)
    push = client.request("push", "other", "x")
    error, result = await client.response(push, timeout=2)
    assert (error, result) == (None, "ok")
    await asyncio.sleep(0)
    assert poll not in client.responses, "the pull should still be waiting"
    client.request("push", "q", "for the poll")
    error, r = await client.response(poll)
    assert error is None and r["content"] == "for the poll"
