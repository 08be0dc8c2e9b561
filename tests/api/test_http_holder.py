"""Holder tags over real HTTP: ``GET /batch/:name?holder=`` and ``POST /claims/:name`` with
``{"holder": TAG}`` (pylmq extensions)."""

from __future__ import annotations

import json
from typing import Any

import msgpack

MP = {"Content-Type": "application/x-msgpack"}
JS = {"Content-Type": "application/json"}


async def pull_many(api: Any, queue: str, n: int, **query: Any) -> list[dict[str, Any]]:
    r = await api.request("GET", f"/batch/{queue}", {"n": n, "t": 0, **query})
    assert r.status == 200, r
    docs: list[dict[str, Any]] = msgpack.unpackb(r.body)
    return docs


async def claim_holder(api: Any, queue: str, body: Any) -> Any:
    return await api.request("POST", f"/claims/{queue}", data=json.dumps(body), headers=JS)


async def test_claim_by_holder_takes_back_what_that_holder_still_holds(api: Any) -> None:
    r = await api.request("POST", "/batch/q", data=msgpack.packb([b"a", b"b", b"c", b"d"]), headers=MP)
    assert r.status == 200
    mine = await pull_many(api, "q", 3, holder="reader-1")
    theirs = await pull_many(api, "q", 1, holder="reader-2")
    assert (await api.ack("q", mine[0]["id"])).status == 204
    r = await claim_holder(api, "q", {"holder": "reader-1"})
    assert r.status == 200, r
    doc = msgpack.unpackb(r.body)
    assert [m["id"] for m in doc["messages"]] == [mine[1]["id"], mine[2]["id"]]
    assert [m["items"][0][1] for m in doc["messages"]] == [b"b", b"c"]
    assert doc["not_found"] == [] and doc["later"] == []
    other = msgpack.unpackb((await claim_holder(api, "q", {"holder": "reader-2"})).body)
    assert [m["id"] for m in other["messages"]] == [theirs[0]["id"]]
    none = msgpack.unpackb((await claim_holder(api, "q", {"holder": "reader-3"})).body)
    assert none == {"messages": [], "not_found": [], "later": []}


async def test_bad_holder_tags_get_a_400_and_take_nothing(api: Any) -> None:
    await api.push("q", b"x")
    for tag in ("", "a b", "x" * 65, "t\x01", "tâg"):
        r = await api.request("GET", "/batch/q", {"n": 1, "t": 0, "holder": tag})
        assert r.status == 400 and "holder tag" in r.json()["detail"], (tag, r)
        r = await claim_holder(api, "q", {"holder": tag})
        assert r.status == 400 and "holder tag" in r.json()["detail"], (tag, r)
    r = await claim_holder(api, "q", {"holder": 5})
    assert r.status == 400 and "holder tag" in r.json()["detail"]
    assert len(await pull_many(api, "q", 1)) == 1  # nothing was taken by the refused pulls


async def test_claim_body_with_holder_and_ids_or_other_keys_is_refused(api: Any) -> None:
    await api.push("q", b"x")
    for body in ({"holder": "r", "ids": []}, {"holder": None}, {"holders": "r"}, ["holder"]):
        r = await claim_holder(api, "q", body)
        assert r.status == 400, (body, r)
        assert r.json()["error"] == "bad_request"


async def test_claim_by_holder_of_a_missing_queue_is_404(api: Any) -> None:
    r = await claim_holder(api, "nope", {"holder": "r"})
    assert r.status == 404, r
