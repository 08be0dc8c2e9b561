"""reply_many on the four clients, against a real node: a typed result, errors as the tree."""

from __future__ import annotations

import uuid

import pytest

from pylmq.client import AsyncHttpClient, AsyncRpcClient, HttpClient, ReplyResult, RpcClient
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
