"""Red-team findings on the credential of the HTTP API: a token a user puts where the node does
not take it (the query string of RFC 6750's ``access_token`` form, a client URL's user info)
must not end up in a log, and must not be thrown away without a word."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest

from pylmq.client import AsyncHttpClient, HttpClient, parse_http_urls
from pylmq.errors import BadRequest, Unauthorized
from pylmq.node import LMQNode, NodeOptions
from tests.api.api_helpers import Api, base_url

TOKEN = "s3cret-token-0123456789"


@pytest.fixture
async def guarded(session: aiohttp.ClientSession) -> AsyncIterator[Api]:
    n = LMQNode(NodeOptions(http=("127.0.0.1", 0), rpc=None, store="memory", http_tokens=(TOKEN,)))
    await n.start()
    try:
        yield Api(session, base_url(n))
    finally:
        await n.stop()


async def test_a_token_sent_in_the_query_string_is_not_written_to_the_access_log(
    guarded: Api, caplog: pytest.LogCaptureFixture
) -> None:
    # RFC 6750 section 2.3 allows ?access_token=; users try it (and ?token=). The node refuses
    # it (401: only the header counts) but its access log wrote the target as sent, secret included.
    caplog.set_level(logging.INFO, logger="pylmq.access")
    sent: list[tuple[str, str, dict[str, object]]] = [
        ("GET", "/messages/q", {"t": 0, "access_token": TOKEN}),
        ("GET", "/peek/q", {"n": 1, "token": TOKEN}),
        ("GET", "/console/api/overview", {"limit": 5, "ACCESS_TOKEN": TOKEN, "filter": "x"}),
    ]
    for method, path, query in sent:
        r = await guarded.request(method, path, query)
        assert r.status == 401, r
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "pylmq.access"]
    assert len(lines) == 3, lines
    assert not [line for line in lines if TOKEN in line], lines
    # The rest of the target is still logged as sent, so the log stays useful.
    assert lines[1].startswith("GET /peek/q?n=1&token=") and lines[2].endswith(" 401 " + lines[2].split()[-1])
    assert "limit=5&ACCESS_TOKEN=" in lines[2] and "&filter=x " in lines[2]


@pytest.mark.parametrize("userinfo", [f":{TOKEN}@", f"me:{TOKEN}@", f"{TOKEN}@"])
async def test_a_token_in_a_client_url_is_refused_at_once_without_being_quoted(guarded: Api, userinfo: str) -> None:
    # curl takes http://:TOKEN@host; the clients dropped the user info without a word, so the
    # node answered 401 to a user sure to have sent the credential (and Spark's `url` option
    # went on to carry the secret around). Now the URL is refused, pointing at token=.
    url = guarded.base.replace("http://", "http://" + userinfo)
    for make in (lambda: HttpClient(url), lambda: AsyncHttpClient(url), lambda: parse_http_urls(["h:1", url])):
        with pytest.raises(BadRequest) as refused:
            make()
        assert TOKEN not in str(refused.value) and "token=" in str(refused.value), refused.value
    # The same credential as token= works.
    client = AsyncHttpClient(guarded.base, token=TOKEN)
    try:
        await client.push("q", b"x")
        assert (await client.peek("q"))[0]["size"] == 1
    finally:
        await client.close()


def _head_then_first_line(port: int, head: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(head)
        return s.recv(4096).split(b"\r\n", 1)[0]


async def test_a_request_without_the_token_is_refused_before_its_body_is_read(guarded: Api) -> None:
    # The credential was checked only once the whole body was in: an anonymous client could make
    # the node say 100 Continue and take (and hold, against the buffer budget shared with everyone)
    # up to 64 MiB per request before hearing 401. Now the 401 comes right after the headers.
    port = int(guarded.base.rsplit(":", 1)[1])
    loop = asyncio.get_running_loop()
    big = b"Content-Length: 50000000\r\n"
    for target, extra in (
        (b"/messages/q", b"Expect: 100-continue\r\n"),
        (b"/batch/q", b""),  # no Expect: the node would wait for 50 MB that never come
        (b"/properties/q", b"Authorization: Bearer wrong-token-0123456789\r\n"),
        (b"/no/such/path", b""),  # read whole before its 404
        (b"/stats", b""),  # open under protect=mutating, but no open route takes a body
        (b"/console/api/overview", b""),
    ):
        method = {b"/properties/q": b"PATCH", b"/stats": b"GET"}.get(target, b"POST")
        head = method + b" " + target + b" HTTP/1.1\r\nHost: x\r\n" + big + extra + b"\r\n"
        first = await loop.run_in_executor(None, _head_then_first_line, port, head)
        assert first == b"HTTP/1.1 401 Unauthorized", (target, first)
    # With the token, the same head is asked for its body (what LMQ does), not refused.
    head = b"POST /messages/q HTTP/1.1\r\nHost: x\r\n" + big + b"Expect: 100-continue\r\n"
    head += f"Authorization: Bearer {TOKEN}\r\n\r\n".encode()
    assert await loop.run_in_executor(None, _head_then_first_line, port, head) == b"HTTP/1.1 100 Continue"
    # A client without the token still reads the 401, not a reset, though its body is unread.
    client = AsyncHttpClient(guarded.base)
    try:
        with pytest.raises(Unauthorized):
            await client.push("q", b"x" * (8 * 1024 * 1024))
    finally:
        await client.close()
    # Open routes still answer without the token (when they carry no body).
    r = await guarded.request("GET", "/stats")
    assert r.status == 200
