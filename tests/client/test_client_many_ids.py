"""reply_many and claim on the four clients, against a real node: typed results, errors as the tree."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from pylmq.client import AsyncHttpClient, AsyncRpcClient, ClaimResult, HttpClient, ReplyResult, RpcClient
from pylmq.errors import BadRequest, QueueNotFound


async def test_async_http_reply_many(http: AsyncHttpClient) -> None:
    for body in (b"a", b"b"):
        await http.push("q", body)
    ids = [m.id for m in [await http.pull("q", 0), await http.pull("q", 0)] if m is not None]
    unknown = str(uuid.uuid4())
    assert await http.reply_many("q", "ext", ids) == ReplyResult(tuple(ids), ())
    assert await http.reply_many("q", "ack", [*ids, unknown]) == ReplyResult(tuple(ids), (unknown,))
    with pytest.raises(QueueNotFound):
        await http.reply_many("nope", "ack", ids)
    with pytest.raises(BadRequest, match="ack, nack or ext"):
        await http.reply_many("q", "done", ids)  # type: ignore[arg-type]


async def test_async_rpc_reply_many(rpc: AsyncRpcClient) -> None:
    await rpc.push("q", 1)
    msg = await rpc.pull("q", 0)
    assert msg is not None
    assert await rpc.reply_many("q", "nack", [msg.id]) == ReplyResult((msg.id,), ())
    again = await rpc.pull("q", 0)
    assert again is not None and again.content == 1
    assert await rpc.reply_many("q", "ack", [msg.id, again.id]) == ReplyResult((again.id,), (msg.id,))
    with pytest.raises(BadRequest, match="at most"):
        await rpc.reply_many("q", "ack", ["x"] * 10_001)


def test_sync_http_reply_many(sync_http: HttpClient) -> None:
    sync_http.push("q", b"a")
    msg = sync_http.pull("q", 0)
    assert msg is not None
    assert sync_http.reply_many("q", "ack", [msg.id, msg.id]) == ReplyResult((msg.id,), (msg.id,))


def test_sync_rpc_reply_many(sync_rpc: RpcClient) -> None:
    sync_rpc.push("q", "a")
    msg = sync_rpc.pull("q", 0)
    assert msg is not None
    assert sync_rpc.reply_many("q", "ext", [msg.id]) == ReplyResult((msg.id,), ())
    with pytest.raises(QueueNotFound):
        sync_rpc.reply_many("nope", "ack", [msg.id])


async def test_async_http_claim_returns_messages_as_a_pull_does(http: AsyncHttpClient) -> None:
    await http.push("q", b"x", "text/x")
    msg = await http.pull("q", 0)
    assert msg is not None
    await http.nack("q", msg.id)
    unknown = str(uuid.uuid4())
    got = await http.claim("q", [msg.id, unknown])
    assert msg.retry is not None  # nacked: the claim redelivers it, spending a retry
    assert got == ClaimResult((dataclasses.replace(msg, retry=msg.retry - 1),), (unknown,))
    await http.ack("q", msg.id)


async def test_async_rpc_claim_returns_values(rpc: AsyncRpcClient) -> None:
    await rpc.push("q", {"k": 1})
    msg = await rpc.pull("q", 0)
    assert msg is not None
    assert await rpc.claim("q", [msg.id]) == ClaimResult((msg,), ())


def test_sync_clients_claim(sync_http: HttpClient, sync_rpc: RpcClient) -> None:
    sync_http.update_props("q", {"accum": 0.01})
    sync_http.push("q", b"a")
    sync_http.push("q", b"b")
    msg = sync_http.pull("q", 2, cf="msgpack")
    assert msg is not None and msg.type == "compound"
    got = sync_http.claim("q", [msg.id]).messages[0]
    assert (got.id, got.parts, got.body) == (msg.id, msg.parts, msg.body)
    (again,) = sync_rpc.claim("q", [msg.id]).messages
    assert (again.type, again.content) == ("compound", ["a", "b"])  # HTTP bodies come as raw strings


async def test_claim_results_name_the_ids_left_for_later(http: AsyncHttpClient, rpc: AsyncRpcClient) -> None:
    # 17 MiB claimed at once: the node answers up to 16 MiB and leaves the rest for later.
    await http.push_many("big", [b"x" * (1 << 20)] * 17)
    ids: list[str] = []
    while len(ids) < 17:  # a pull-many stops at 16 MiB too
        ids += [m.id for m in await http.pull_many("big", 17, 0)]
    got = await http.claim("big", ids)
    assert got.messages and got.not_found == () and got.later == tuple(ids[len(got.messages) :]) != ()
    again = await rpc.claim("big", list(got.later))
    assert [m.id for m in again.messages] == list(got.later) and again.later == ()
