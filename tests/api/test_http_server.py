"""The HTTP/1.1 framing of pylmq.api.http_server, over raw sockets: pipelining, keep-alive,
chunked bodies, Expect, limits, malformed requests, idle connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pylmq.api.http import HttpApi
from pylmq.api.http_server import MAX_HEAD, MAX_PIPELINE, MAX_TARGET, HttpServer
from pylmq.node import LMQNode
from tests.api.api_helpers import Api
from tests.suite_store import node_eager


class Raw:
    """One client connection speaking bytes, reading Content-Length framed responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 5)
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ")[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if status == 100:
            return status, headers, b""
        length = int(headers.get("content-length", "0"))
        return status, headers, await asyncio.wait_for(self.reader.readexactly(length), 5)

    async def body_of(self, status: int) -> bytes:
        got, _, body = await self.response()
        assert got == status, (got, body)
        return body

    async def closed(self) -> bool:
        """Whether the server closed the connection (nothing more comes)."""
        try:
            return await asyncio.wait_for(self.reader.read(), 5) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.writer.close()


@pytest.fixture
async def server(node: LMQNode) -> AsyncIterator[HttpServer]:
    srv = HttpServer(HttpApi(node.manager), eager=node_eager(node), max_body=1024, keepalive_timeout=0.3)
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close()


@pytest.fixture
async def raw(server: HttpServer) -> AsyncIterator[Raw]:
    assert server._listener is not None
    host, port = server._listener.sockets[0].getsockname()[:2]
    conn = Raw(*await asyncio.open_connection(host, port))
    yield conn
    conn.close()


def push(name: str, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST /messages/%s HTTP/1.1\r\nHost: t\r\n%sContent-Length: %d\r\n\r\n%s" % (
        name.encode(),
        extra,
        len(body),
        body,
    )


def pull(name: str) -> bytes:
    return b"GET /messages/%s?t=0 HTTP/1.1\r\nHost: t\r\n\r\n" % name.encode()


async def test_pipelined_requests_are_answered_in_order(raw: Raw) -> None:
    await raw.send(push("pipe", b"one") + push("pipe", b"two") + pull("pipe") + pull("pipe") + pull("pipe"))
    assert await raw.body_of(200) == b'{"accum":"no"}'
    assert await raw.body_of(200) == b'{"accum":"no"}'
    assert await raw.body_of(200) == b"one"
    assert await raw.body_of(200) == b"two"
    assert await raw.body_of(204) == b""


async def test_more_pipelined_requests_than_are_queued_at_once_are_all_answered(raw: Raw, node: LMQNode) -> None:
    n = MAX_PIPELINE * 4
    await raw.send(b"".join(push("flood", b"%d" % i) for i in range(n)))
    for _ in range(n):
        await raw.body_of(200)
    assert node.store.size("flood") == n


