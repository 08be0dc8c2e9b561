"""AsyncRpcClient against a real node: methods, errors, pipelining, failover."""

from __future__ import annotations

import asyncio

import pytest

from pylmq.client import AsyncRpcClient
from pylmq.errors import BadRequest, InvalidProps, InvalidRegex, MessageNotFound, ShuttingDown, Unreachable
from pylmq.node import LMQNode
from pylmq.node.testing import refused_address


async def test_push_pull_done_round_trip(rpc: AsyncRpcClient) -> None:
    assert await rpc.push("q", b"test data") == "ok"
    msg = await rpc.pull("q", 0)
    assert msg is not None
    assert (msg.queue, msg.type, msg.retry, msg.content) == ("q", "normal", 2, b"test data")
    await rpc.retain("q", msg.id)
    await rpc.done("q", msg.id)
    assert await rpc.pull("q", 0) is None


async def test_values_round_trip_as_pushed(rpc: AsyncRpcClient) -> None:
    value = {"a": [1, 2.5, "x", None, True], "b": b"\x00"}
    await rpc.push("q", value)
    msg = await rpc.pull("q", 0)
    assert msg is not None and msg.content == value


async def test_pull_timeout_returns_none(rpc: AsyncRpcClient) -> None:
    assert await rpc.pull("empty", 0) is None
    assert await rpc.pull("empty", 0.05) is None
    assert await rpc.pull_any("^empty", 0.05) is None


async def test_release_redelivers_with_one_retry_less(rpc: AsyncRpcClient) -> None:
    await rpc.push("q", b"x")
    first = await rpc.pull("q", 0)
    assert first is not None
    await rpc.nack("q", first.id)
    with pytest.raises(MessageNotFound):
        await rpc.ack("q", first.id)
    second = await rpc.pull("q", 0)
    assert second is not None and second.retry == 1 and second.id != first.id
    await rpc.ext("q", second.id)
    await rpc.ack("q", second.id)


async def test_done_of_unknown_id_raises_message_not_found(rpc: AsyncRpcClient) -> None:
    await rpc.push("q", b"x")
    with pytest.raises(MessageNotFound):
        await rpc.done("q", "00000000-0000-4000-8000-000000000000")


async def test_bad_regex_raises_invalid_regex(rpc: AsyncRpcClient) -> None:
    with pytest.raises(InvalidRegex):
        await rpc.push_all("(", b"x")


async def test_bad_props_raise_invalid_props(rpc: AsyncRpcClient) -> None:
    with pytest.raises(InvalidProps):
        await rpc.update_props("q", {"pack": "10"})


async def test_packed_queue_delivers_a_package_of_the_pushed_values(rpc: AsyncRpcClient) -> None:
    await rpc.update_props("pk", {"pack": 0.05, "timeout": 30})
    assert await rpc.push("pk", 1) == "packing started"
    assert await rpc.push("pk", 2) == "packed"
    msg = await rpc.pull("pk", 5)
    assert msg is not None and msg.type == "compound" and msg.content == [1, 2]


async def test_push_all_and_pull_any(rpc: AsyncRpcClient) -> None:
    await rpc.update_props("lmq/foo")
    await rpc.update_props("lmq/bar")
    assert await rpc.push_all("lmq/.*", b"data") == "ok"
    got = {(await rpc.pull_any("lmq/.*", 0)).queue for _ in range(2)}  # type: ignore[union-attr]
    assert got == {"lmq/foo", "lmq/bar"}


async def test_default_props_set_and_get(rpc: AsyncRpcClient) -> None:
    await rpc.set_default_props([("^d/", {"retry": 7, "pack": 0})])
    assert await rpc.get_default_props() == [("^d/", {"retry": 7, "pack": 0})]


async def test_many_concurrent_calls_share_one_connection(rpc: AsyncRpcClient) -> None:
    # A pull parked on an empty queue must not hold up the calls sent after it.
    parked = asyncio.create_task(rpc.pull("later", 10))
    results = await asyncio.gather(*(rpc.push("many", i) for i in range(200)))
    assert results == ["ok"] * 200
    pulled = await asyncio.gather(*(rpc.pull("many", 0) for _ in range(200)))
    assert sorted(m.content for m in pulled if m is not None) == list(range(200))
    assert not parked.done()
    await rpc.push("later", b"now")
    msg = await parked
    assert msg is not None and msg.content == b"now"


async def test_error_of_one_call_does_not_disturb_others(rpc: AsyncRpcClient) -> None:
    outcome = await asyncio.gather(rpc.push("q", 1), rpc.done("q", "nope"), rpc.push("q", 2), return_exceptions=True)
    assert outcome[0] == "ok" and isinstance(outcome[1], MessageNotFound) and outcome[2] == "ok"


async def test_failover_to_the_second_address_when_the_first_refuses(node: LMQNode) -> None:
    assert node.rpc_address is not None
    async with AsyncRpcClient(*refused_address(), fallbacks=[node.rpc_address]) as c:
        assert await c.push("q", b"x") == "ok"
        assert c.address == node.rpc_address


async def test_no_node_reachable_raises_unreachable() -> None:
    async with AsyncRpcClient(*refused_address(), fallbacks=[refused_address()]) as c:
        with pytest.raises(Unreachable):
            await c.push("q", b"x")


async def test_parked_pull_ends_with_shutting_down_when_the_node_stops(node: LMQNode) -> None:
    assert node.rpc_address is not None
    async with AsyncRpcClient(*node.rpc_address) as c:
        parked = asyncio.create_task(c.pull("q"))
        await c.push("other", b"x")  # written after the pull on the same connection
        await node.stop()
        with pytest.raises(ShuttingDown):
            await parked
        with pytest.raises(Unreachable):
            await c.push("q", b"x")


async def test_calls_in_flight_fail_with_unreachable_when_the_connection_drops() -> None:
    # A peer that reads the calls and hangs up, as a node that crashes would.
    async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1)
        writer.close()

    server = await asyncio.start_server(hang_up, "127.0.0.1", 0)
    async with server, AsyncRpcClient(*server.sockets[0].getsockname()[:2]) as c:
        outcome = await asyncio.gather(c.pull("q"), c.push("q", 1), return_exceptions=True)
        assert [type(e) for e in outcome] == [Unreachable, Unreachable]


async def test_connection_is_made_again_after_it_was_lost(node: LMQNode) -> None:
    assert node.rpc_address is not None
    async with AsyncRpcClient(*node.rpc_address) as c:
        await c.push("q", 1)
        assert c._conn is not None and c._conn.transport is not None
        c._conn.transport.abort()
        await asyncio.sleep(0)  # let connection_lost run
        assert await c.push("q", 2) == "ok"


async def test_pull_many_bad_count_raises_bad_request(rpc: AsyncRpcClient) -> None:
    with pytest.raises(BadRequest, match="count must be"):
        await rpc.pull_many("q", 0)
    assert await rpc.push_many("q", [b"x", "y"]) == 2
    assert [m.content for m in await rpc.pull_many("q", 5, timeout=0)] == [b"x", "y"]
