"""Holder tags over a real MessagePack-RPC socket: ``pull_many(name, n, t, holder)`` and
``claim(name, {"holder": tag})`` (pylmq extensions)."""

from __future__ import annotations

from tests.rpc.rpc_helpers import RawClient


async def test_claim_by_holder_takes_back_what_that_holder_still_holds(client: RawClient) -> None:
    for i in range(3):
        assert await client.call("push", "q", i) == "ok"
    mine = await client.call("pull_many", "q", 2, 0, "spark-abc")
    theirs = await client.call("pull_many", "q", 1, None, "other")  # nil timeout before the tag
    assert [m["content"] for m in mine] == [0, 1] and [m["content"] for m in theirs] == [2]
    assert await client.call("done", "q", mine[0]["id"]) == "ok"
    got = await client.call("claim", "q", {"holder": "spark-abc"})
    assert [m["id"] for m in got["messages"]] == [mine[1]["id"]] and got["not_found"] == [] == got["later"]
    got = await client.call("claim", "q", {b"holder": b"other"})  # raw strings, as old clients send
    assert [m["content"] for m in got["messages"]] == [2]


async def test_bad_holder_tags_and_claim_maps_are_refused(client: RawClient) -> None:
    assert await client.call("push", "q", 1) == "ok"
    for tag in ("", "a b", "x" * 65, 7, ["t"]):
        err = await client.error("pull_many", "q", 1, 0, tag)
        assert err[0] == "bad_request" and "holder tag" in err[1], (tag, err)
        err = await client.error("claim", "q", {"holder": tag})
        assert err[0] == "bad_request" and "holder tag" in err[1], (tag, err)
    for arg in ({"holder": "r", "ids": []}, {}, {"owner": "r"}):
        err = await client.error("claim", "q", arg)
        assert err[0] == "bad_request" and "holder" in err[1], (arg, err)
    err = await client.error("pull_many", "q", 1, 0, "r", "extra")
    assert err[0] == "bad_request"
    assert len(await client.call("pull_many", "q", 1, 0)) == 1  # the refused pulls took nothing
