"""Bad input on the MessagePack-RPC port gets a clear error, and loses or duplicates nothing."""

from __future__ import annotations

import asyncio
import logging
import struct
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import msgpack
import pytest

from pylmq.api.rpc_server import RpcServer
from pylmq.node import LMQNode
from tests.rpc.rpc_helpers import Connect, RawClient, open_client, until_waiting
from tests.suite_store import node_eager

StartServer = Callable[..., Awaitable[tuple[RpcServer, tuple[str, int]]]]


@pytest.fixture
async def start_server(node: LMQNode) -> AsyncIterator[StartServer]:
    """A second RpcServer on the node's manager, with limits of the test's choosing."""
    servers: list[RpcServer] = []

    async def start(**options: Any) -> tuple[RpcServer, tuple[str, int]]:
        server = RpcServer(node.manager, eager=node_eager(node), **options)
        servers.append(server)
        return server, await server.start("127.0.0.1", 0)

    yield start
    for s in servers:
        await s.close()


async def drain(client: RawClient, queue: str) -> list[Any]:
    """Every message left in ``queue`` (acked), in order."""
    out = []
    while (r := await client.call("pull", queue, 0)) != "empty":
        out.append(r["content"])
        await client.call("done", queue, r["id"])
    return out


# -- requests that are well-formed frames but wrong -----------------------------------------------


async def test_unknown_method_is_an_error_and_the_connection_goes_on(client: RawClient) -> None:
    error = await client.error("frobnicate", "q")
    assert error[0] == "unknown_method" and "frobnicate" in error[1]
    assert await client.call("push", "q", 1) == "ok"


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("push", ["q"]),
        ("push", ["q", 1, 2]),
        ("pull", []),
        ("pull", ["q", 1, 2]),
        ("push_all", ["q"]),
        ("pull_any", []),
        ("done", ["q"]),
        ("retain", ["q", "id", 1]),
        ("release", []),
        ("delete", []),
        ("update_props", ["q", {}, {}]),
        ("set_default_props", [[], []]),
        ("get_default_props", [1]),
    ],
)
async def test_wrong_number_of_arguments_is_a_bad_request(client: RawClient, method: str, params: list[Any]) -> None:
    error = await client.error(method, *params)
    assert error[0] == "bad_request" and method in error[1]


@pytest.mark.parametrize(
    ("method", "params", "reason"),
    [
        ("push", [123, "x"], "invalid_queue_name"),
        ("push", ["", "x"], "invalid_queue_name"),
        ("push", ["__lmq_info__", "x"], "invalid_queue_name"),
        ("pull", [None], "invalid_queue_name"),
        ("pull", ["q", "soon"], "bad_request"),
        ("pull", ["q", -1], "bad_request"),
        ("pull", ["q", True], "bad_request"),
        ("done", ["q", 5], "bad_request"),
        ("pull_any", [5], "invalid_regex"),
        ("pull_any", ["("], "invalid_regex"),
        ("push_all", ["(", "x"], "invalid_regex"),
        ("push_all", [["a"], "x"], "invalid_regex"),
        ("update_props", ["q", [1]], "invalid_props"),
        ("update_props", ["q", {"pack": "10"}], "invalid_props"),
        ("update_props", ["q", {"retry": -1}], "invalid_props"),
        ("update_props", ["q", {"colour": 1}], "invalid_props"),
        ("set_default_props", ["x"], "invalid_props"),
        ("set_default_props", [[["a/"]]], "invalid_props"),
    ],
)
async def test_wrong_argument_types_get_a_clear_error(
    client: RawClient, method: str, params: list[Any], reason: str
) -> None:
    error = await client.error(method, *params)
    assert isinstance(error, list) and error[0] == reason and isinstance(error[1], str) and error[1]


async def test_error_quoting_a_huge_argument_is_cut_short(client: RawClient) -> None:
    error = await client.error("update_props", "q", {"retry": "x" * 100_000})
    assert error[0] == "invalid_props" and len(error[1]) < 1000


@pytest.mark.parametrize("method", ["done", "retain", "release"])
async def test_unknown_or_malformed_id_is_not_found(client: RawClient, method: str) -> None:
    await client.call("push", "q", "kept")
    assert (await client.error(method, "q", str(uuid.uuid4())))[0] == "not_found"
    assert (await client.error(method, "q", "not-a-uuid"))[0] == "not_found"
    assert await drain(client, "q") == ["kept"]


