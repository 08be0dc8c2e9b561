"""POST /replies/:name and POST /claims/:name (pylmq extensions) over a real socket."""

from __future__ import annotations

import json
import uuid
from typing import Any

import msgpack
import pytest

from pylmq.api.http import MAX_REPLY_BODY
from pylmq.core.manager import MAX_REPLY_IDS
from tests.api.api_helpers import StartNode


async def pulled(api: Any, queue: str, n: int) -> list[str]:
    for i in range(n):
        await api.push(queue, b"m%d" % i)
    ids = []
    for _ in range(n):
        r = await api.pull(queue)
        assert r.status == 200, r
        ids.append(r.id)
    return ids


async def replies(api: Any, queue: str, doc: Any) -> Any:
    data = doc if isinstance(doc, bytes) else json.dumps(doc)
    headers = {"Content-Type": "application/json"}
    return await api.request("POST", f"/replies/{api.q(queue)}", data=data, headers=headers)


async def test_ack_many_answers_ok_and_not_found_in_order(api: Any) -> None:
    ids = await pulled(api, "q", 3)
    unknown = str(uuid.uuid4())
    r = await replies(api, "q", {"reply": "ack", "ids": [ids[0], unknown, ids[1], ids[2], "junk"]})
    assert (r.status, r.headers["content-type"]) == (200, "application/json"), r
    assert r.json() == {"ok": ids, "not_found": [unknown, "junk"]}
    assert (await api.pull("q")).status == 204
    assert (await api.ack("q", ids[0])).status == 404


async def test_nack_many_makes_the_messages_available_again(api: Any) -> None:
    ids = await pulled(api, "q", 2)
    assert (await replies(api, "q", {"reply": "nack", "ids": ids})).json() == {"ok": ids, "not_found": []}
    assert sorted([(await api.pull("q")).body, (await api.pull("q")).body]) == [b"m0", b"m1"]


async def test_ext_many_keeps_the_messages_ackable(api: Any) -> None:
    ids = await pulled(api, "q/x", 2)
    assert (await replies(api, "q/x", {"reply": "ext", "ids": ids})).json() == {"ok": ids, "not_found": []}
    assert (await replies(api, "q/x", {"reply": "ack", "ids": ids})).json()["ok"] == ids


async def test_acks_of_a_batch_survive_a_restart(start: StartNode) -> None:
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
async def test_bad_bodies_answer_400_and_answer_nothing(api: Any, body: Any, detail: str) -> None:
    ids = await pulled(api, "q", 1)
    r = await replies(api, "q", body)
    assert r.status == 400, r
    assert r.json()["error"] == "bad_request" and detail in r.json()["detail"], r
    assert (await api.ack("q", ids[0])).status == 204  # still in processing


async def test_a_body_over_the_limit_answers_413(api: Any) -> None:
    await api.push("q")
    r = await replies(api, "q", {"reply": "ack", "ids": ["x" * (MAX_REPLY_BODY + 1)]})
    assert (r.status, r.json()["error"]) == (413, "too_large"), r


async def test_missing_queue_answers_404_and_get_answers_405(api: Any) -> None:
    r = await replies(api, "nope", {"reply": "ack", "ids": [str(uuid.uuid4())]})
    assert (r.status, r.json()["error"]) == (404, "queue_not_found"), r
    r = await api.request("GET", "/replies/q")
    assert (r.status, r.headers["allow"]) == (405, "POST"), r


# -- POST /claims/:name -------------------------------------------------------------------------


async def claims(api: Any, queue: str, doc: Any) -> Any:
    data = doc if isinstance(doc, bytes) else json.dumps(doc)
    headers = {"Content-Type": "application/json"}
    return await api.request("POST", f"/claims/{api.q(queue)}", data=data, headers=headers)


async def test_claim_answers_the_messages_in_msgpack_with_their_ids(api: Any) -> None:
    await api.push("c", b"plain", "text/plain")
    await api.set_props("k", accum=0.05)
    await api.push("k", b"one", "text/a")
    await api.push("k", b"two")
    plain = await api.pull("c")
    packed = await api.pull("k", t=2)
    assert packed.headers["x-lmq-message-type"] == "compound", packed
    assert (await api.reply("c", plain.id, "nack")).status == 204  # available again, same id
    unknown = str(uuid.uuid4())
    r = await claims(api, "c", {"ids": [plain.id, unknown]})
    assert (r.status, r.headers["content-type"]) == (200, "application/x-msgpack"), r
    doc = msgpack.unpackb(r.body)
    assert doc == {
        "messages": [
            {
                "queue": "c",
                "id": plain.id,
                "type": "normal",
                "retry": 1,  # nacked: the claim is a redelivery and spends one
                "items": [[{"content-type": "text/plain"}, b"plain"]],
            }
        ],
        "not_found": [unknown],
        "later": [],
    }
    doc = msgpack.unpackb((await claims(api, "k", {"ids": [packed.id]})).body)
    (msg,) = doc["messages"]
    assert (msg["type"], [b for _, b in msg["items"]]) == ("compound", [b"one", b"two"])
    assert msg["items"][0][0] == {"content-type": "text/a"}
    assert (await api.pull("c")).status == 204  # claimed: in processing again
    assert (await api.ack("c", plain.id)).status == 204


async def test_claimed_messages_survive_a_restart_in_processing(start: StartNode) -> None:
    node, api = await start()
    await api.set_props("d", timeout=60)
    (mid,) = await pulled(api, "d", 1)
    await api.reply("d", mid, "nack")
    assert len(msgpack.unpackb((await claims(api, "d", {"ids": [mid]})).body)["messages"]) == 1
    await node.stop()
    _, api = await start()
    assert (await api.pull("d")).status == 204  # still held by the claim, not available
    assert (await api.ack("d", mid)).status == 204


@pytest.mark.parametrize(
    "body, detail",
    [
        (b"[1]", "JSON object"),
        ({"ids": [], "reply": "ack"}, "JSON object"),
        ({"ids": [3]}, "array of message id strings"),
        ({"ids": ["x"] * (MAX_REPLY_IDS + 1)}, f"at most {MAX_REPLY_IDS}"),
    ],
)
async def test_bad_claim_bodies_answer_400_and_claim_nothing(api: Any, body: Any, detail: str) -> None:
    ids = await pulled(api, "q", 1)
    await api.reply("q", ids[0], "nack")
    r = await claims(api, "q", body)
    assert r.status == 400 and detail in r.json()["detail"], r
    assert (await api.pull("q")).status == 200  # still available


async def test_claim_of_a_missing_queue_answers_404(api: Any) -> None:
    r = await claims(api, "nope", {"ids": []})
    assert (r.status, r.json()["error"]) == (404, "queue_not_found"), r
