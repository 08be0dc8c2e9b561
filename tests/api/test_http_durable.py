"""The HTTP API over the durable store: same answers, and what was answered survives a restart."""

from __future__ import annotations

import asyncio
import socket

import aiohttp
import pytest

from tests.api.api_helpers import StartNode

# `start` (tests/api/conftest.py) starts a durable node on the test's data directory and returns
# it with an Api bound to it; every node it started is stopped at the end of the test.


async def test_push_pull_ack_on_the_durable_store(start: StartNode) -> None:
    _, api = await start()
    assert (await api.push("d", b"x", "text/plain")).body == b'{"accum":"no"}'
    r = await api.pull("d")
    assert (r.status, r.body, r.headers["content-type"], r.retry) == (200, b"x", "text/plain", "2"), r
    assert (await api.ack("d", r.id)).status == 204
    assert (await api.pull("d")).status == 204


async def test_pushed_message_survives_a_restart(start: StartNode) -> None:
    node, api = await start()
    await api.push("keep", b"durable", "application/json")
    await node.stop()
    _, api = await start()
    r = await api.pull("keep")
    assert (r.status, r.body, r.headers["content-type"]) == (200, b"durable", "application/json"), r


async def test_acked_message_stays_gone_after_a_restart(start: StartNode) -> None:
    node, api = await start()
    await api.push("gone", b"x")
    await api.ack("gone", (await api.pull("gone")).id)
    await node.stop()
    _, api = await start()
    assert (await api.pull("gone")).status == 204


async def test_properties_survive_a_restart(start: StartNode) -> None:
    node, api = await start()
    await api.set_props("p", retry=7, timeout=3)
    body = b'[["^x",{"accum":1}]]'
    await api.request("PUT", "/properties", data=body)
    await node.stop()
    _, api = await start()
    assert (await api.props("p")).json() == {"accum": 0, "retry": 7, "timeout": 3}
    assert (await api.request("GET", "/properties")).body == body


async def test_compound_message_survives_a_restart(start: StartNode) -> None:
    node, api = await start()
    await api.set_props("c", accum=0.1)
    await api.push("c", b"1")
    await api.push("c", b"2")
    await node.stop()
    _, api = await start()
    r = await api.pull("c", t=2, cf="msgpack")
    assert (r.status, r.headers["x-lmq-message-type"]) == (200, "compound"), r


async def test_gone_long_poll_client_loses_nothing_on_the_durable_store(start: StartNode) -> None:
    node, api = await start()
    with pytest.raises(asyncio.TimeoutError):
        await api.session.get(api.url("/messages/lp"), timeout=aiohttp.ClientTimeout(total=0.1))
    for _ in range(300):
        q = node.manager.get("lp")
        if q is not None and not q.has_waiters():
            break
        await asyncio.sleep(0.01)
    await api.push("lp", b"kept")
    r = await api.pull("lp", t=2)
    assert (r.status, r.body, r.retry) == (200, b"kept", "2"), r


async def test_message_put_back_after_a_failed_write_survives_a_restart(start: StartNode) -> None:
    node, api = await start()
    await api.push("pb", b"x" * (16 * 1024 * 1024))
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    assert node.http_address is not None
    await asyncio.get_running_loop().sock_connect(sock, node.http_address)
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(b"GET /messages/pb?t=0 HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (await reader.readline()).startswith(b"HTTP/1.1 200")
    writer.transport.abort()
    for _ in range(300):
        if node.store.waittime("pb") == 0:
            break
        await asyncio.sleep(0.01)
    await node.stop()
    _, api = await start()
    r = await api.pull("pb")
    assert (r.status, len(r.body), r.retry) == (200, 16 * 1024 * 1024, "2"), r.status
