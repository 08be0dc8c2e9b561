"""A client that goes away does not take a message with it (docs/lmq-contract.md#message-states-and-redelivery)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable

import aiohttp
import pytest

from pylmq.node import LMQNode
from tests.api.api_helpers import Api


async def _eventually(cond: Callable[[], bool], what: str, timeout: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def _waiting(node: LMQNode, name: str) -> bool:
    q = node.manager.get(name)
    return q is not None and q.has_waiters()


async def _open_raw_get(
    node: LMQNode, target: str, rcvbuf: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert node.http_address is not None
    host, port = node.http_address
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    reader, writer = await asyncio.open_connection(sock=sock)
    writer.write(f"GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    await writer.drain()
    return reader, writer


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()


async def test_message_pushed_after_a_long_poll_client_left_goes_to_the_next_puller(node: LMQNode, api: Api) -> None:
    _, writer = await _open_raw_get(node, "/messages/lp")
    await _eventually(lambda: _waiting(node, "lp"), "the long poll to be waiting")
    await _close(writer)
    await _eventually(lambda: not _waiting(node, "lp"), "the server to drop the gone client's wait")
    await api.push("lp", b"kept")
    r = await api.pull("lp", t=2)
    assert (r.status, r.body, r.retry) == (200, b"kept", "2"), f"expected the message with retry intact, got {r!r}"
    assert (await api.pull("lp", t=0)).status == 204, "the message must be delivered once"


async def test_message_racing_a_closing_long_poll_is_not_lost(node: LMQNode, api: Api) -> None:
    # The push may reach the gone client's waiter before the server sees the close; then the
    # message is put back (or, if it was already written out, redelivered after the timeout).
    await api.set_props("race", timeout=0.2)
    for i in range(5):
        _, writer = await _open_raw_get(node, "/messages/race")
        await _eventually(lambda: _waiting(node, "race"), "the long poll to be waiting")
        await _close(writer)
        await api.push("race", str(i))
        r = await api.pull("race", t=2)
        assert (r.status, r.body) == (200, str(i).encode()), f"round {i}: message lost, got {r!r}"
        assert (await api.ack("race", r.id)).status == 204
        assert (await api.pull("race", t=0)).status == 204, f"round {i}: message duplicated"


async def test_pull_any_long_poll_client_leaving_loses_nothing(node: LMQNode, api: Api) -> None:
    await api.set_props("lpa/x")
    timeout = aiohttp.ClientTimeout(total=0.2)
    with pytest.raises(asyncio.TimeoutError):
        await api.session.get(api.url("/messages", {"qre": "^lpa/"}), timeout=timeout)
    await _eventually(lambda: not _waiting(node, "lpa/x"), "the server to drop the gone client's wait")
    await api.push("lpa/x", b"kept")
    r = await api.pull_any("^lpa/", t=2)
    assert (r.status, r.body, r.retry) == (200, b"kept", "2"), r


async def test_client_timing_out_like_lmqs_accidentally_closed_test(node: LMQNode, api: Api) -> None:
    timeout = aiohttp.ClientTimeout(total=0.1)
    with pytest.raises(asyncio.TimeoutError):
        await api.session.get(api.url("/messages/acc-closed"), timeout=timeout)
    await _eventually(lambda: not _waiting(node, "acc-closed"), "the server to drop the gone client's wait")
    await api.push("acc-closed", b'{"testcase":"accidentally_closed"}', "application/json")
    r = await api.pull("acc-closed", t=2)
    assert (r.status, r.headers["content-type"], r.retry) == (200, "application/json", "2"), r


async def test_client_leaving_while_its_message_is_written_gets_it_put_back(node: LMQNode, api: Api) -> None:
    # A body far larger than the socket buffers: the server is still writing it when the client,
    # having read only the status line, closes. The message goes back with its retry intact.
    body = b"x" * (16 * 1024 * 1024)
    await api.push("midway", body)
    reader, writer = await _open_raw_get(node, "/messages/midway?t=0", rcvbuf=4096)
    status = await reader.readline()
    assert status.startswith(b"HTTP/1.1 200"), status
    writer.transport.abort()
    await _eventually(lambda: node.store.waittime("midway") == 0, "the message to be put back")
    r = await api.pull("midway", t=0)
    assert (r.status, len(r.body), r.retry) == (200, len(body), "2"), f"expected the body back, retry 2: {r.status}"


async def test_client_closing_right_after_its_request_loses_nothing(node: LMQNode, api: Api) -> None:
    # Whether the server notices before or after writing the answer, the message comes back:
    # put back at once, or redelivered when its (short) timeout passes.
    await api.set_props("quick", timeout=0.2)
    await api.push("quick", b"m")
    _, writer = await _open_raw_get(node, "/messages/quick?t=0")
    await _close(writer)
    r = await api.pull("quick", t=2)
    assert (r.status, r.body) == (200, b"m"), r
    assert r.retry in ("2", "1"), r