@pytest.mark.parametrize("method", ["done", "retain", "release"])
async def test_id_on_an_unknown_queue_is_queue_not_found(client: RawClient, method: str) -> None:
    assert (await client.error(method, "nope", str(uuid.uuid4())))[0] == "queue_not_found"


async def test_request_of_the_wrong_shape_with_a_msgid_is_answered(client: RawClient) -> None:
    client.send(msgpack.packb([0, 77, 5, []]))
    client.send(msgpack.packb([0, 78, "push", "not an array"]))
    assert (await client.response(77))[0][0] == "bad_message"
    assert (await client.response(78))[0][0] == "bad_message"
    assert await client.call("push", "q", 1) == "ok"


async def test_notification_runs_the_method_without_a_reply(client: RawClient) -> None:
    client.send(msgpack.packb([2, "push", ["q", "noted"]]))
    client.send(msgpack.packb([2, "frobnicate", []]))
    assert await client.call("get_default_props") == []
    # Nothing tells when a notification is done, and requests run concurrently: its push shows
    # to a pull that waits for it (at once on an in-process store, after a commit on a remote one).
    r = await client.call("pull", "q", 5)
    assert r["content"] == "noted"
    await client.call("done", "q", r["id"])
    assert await drain(client, "q") == []
    assert client.other == []


async def test_pull_is_not_run_as_a_notification(client: RawClient) -> None:
    await client.call("push", "q", "stays")
    client.send(msgpack.packb([2, "pull", ["q", 0]]))
    assert await client.call("get_default_props") == []
    assert await drain(client, "q") == ["stays"]


# -- byte streams that are not requests: error if a msgid can be read, then close -------------------


async def test_garbage_closes_the_connection_and_loses_nothing(connect: Connect, node: LMQNode) -> None:
    a = await connect()
    for i in range(5):
        assert await a.call("push", "q", i) == "ok"
    a.send(b"\xc1\xc1 this is not msgpack \x00\xff")
    assert await a.closed_by_server()
    b = await connect()
    assert await b.call("push", "q", 5) == "ok"
    assert await drain(b, "q") == [0, 1, 2, 3, 4, 5]
    assert node.store.size("q") == 0


async def test_text_on_the_rpc_port_closes_the_connection(connect: Connect) -> None:
    a = await connect()
    a.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    assert await a.closed_by_server()
    assert (await connect()) is not None and await (await connect()).call("push", "q", 1) == "ok"


async def test_broken_frame_with_a_readable_msgid_is_answered_then_closed(client: RawClient) -> None:
    client.send(b"\x94\x00\x2a\xa4push\xc1")
    error, _ = await client.response(42)
    assert error[0] == "bad_message"
    assert await client.closed_by_server()


async def test_a_response_sent_by_the_client_closes_the_connection(client: RawClient) -> None:
    client.send(msgpack.packb([1, 1, None, "ok"]))
    assert await client.closed_by_server()


async def test_requests_before_garbage_in_the_same_write_are_all_answered(client: RawClient) -> None:
    ids = [client.request("push", "q", i) for i in range(3)]
    client.send(b"\xc1")
    assert await client.closed_by_server()
    assert [client.responses.get(i) for i in ids] == [(None, "ok")] * 3


async def test_oversized_frame_gets_too_large_and_the_connection_closes(
    start_server: StartServer, node: LMQNode
) -> None:
    _, address = await start_server(max_message_size=4096)
    c = await open_client(address)
    try:
        assert await c.call("push", "q", b"small") == "ok"
        msgid = c.request("push", "q", b"x" * 10_000)
        error, _ = await c.response(msgid)
        assert error[0] == "too_large" and "4096" in error[1]
        assert await c.closed_by_server()
    finally:
        await c.close()
    assert node.store.size("q") == 1


async def test_frame_announcing_a_huge_array_is_refused_at_once(start_server: StartServer, node: LMQNode) -> None:
    _, address = await start_server(max_message_size=4096)
    c = await open_client(address)
    try:
        c.send(b"\x94\x00\x09\xa4push\x92\xa1q\xdd" + struct.pack(">I", 2**32 - 1))
        error, _ = await c.response(9)
        assert error[0] == "too_large"
        assert await c.closed_by_server()
    finally:
        await c.close()
    assert node.store.size("q") == 0


async def test_truncated_frame_does_nothing_to_the_queue(connect: Connect, node: LMQNode) -> None:
    a = await connect()
    await a.call("push", "q", "before")
    frame = msgpack.packb([0, 99, "push", ["q", "never"]])
    a.send(frame[:-3])
    await a.writer.drain()
    await a.close()
    b = await connect()
    assert await drain(b, "q") == ["before"]


