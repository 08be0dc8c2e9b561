"""Holder tags on the four clients, against a real node: pull_many(holder=), claim(holder=)."""

from __future__ import annotations

import pytest

from pylmq.client import AsyncHttpClient, AsyncRpcClient, HttpClient, RpcClient
from pylmq.errors import BadRequest


async def test_async_clients_claim_by_holder(http: AsyncHttpClient, rpc: AsyncRpcClient) -> None:
    await http.push_many("q", [b"a", b"b", b"c"])
    by_http = await http.pull_many("q", 2, 0, holder="h1")
    by_rpc = await rpc.pull_many("q", 1, holder="h2")  # no timeout: waits, but one is there
    await http.ack("q", by_http[0].id)
    assert [m.id for m in (await rpc.claim("q", holder="h1")).messages] == [by_http[1].id]
    assert [m.id for m in (await http.claim("q", holder="h2")).messages] == [by_rpc[0].id]
    with pytest.raises(BadRequest, match="holder tag"):
        await http.pull_many("q", 1, 0, holder="a b")
    with pytest.raises(BadRequest, match="holder tag"):
        await rpc.claim("q", holder="")
    with pytest.raises(BadRequest, match="not both"):
        await http.claim("q", [by_rpc[0].id], holder="h2")


def test_sync_clients_claim_by_holder(sync_http: HttpClient, sync_rpc: RpcClient) -> None:
    sync_http.push("q", b"a")
    sync_rpc.push("q", "b")
    got = sync_rpc.pull_many("q", 2, 0, holder="s")
    assert [m.id for m in sync_http.claim("q", holder="s").messages] == [m.id for m in got]
    sync_rpc.done("q", got[0].id)
    assert [m.id for m in sync_rpc.claim("q", holder="s").messages] == [got[1].id]
    with pytest.raises(BadRequest, match="not both"):
        sync_rpc.claim("q", [got[1].id], holder="s")
