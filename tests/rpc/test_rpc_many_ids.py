"""reply_many and claim (pylmq extensions) over a real MessagePack-RPC socket."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from pylmq.core.manager import MAX_REPLY_IDS
from tests.rpc.rpc_helpers import RawClient


async def pulled(client: RawClient, queue: str, n: int) -> list[str]:
    for i in range(n):
        assert await client.call("push", queue, i) == "ok"
    ids = []
    for _ in range(n):
        r = await client.call("pull", queue, 0)
        assert isinstance(r, dict), r
        ids.append(r["id"])
    return ids


async def test_reply_many_answers_a_map_of_ok_and_not_found(client: RawClient) -> None:
    ids = await pulled(client, "q", 3)
    unknown = str(uuid.uuid4())
    assert await client.call("reply_many", "q", "ack", [ids[0], unknown, ids[1]]) == {
        "ok": [ids[0], ids[1]],
        "not_found": [unknown],
    }
    assert await client.call("reply_many", "q", "ext", [ids[2]]) == {"ok": [ids[2]], "not_found": []}
    assert await client.call("reply_many", "q", "nack", [ids[2], ids[0]]) == {"ok": [ids[2]], "not_found": [ids[0]]}
    again = await client.call("pull", "q", 0)
    assert again["content"] == 2


@pytest.mark.parametrize(
    "params, reason, detail",
    [
        (["q", "ack"], "bad_request", "takes 3 arguments"),
        (["q", "done", []], "bad_request", "ack, nack or ext"),
        (["q", 7, []], "bad_request", "ack, nack or ext"),
        (["q", "ack", "abc"], "bad_request", "array of message ids"),
        (["q", "ack", [1]], "bad_request", "message id must be a string"),
        (["q", "ack", ["x"] * (MAX_REPLY_IDS + 1)], "bad_request", "at most"),
        ([1, "ack", []], "invalid_queue_name", "queue name"),
        (["nope", "ack", []], "queue_not_found", "nope"),
    ],
)
async def test_bad_params_answer_an_error_and_answer_nothing(
    client: RawClient, params: list[Any], reason: str, detail: str
) -> None:
    ids = await pulled(client, "q", 1)
    error, result = await client.response(client.request("reply_many", *params))
    assert result is None and error[0] == reason and detail in error[1], error
    assert await client.call("done", "q", ids[0]) == "ok"


async def test_claim_answers_pull_maps_and_not_found(client: RawClient) -> None:
    (mid,) = await pulled(client, "q", 1)
    assert await client.call("release", "q", mid) == "ok"
    unknown = str(uuid.uuid4())
    got = await client.call("claim", "q", [mid, unknown])
    assert got == {
        "messages": [{"queue": "q", "id": mid, "type": "normal", "retry": 1, "content": 0}],  # a retry spent
        "not_found": [unknown],
        "later": [],
    }
    assert await client.call("pull", "q", 0) == "empty"
    assert await client.call("done", "q", mid) == "ok"


@pytest.mark.parametrize(
    "params, reason",
    [
        (["q"], "bad_request"),
        (["q", "abc"], "bad_request"),
        (["q", [None]], "bad_request"),
        (["nope", []], "queue_not_found"),
    ],
)
async def test_bad_claim_params_answer_an_error(client: RawClient, params: list[Any], reason: str) -> None:
    await client.call("push", "q", 1)
    assert (await client.error("claim", *params))[0] == reason


async def test_claim_answer_stops_at_16_mib_and_names_the_rest_later(client: RawClient) -> None:
    big = b"x" * (1 << 20)
    for _ in range(17):
        assert await client.call("push", "big", big) == "ok"
    ids = [(await client.call("pull", "big", 0))["id"] for _ in range(17)]
    got = await client.call("claim", "big", ids)
    n = len(got["messages"])
    assert 1 <= n < 17 and got["not_found"] == [] and got["later"] == ids[n:], (n, got["later"])
    assert [m["id"] for m in (await client.call("claim", "big", got["later"]))["messages"]] == ids[n:]