# -- connections going away -----------------------------------------------------------------------------


async def test_client_disconnecting_during_a_long_poll_loses_no_message(connect: Connect, node: LMQNode) -> None:
    a = await connect()
    a.request("pull", "q")
    queue = await until_waiting(node, "q")
    await a.close()
    for _ in range(100):
        if not queue.has_waiters():
            break
        await asyncio.sleep(0.01)
    assert not queue.has_waiters(), "the server should have cancelled the pull of a client that left"
    b = await connect()
    await b.call("push", "q", "for b")
    r = await b.call("pull", "q", 1)
    assert (r["content"], r["retry"]) == ("for b", 2)


async def test_client_disconnecting_during_a_pull_any_loses_no_message(connect: Connect) -> None:
    a = await connect()
    a.request("pull_any", "^q")
    assert await a.call("get_default_props") == []
    await a.close()
    b = await connect()
    await b.call("push", "q1", "kept")
    r = await b.call("pull_any", "^q", 1)
    assert (r["content"], r["retry"]) == ("kept", 2)


async def test_client_resetting_right_after_its_pull_loses_no_message(connect: Connect) -> None:
    # Whether the reply was written before the reset or not, the message must come back: put
    # back at once (retry intact) or, if it reached the socket, redelivered after its timeout.
    a = await connect()
    await a.call("update_props", "q", {"timeout": 0.3})
    await a.call("push", "q", "m")
    a.request("pull", "q", 0)
    a.writer.transport.abort()
    b = await connect()
    r = await b.call("pull", "q", 3)
    assert r["content"] == "m" and r["retry"] in (1, 2)
    assert await b.call("done", "q", r["id"]) == "ok"


async def test_half_closed_client_gets_its_answers_and_waiting_pulls_end(client: RawClient, node: LMQNode) -> None:
    push = client.request("push", "q", "sent before eof")
    poll = client.request("pull", "empty-q")
    client.writer.write_eof()
    assert await client.response(push) == (None, "ok")
    assert (await client.response(poll))[0][0] == "connection_closed"
    assert await client.closed_by_server()
    assert node.store.size("q") == 1


async def test_connection_at_max_inflight_reads_nothing_more_until_one_ends(
    start_server: StartServer, node: LMQNode
) -> None:
    _, address = await start_server(max_inflight=2)
    c = await open_client(address)
    try:
        first = c.request("pull", "bp", 0.1)
        second = c.request("pull", "bp", 5)
        await c.writer.drain()
        for _ in range(100):
            queue = node.manager.get("bp")
            if queue is not None and queue.has_waiters():
                break
            await asyncio.sleep(0.01)
        # Not read while both pulls run; read when the first gives up, so the second gets it.
        push = c.request("push", "bp", "after the first")
        assert await c.response(first) == (None, "empty")
        assert await c.response(push) == (None, "ok")
        error, r = await c.response(second)
        assert error is None and r["content"] == "after the first"
    finally:
        await c.close()


async def test_many_pipelined_pushes_are_all_stored_once(client: RawClient, node: LMQNode) -> None:
    ids = [client.request("push", "q", i) for i in range(500)]
    for i in ids:
        assert await client.response(i) == (None, "ok")
    assert node.store.size("q") == 500
    # Pipelined requests run concurrently (docs/lmq-contract.md): stored once each, in any order.
    assert sorted(await drain(client, "q")) == list(range(500))


# -- server shutdown -------------------------------------------------------------------------------------


async def test_close_answers_waiting_pulls_and_closes_connections(start_server: StartServer, node: LMQNode) -> None:
    server, address = await start_server()
    c = await open_client(address)
    try:
        poll = c.request("pull", "q")
        await until_waiting(node, "q")
        await server.close()
        error, _ = await c.response(poll)
        assert error[0] == "shutting_down"
        assert await c.closed_by_server()
    finally:
        await c.close()
    with pytest.raises(OSError):
        await open_client(address)
    queue = node.manager.get("q")
    assert queue is not None and not queue.has_waiters()


async def test_access_line_is_logged_at_info(client: RawClient, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="pylmq.access"):
        await client.call("push", "logged-q", 1)
        await client.error("done", "logged-q", "bad")
    lines = [r.getMessage() for r in caplog.records if r.name == "pylmq.access"]
    assert any(" push logged-q ok " in line for line in lines), lines
    assert any(" done logged-q not_found " in line for line in lines), lines
