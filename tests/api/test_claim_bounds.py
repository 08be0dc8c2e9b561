"""Claims over real HTTP: an answer is bounded as a pull-many is (the ids left over come back in
``later``), a claim spends the retry a redelivery would, a nacked message stays claimable across a
restart, and a message a claim discarded stays gone."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgpack

from pylmq.core.manager import MAX_BATCH_BYTES

MP = {"Content-Type": "application/x-msgpack"}
JS = {"Content-Type": "application/json"}


async def claim(api: Any, queue: str, ids: list[str]) -> dict[str, Any]:
    r = await api.request("POST", f"/claims/{queue}", data=json.dumps({"ids": ids}), headers=JS)
    assert r.status == 200, r
    doc: dict[str, Any] = msgpack.unpackb(r.body)
    return doc


async def test_claim_answer_is_bounded_like_a_pull_many_and_the_rest_comes_back_later(api: Any) -> None:
    # 40 x 1 MiB claimed at once would be one 42 MB answer: it stops at MAX_BATCH_BYTES of
    # payload, and the ids it did not look at come back in `later`, untouched, to be asked again.
    big = b"x" * (1 << 20)
    ids: list[str] = []
    for _ in range(4):
        assert (await api.request("POST", "/batch/big", data=msgpack.packb([big] * 10), headers=MP)).status == 200
        r = await api.request("GET", "/batch/big", {"n": 10, "t": 0})
        ids += [m["id"] for m in msgpack.unpackb(r.body)]
    assert len(ids) == 40
    claimed: list[str] = []
    asked = ids
    for _ in range(5):
        r = await api.request("POST", "/claims/big", data=json.dumps({"ids": asked}), headers=JS)
        assert len(r.body) <= MAX_BATCH_BYTES + 2 * len(big), f"one claim answer of {len(r.body):,} bytes"
        doc = msgpack.unpackb(r.body)
        got = [m["id"] for m in doc["messages"]]
        assert got and doc["not_found"] == [] and got + doc["later"] == asked
        claimed += got
        asked = doc["later"]
        if not asked:
            break
    assert claimed == ids


async def test_claim_of_an_unknown_id_answers_an_empty_later(api: Any) -> None:
    assert (await api.push("e", b"x")).status == 200
    unknown = "00000000-0000-4000-8000-000000000000"
    assert await claim(api, "e", [unknown]) == {"messages": [], "not_found": [unknown], "later": []}


async def test_claim_does_not_resurrect_a_message_whose_retries_are_spent(api: Any) -> None:
    # retry 0: one delivery. Its deadline passes; a claim then would be a second delivery: the
    # message is discarded as a pull would discard it, not handed out again for ever.
    assert (await api.patch_props("p", {"retry": 0, "timeout": 0.2})).status == 204
    assert (await api.request("POST", "/batch/p", data=msgpack.packb([b"poison"]), headers=MP)).status == 200
    r = await api.request("GET", "/batch/p", {"n": 1, "t": 0})
    (msg,) = msgpack.unpackb(r.body)
    deliveries = 1
    for _ in range(3):
        await asyncio.sleep(0.35)  # the deadline passes: the queue would drop it at its next take
        deliveries += len((await claim(api, "p", [msg["id"]]))["messages"])
    assert deliveries == 1, f"a retry-0 message was delivered {deliveries} times"
    r = await api.request("GET", "/batch/p", {"n": 1, "t": 0})
    assert msgpack.unpackb(r.body) == [], "the spent message is still in the queue"


async def test_a_nacked_message_is_claimed_by_its_id_after_a_restart(start: Any) -> None:
    node, api = await start()
    await api.set_props("d", timeout=60)
    assert (await api.push("d", b"kept")).status == 200
    first = await api.pull("d")
    assert (await api.reply("d", first.id, "nack")).status == 204
    await node.stop()
    _, api = await start()
    doc = await claim(api, "d", [first.id])
    assert [(m["id"], m["items"][0][1]) for m in doc["messages"]] == [(first.id, b"kept")], doc
    assert (await api.pull("d")).status == 204  # held by the claim


async def test_a_message_a_claim_discarded_for_its_spent_retry_stays_gone_after_a_restart(start: Any) -> None:
    node, api = await start()
    await api.set_props("d", timeout=0.2, retry=0)
    assert (await api.push("d", b"poison")).status == 200
    first = await api.pull("d")
    await asyncio.sleep(0.35)
    assert (await claim(api, "d", [first.id]))["not_found"] == [first.id]
    await node.stop()
    _, api = await start()
    assert (await api.pull("d")).status == 204
    assert (await claim(api, "d", [first.id]))["not_found"] == [first.id]
