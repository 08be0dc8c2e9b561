"""pylmq's batch extension of the MessagePack-RPC API: push_many and pull_many."""

from __future__ import annotations

import asyncio
from typing import Any

from pylmq.core.manager import MAX_BATCH
from pylmq.node import LMQNode
from tests.rpc.rpc_helpers import RawClient


async def test_push_many_stores_each_value_and_pull_many_gives_them_back_in_order(client: RawClient) -> None:
    assert await client.call("push_many", "q", ["text", {"k": [1, 2]}, b"\x00bin"]) == 3
    got = await client.call("pull_many", "q", 10, 0)
    assert [m["content"] for m in got] == ["text", {"k": [1, 2]}, b"\x00bin"]
    assert {(m["queue"], m["type"], m["retry"]) for m in got} == {("q", "normal", 2)}
    for m in got:
        assert await client.call("done", "q", m["id"]) == "ok"


async def test_pull_many_takes_at_most_count_and_leaves_the_rest(client: RawClient, node: LMQNode) -> None:
    await client.call("push_many", "q", list(range(7)))
    assert [m["content"] for m in await client.call("pull_many", "q", 3, 0)] == [0, 1, 2]
    assert node.store.size("q") == 7, "pulled messages stay in processing until acked"
    assert [m["content"] for m in await client.call("pull_many", "q", 100, 0)] == [3, 4, 5, 6]


async def test_pull_many_on_an_empty_queue_answers_an_empty_array(client: RawClient) -> None:
    assert await client.call("pull_many", "none", 5, 0) == []


async def test_pull_many_waits_for_the_first_message(client: RawClient, connect) -> None:  # type: ignore[no-untyped-def]
    other = await connect()
    msgid = client.request("pull_many", "w", 5, 5)
    await asyncio.sleep(0.1)
    await other.call("push_many", "w", ["late"])
    error, result = await client.response(msgid)
    assert error is None and [m["content"] for m in result] == ["late"]


async def test_batch_calls_refuse_bad_arguments_with_a_reason(client: RawClient, node: LMQNode) -> None:
    # (method, *params), words of the reason: the params are Any, many are deliberately wrong.
    cases: list[tuple[tuple[Any, ...], str]] = [
        (("push_many", "q", "not a list"), "array of contents"),
        (("push_many", "q", [1] * (MAX_BATCH + 1)), f"at most {MAX_BATCH}"),
        (("push_many", "q"), "takes 2 arguments"),
        (("pull_many", "q", 0), "count must be"),
        (("pull_many", "q", MAX_BATCH + 1), "count must be"),
        (("pull_many", "q", True), "count must be"),
        (("pull_many", "q", "3"), "count must be"),
        (("pull_many", "q", 3, -1), "timeout"),
        (("pull_many", 5, 3), "queue name"),
    ]
    for call, words in cases:
        error = await client.error(*call)
        assert error[0] in ("bad_request", "invalid_queue_name") and words in error[1], (call, error)
    assert node.store.size("q") == 0, "a refused batch pushes nothing"
