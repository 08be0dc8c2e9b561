"""POST /replies/:name (a pylmq extension): ack, nack or ext of many ids over a real socket."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from conftest import Api

from pylmq.api.http import MAX_REPLY_BODY
from pylmq.core.manager import MAX_REPLY_IDS


async def pulled(api: Api, queue: str, n: int) -> list[str]:
    for i in range(n):
        await api.push(queue, b"m%d" % i)
    ids = []
    for _ in range(n):
        r = await api.pull(queue)
        assert r.status == 200, r
        ids.append(r.id)
    return ids


async def replies(api: Api, queue: str, doc: Any) -> Any:
    data = doc if isinstance(doc, bytes) else json.dumps(doc)
    headers = {"Content-Type": "application/json"}
    return await api.request("POST", f"/replies/{api.q(queue)}", data=data, headers=headers)


async def test_ack_many_answers_ok_and_not_found_in_order(api: Api) -> None:
    ids = await pulled(api, "q", 3)
    unknown = str(uuid.uuid4())
    r = await replies(api, "q", {"reply": "ack", "ids": [ids[0], unknown, ids[1], ids[2], "junk"]})
    assert (r.status, r.headers["content-type"]) == (200, "application/json"), r
    assert r.json() == {"ok": ids, "not_found": [unknown, "junk"]}
    assert (await api.pull("q")).status == 204
    assert (await api.ack("q", ids[0])).status == 404


async def test_nack_many_makes_the_messages_available_again(api: Api) -> None:
    ids = await pulled(api, "q", 2)
    assert (await replies(api, "q", {"reply": "nack", "ids": ids})).json() == {"ok": ids, "not_found": []}
    assert sorted([(await api.pull("q")).body, (await api.pull("q")).body]) == [b"m0", b"m1"]


async def test_ext_many_keeps_the_messages_ackable(api: Api) -> None:
    ids = await pulled(api, "q/x", 2)
    assert (await replies(api, "q/x", {"reply": "ext", "ids": ids})).json() == {"ok": ids, "not_found": []}
    assert (await replies(api, "q/x", {"reply": "ack", "ids": ids})).json()["ok"] == ids


async def test_acks_of_a_batch_survive_a_restart(start) -> None:
    node, api = await start()
    ids = await pulled(api, "d", 5)
    assert (await replies(api, "d", {"reply": "ack", "ids": ids[:4]})).json()["ok"] == ids[:4]
    await node.stop()
    _, api = await start()
    # The one not acked comes back after the restart (its deadline is LMQ's 30 s away).
    r = await api.pull("d", t=0)
    assert r.status == 204, r
    assert (await replies(api, "d", {"reply": "nack", "ids": ids})).json() == {"ok": [ids[4]], "not_found": ids[:4]}
    assert (await api.pull("d")).body == b"m4"


@pytest.mark.parametrize(
    "body, detail",
    [
        (b"{", "malformed JSON"),
        (b"[]", "JSON object"),
        ({"reply": "ack"}, "JSON object"),
        ({"reply": "ack", "ids": [], "extra": 1}, "JSON object"),
        ({"reply": "done", "ids": []}, "ack, nack or ext"),
        ({"reply": 1, "ids": []}, "ack, nack or ext"),
        ({"reply": "ack", "ids": "abc"}, "array of message id strings"),
        ({"reply": "ack", "ids": [1, 2]}, "array of message id strings"),
        ({"reply": "ack", "ids": ["x"] * (MAX_REPLY_IDS + 1)}, f"at most {MAX_REPLY_IDS}"),
    ],
)
async def test_bad_bodies_answer_400_and_answer_nothing(api: Api, body: Any, detail: str) -> None:
    ids = await pulled(api, "q", 1)
    r = await replies(api, "q", body)
    assert r.status == 400, r
    assert r.json()["error"] == "bad_request" and detail in r.json()["detail"], r
    assert (await api.ack("q", ids[0])).status == 204  # still in processing


async def test_a_body_over_the_limit_answers_413(api: Api) -> None:
    await api.push("q")
    r = await replies(api, "q", {"reply": "ack", "ids": ["x" * (MAX_REPLY_BODY + 1)]})
    assert (r.status, r.json()["error"]) == (413, "too_large"), r


async def test_missing_queue_answers_404_and_get_answers_405(api: Api) -> None:
    r = await replies(api, "nope", {"reply": "ack", "ids": [str(uuid.uuid4())]})
    assert (r.status, r.json()["error"]) == (404, "queue_not_found"), r
    r = await api.request("GET", "/replies/q")
    assert (r.status, r.headers["allow"]) == (405, "POST"), r