async def test_a_chunked_body_is_stored_whole(raw: Raw) -> None:
    await raw.send(
        b"POST /messages/chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    )
    await raw.body_of(200)
    await raw.send(pull("chunked"))
    assert await raw.body_of(200) == b"hello world"


async def test_a_chunked_body_over_the_limit_is_413_and_queues_nothing(raw: Raw, node: LMQNode) -> None:
    chunk = b"x" * 600
    await raw.send(b"POST /messages/big HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
    await raw.send(b"258\r\n" + chunk + b"\r\n" + b"258\r\n" + chunk + b"\r\n0\r\n\r\n")
    status, headers, body = await raw.response()
    assert (status, body) == (413, b'{"error":"too_large","detail":"the request body is over 1024 bytes"}')
    assert headers["connection"] == "close"
    assert await raw.closed()
    assert node.manager.get("big") is None


async def test_content_length_over_the_limit_is_413_before_the_body_is_sent(raw: Raw) -> None:
    await raw.send(b"POST /messages/big HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n")
    status, _, _ = await raw.response()
    assert status == 413
    assert await raw.closed()


async def test_expect_100_continue_is_answered_before_the_body(raw: Raw) -> None:
    await raw.send(b"POST /messages/exp HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n")
    status, _, _ = await raw.response()
    assert status == 100
    await raw.send(b"ok")
    assert await raw.body_of(200) == b'{"accum":"no"}'


async def test_an_unknown_expectation_is_417(raw: Raw) -> None:
    await raw.send(b"POST /messages/exp HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: magic\r\n\r\nok")
    body = await raw.body_of(417)
    assert b'"expectation_failed"' in body
    assert await raw.closed()


async def test_connection_close_is_honoured_after_the_answer(raw: Raw) -> None:
    await raw.send(push("cc", b"x", b"Connection: close\r\n"))
    status, headers, _ = await raw.response()
    assert (status, headers["connection"]) == (200, "close")
    assert await raw.closed()


async def test_http_10_closes_unless_keep_alive_is_asked(raw: Raw, server: HttpServer) -> None:
    await raw.send(b"GET /messages/old?t=0 HTTP/1.0\r\n\r\n")
    status, _, _ = await raw.response()
    assert status == 204
    assert await raw.closed()
    assert server._listener is not None
    host, port = server._listener.sockets[0].getsockname()[:2]
    again = Raw(*await asyncio.open_connection(host, port))
    try:
        for _ in range(2):
            await again.send(b"GET /messages/old?t=0 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            status, headers, _ = await again.response()
            assert (status, headers["connection"]) == (204, "keep-alive")
    finally:
        again.close()


async def test_a_malformed_request_is_400_after_the_answers_before_it(raw: Raw, node: LMQNode) -> None:
    await raw.send(push("mal", b"kept") + b"NOT HTTP AT ALL\r\n\r\n")
    assert await raw.body_of(200) == b'{"accum":"no"}'
    status, headers, body = await raw.response()
    assert status == 400 and b'"bad_request"' in body, body
    assert headers["connection"] == "close"
    assert await raw.closed()
    assert node.store.size("mal") == 1


async def test_a_target_over_the_limit_is_414(raw: Raw) -> None:
    await raw.send(b"GET /messages/" + b"a" * MAX_TARGET + b" HTTP/1.1\r\nHost: t\r\n\r\n")
    assert b'"uri_too_long"' in await raw.body_of(414)
    assert await raw.closed()


async def test_headers_over_the_limit_are_431(raw: Raw) -> None:
    filler = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"v" * 1000) for i in range(MAX_HEAD // 1000 + 1))
    await raw.send(b"GET /messages/h?t=0 HTTP/1.1\r\nHost: t\r\n" + filler + b"\r\n")
    assert b'"headers_too_large"' in await raw.body_of(431)


async def test_head_gets_the_405_headers_without_a_body(raw: Raw) -> None:
    await raw.send(b"HEAD /messages/h HTTP/1.1\r\nHost: t\r\n\r\n" + pull("h"))
    head = await asyncio.wait_for(raw.reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 405 ") and b"Content-Length: " in head, head
    # No body follows the 405: the next bytes are the next answer's status line.
    assert (await raw.response())[0] == 204


async def test_answers_carry_date_and_server(raw: Raw) -> None:
    await raw.send(pull("dated"))
    status, headers, _ = await raw.response()
    assert status == 204
    assert headers["date"].endswith(" GMT") and headers["server"] == "pylmq"


async def test_an_upgrade_request_is_answered_then_the_connection_closes(raw: Raw) -> None:
    await raw.send(b"GET /messages/up?t=0 HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
    status, headers, _ = await raw.response()
    assert (status, headers["connection"]) == (204, "close")
    assert await raw.closed()


async def test_an_idle_keep_alive_connection_is_closed_after_the_timeout(raw: Raw) -> None:
    await raw.send(pull("idle"))
    await raw.body_of(204)
    assert await raw.closed(), "the server must close a connection idle past keepalive_timeout (0.3 s)"


async def test_a_long_poll_is_not_idle(raw: Raw, node: LMQNode, api: Api) -> None:
    await raw.send(b"GET /messages/lp?t=1 HTTP/1.1\r\nHost: t\r\n\r\n")
    await asyncio.sleep(0.8)  # past keepalive_timeout: still waiting, not closed
    await api.push("lp", b"late")
    assert await raw.body_of(200) == b"late"
