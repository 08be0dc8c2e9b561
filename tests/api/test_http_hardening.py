"""The HTTP server under hostile or broken clients: memory of aborted uploads is freed at once,
slow clients are timed out, connections are capped, odd request targets and deep JSON are 400."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import os
import re
import resource
import sys
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest

from pylmq.api._limits import RESERVED_FDS, ConnectionLimit, default_max_connections
from pylmq.api.http import HttpApi
from pylmq.api.http_server import HttpServer
from pylmq.config import load_settings
from pylmq.node import LMQNode
from pylmq.node.service import node_options
from tests.api.api_helpers import Api
from tests.suite_store import SuiteOptions, node_eager


@contextlib.contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """What a node runs with (collector frozen, high threshold) taken to the limit: only
    refcounting frees anything."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


async def _eventually(cond: Callable[[], object], what: str, timeout: float = 3.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


@pytest.fixture
async def server(node: LMQNode) -> AsyncIterator[HttpServer]:
    srv = HttpServer(HttpApi(node.manager), eager=node_eager(node), max_body=1 << 20)
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close()


def _address(server: HttpServer) -> tuple[str, int]:
    assert server._listener is not None
    host, port = server._listener.sockets[0].getsockname()[:2]
    return host, port


async def test_a_connection_closed_mid_upload_is_freed_without_the_cyclic_collector(server: HttpServer) -> None:
    with no_cyclic_gc():
        _, writer = await asyncio.open_connection(*_address(server))
        writer.write(b"POST /messages/big HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 300_000)
        await writer.drain()
        await _eventually(lambda: any(c._body_size > 0 for c in server.connections), "the body to be read")
        (conn,) = server.connections
        dead = weakref.ref(conn)
        del conn
        writer.close()
        await _eventually(lambda: not server.connections, "the server to see the client leave")
        await asyncio.sleep(0)
        assert dead() is None, f"the connection is still referred to by {gc.get_referrers(dead())!r}"


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads RSS from /proc")
async def test_repeated_aborted_large_uploads_do_not_grow_a_nodes_memory(tmp_path: Path) -> None:
    # A real node process, its collector tuned as in production (python -m pylmq).
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pylmq", "--store", "memory", "--http", "127.0.0.1:0", "--rpc", "127.0.0.1:0",
        "--qs", "off", "--sqs", "off", "--statsd", "off", "--data-dir", str(tmp_path),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        match = re.search(r"http=\('([\d.]+)', (\d+)\)", ready)
        assert match, ready
        address = match.group(1), int(match.group(2))
        mib = 20
        chunk = b"x" * (1 << 20)

        async def aborted_upload() -> None:
            _, writer = await asyncio.open_connection(*address)
            writer.write(b"POST /messages/big HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % ((mib + 1) << 20))
            for _ in range(mib):
                writer.write(chunk)
                await writer.drain()
            writer.transport.abort()

        await aborted_upload()  # the first one sizes the allocator's pools
        await asyncio.sleep(0.2)
        before = _rss_kib(proc.pid)
        for _ in range(8):
            await aborted_upload()
        await asyncio.sleep(0.5)
        grown = (_rss_kib(proc.pid) - before) // 1024
        # Kept, 8 aborted uploads would hold 160 MiB; freed, the next one reuses the memory.
        assert grown < 3 * mib, f"RSS grew by {grown} MiB over 8 aborted uploads of {mib} MiB"
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)


async def _raw(server: HttpServer) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*_address(server))


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status and body of one answer, then whether the server closed the connection after it."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    status = int(head.split(b" ", 2)[1])
    length = int(re.search(rb"Content-Length: (\d+)", head).group(1))  # type: ignore[union-attr]
    return status, await asyncio.wait_for(reader.readexactly(length), 5)


async def _closed(reader: asyncio.StreamReader, timeout: float = 5) -> bool:
    """Whether the server closes the connection within ``timeout`` (it sends nothing before)."""
    try:
        return await asyncio.wait_for(reader.read(), timeout) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(node: LMQNode) -> None:
    srv = HttpServer(HttpApi(node.manager), eager=node_eager(node), max_body=1024)
    await srv.start("127.0.0.1", 0)
    try:
        reader, writer = await _raw(srv)
        # 1,100 bytes of a body that never ends: the 413 must not wait for its end.
        writer.write(b"POST /messages/c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        writer.write(b"44c\r\n" + b"x" * 1100 + b"\r\n")
        status, body = await _answer(reader)
        assert (status, json.loads(body)["error"]) == (413, "too_large")
        assert await _closed(reader)
        writer.close()
    finally:
        await srv.close()
    assert node.manager.get("c") is None


@pytest.fixture
async def slow_server(node: LMQNode) -> AsyncIterator[HttpServer]:
    # The timeouts alone: the receive rate has its own tests (test_http_buffers).
    srv = HttpServer(
        HttpApi(node.manager),
        eager=node_eager(node),
        header_timeout=0.3,
        body_timeout=0.3,
        keepalive_timeout=60,
        min_receive_rate=0,
    )
    await srv.start("127.0.0.1", 0)
    yield srv
    await srv.close()


async def test_a_head_trickling_in_byte_by_byte_is_408_at_its_deadline(slow_server: HttpServer) -> None:
    reader, writer = await _raw(slow_server)
    request = b"GET /messages/slow?t=0 HTTP/1.1\r\nHost: t\r\nX-Pad: " + b"a" * 100
    loop = asyncio.get_running_loop()
    start = loop.time()
    answer = asyncio.ensure_future(_answer(reader))
    for byte in request:  # one byte every 20 ms: each is well within any per-byte timeout
        if answer.done():
            break
        writer.write(bytes((byte,)))
        await asyncio.sleep(0.02)
    status, body = await answer
    assert (status, json.loads(body)["error"]) == (408, "request_timeout"), body
    assert loop.time() - start < 2.5, "the head's deadline runs from its first byte"
    assert await _closed(reader)
    writer.close()


async def test_a_stalled_body_is_408(slow_server: HttpServer, node: LMQNode) -> None:
    reader, writer = await _raw(slow_server)
    writer.write(b"POST /messages/stall HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
    status, body = await _answer(reader)
    assert (status, json.loads(body)["error"]) == (408, "request_timeout"), body
    assert await _closed(reader)
    writer.close()
    assert node.manager.get("stall") is None


async def test_a_steady_body_and_a_long_poll_are_not_timed_out(
    slow_server: HttpServer, node: LMQNode, api: Api
) -> None:
    reader, writer = await _raw(slow_server)
    writer.write(b"POST /messages/steady HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n")
    for _ in range(10):  # 1 s in all, a byte every 0.1 s: never 0.3 s without one
        writer.write(b"x")
        await asyncio.sleep(0.1)
    assert (await _answer(reader))[0] == 200
    writer.write(b"GET /messages/lp?t=2 HTTP/1.1\r\nHost: t\r\n\r\n")
    await asyncio.sleep(0.8)  # the long poll is being answered, not read
    await api.push("lp", b"late")
    assert await _answer(reader) == (200, b"late")
    writer.close()


async def test_connections_past_the_limit_get_503_and_one_log_line(
    node: LMQNode, caplog: pytest.LogCaptureFixture
) -> None:
    # evict_after: the idle connections held here keep their places for the whole test.
    srv = HttpServer(HttpApi(node.manager), eager=node_eager(node), max_connections=2, evict_after=60)
    await srv.start("127.0.0.1", 0)
    held = [await _raw(srv) for _ in range(2)]
    try:
        await _eventually(lambda: len(srv.connections) == 2, "two connections")
        caplog.set_level(logging.WARNING, logger="pylmq.http")
        for _ in range(5):
            reader, writer = await _raw(srv)
            status, body = await _answer(reader)
            assert (status, json.loads(body)["error"]) == (503, "too_many_connections"), body
            assert await _closed(reader)
            writer.close()
        lines = [r.getMessage() for r in caplog.records if "connection limit" in r.getMessage()]
        assert len(lines) == 1 and "HTTP" in lines[0] and " 2 " in lines[0], lines
        # The connections within the limit are served; once one goes, a new one is let in.
        reader, writer = held[0]
        writer.write(b"GET /messages/ok?t=0 HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (await _answer(reader))[0] == 204
        writer.close()
        await _eventually(lambda: len(srv.connections) == 1, "the closed connection to go")
        reader, writer = await _raw(srv)
        writer.write(b"GET /messages/ok?t=0 HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (await _answer(reader))[0] == 204
        writer.close()
    finally:
        for _, w in held:
            w.close()
        await srv.close()


async def test_at_the_limit_a_whole_request_takes_the_place_of_a_slow_head(
    node: LMQNode, caplog: pytest.LogCaptureFixture
) -> None:
    """Slowloris filling every place does not lock out a client that sends whole requests."""
    srv = HttpServer(HttpApi(node.manager), eager=node_eager(node), max_connections=4, evict_after=0.2)
    await srv.start("127.0.0.1", 0)
    slow = [await _raw(srv) for _ in range(4)]
    try:
        for _, w in slow:
            w.write(b"GET /messages/q?t=0 HTTP/1.1\r\nHos")  # and never more
        await _eventually(lambda: len(srv.connections) == 4, "four slow connections")
        await asyncio.sleep(0.3)
        caplog.set_level(logging.WARNING, logger="pylmq.http")
        for i in range(3):
            reader, writer = await _raw(srv)
            slow.append((reader, writer))  # kept open: each newcomer needs a place of its own
            writer.write(b"GET /messages/ok?t=0 HTTP/1.1\r\nHost: t\r\n\r\n")
            assert (await _answer(reader))[0] == 204, f"client {i} was not served"
        # Each newcomer closed one slow connection; none was refused.
        assert sum([await _closed(r, timeout=0.5) for r, _ in slow[:4]]) == 3
        assert not [r for r in caplog.records if "connection limit" in r.getMessage()]
    finally:
        for _, w in slow:
            w.close()
        await srv.close()


async def test_at_the_limit_connections_answering_requests_keep_their_places(node: LMQNode, api: Api) -> None:
    srv = HttpServer(HttpApi(node.manager), eager=node_eager(node), max_connections=2, evict_after=0.05)
    await srv.start("127.0.0.1", 0)
    polls = [await _raw(srv) for _ in range(2)]
    try:
        for _, w in polls:
            w.write(b"GET /messages/lp-keep?t=5 HTTP/1.1\r\nHost: t\r\n\r\n")  # long polls
        await _eventually(lambda: all(c.task is not None for c in srv.connections) and len(srv.connections) == 2,
                          "two long polls in progress")  # fmt: skip
        await asyncio.sleep(0.2)
        reader, writer = await _raw(srv)
        status, body = await _answer(reader)
        assert (status, json.loads(body)["error"]) == (503, "too_many_connections"), body
        writer.close()
        await api.push("lp-keep", b"one")
        await api.push("lp-keep", b"two")
        assert sorted([(await _answer(r))[1] for r, _ in polls]) == [b"one", b"two"]
    finally:
        for _, w in polls:
            w.close()
        await srv.close()


@pytest.mark.parametrize(("soft", "expected"), [(1024, 448), (1 << 20, 10_000), (200, 36), (100, 16)])
def test_the_default_limit_leaves_descriptors_for_the_node(
    monkeypatch: pytest.MonkeyPatch, soft: int, expected: int
) -> None:
    # Half of what is left after the node's reserve, for each of the two APIs.
    monkeypatch.setattr(resource, "getrlimit", lambda _: (soft, soft))
    assert default_max_connections() == expected
    assert 2 * expected + RESERVED_FDS <= soft or expected == 16


@pytest.mark.parametrize(
    "request_line",
    [b"CONNECT example.com:443 HTTP/1.1", b"OPTIONS * HTTP/1.1", b"GET http://[bad/messages/q HTTP/1.1"],
)
async def test_a_target_that_is_not_a_path_is_400(server: HttpServer, request_line: bytes) -> None:
    reader, writer = await _raw(server)
    writer.write(request_line + b"\r\nHost: t\r\n\r\n" + b"GET /messages/after?t=0 HTTP/1.1\r\nHost: t\r\n\r\n")
    status, body = await _answer(reader)
    doc = json.loads(body)
    assert (status, doc["error"]) == (400, "bad_request"), doc
    assert "must be a path" in doc["detail"], doc
    if not request_line.startswith(b"CONNECT"):  # after CONNECT the stream is a tunnel: closed
        assert (await _answer(reader))[0] == 204, "the connection goes on"
    writer.close()


async def test_an_absolute_form_target_still_reaches_its_resource(server: HttpServer, api: Api) -> None:
    await api.push("abs", b"via absolute form")
    reader, writer = await _raw(server)
    writer.write(b"GET http://t/messages/abs?t=0 HTTP/1.1\r\nHost: t\r\n\r\n")
    assert await _answer(reader) == (200, b"via absolute form")
    writer.close()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PATCH", "/properties/deep", b"[" * 100_000 + b"]" * 100_000),
        ("PATCH", "/properties/deep", b'{"retry":' * 50_000),
        ("PUT", "/properties", b'[["d.*",' + b'{"a":' * 40 + b"1" + b"}" * 40 + b"]]"),
    ],
)
async def test_json_nested_too_deep_is_400(api: Api, method: str, path: str, body: bytes) -> None:
    r = await api.request(method, path, data=body, headers={"Content-Type": "application/json"})
    assert r.status == 400, r
    assert r.json()["error"] == "bad_request", r
    assert (await api.request("GET", "/properties")).body == b"[]"


async def test_json_with_brackets_in_strings_is_not_too_deep(api: Api) -> None:
    body = b'[["' + b"[{" * 100 + b'.*",{"retry":1}]]'
    r = await api.request("PUT", "/properties", data=body, headers={"Content-Type": "application/json"})
    # Not refused for depth: the regex itself is the problem (an unbalanced bracket).
    assert r.json()["error"] == "invalid_regex", r


async def test_an_error_detail_quoting_huge_input_is_cut_short(api: Api) -> None:
    await api.push("keep", b"x")
    long_id = "i" * 5000
    r = await api.request("POST", f"/messages/keep/{long_id}", {"reply": "ack"})
    assert r.status == 404, r
    detail = r.json()["detail"]
    assert len(detail) < 400 and detail.endswith(" more characters)"), detail
    r = await api.request("GET", "/" + "n" * 5000)
    assert r.status == 404 and len(r.json()["detail"]) < 400, r


async def test_settings_reach_the_servers_of_a_node(suite_options: SuiteOptions) -> None:
    settings = load_settings(None, None, {"max_connections": "1", "header_timeout": "200", "body_timeout": "5000"})
    store = suite_options()
    opts = dataclasses.replace(
        node_options(settings), http=("127.0.0.1", 0), rpc=("127.0.0.1", 0), store=store.store, dsn=store.dsn
    )
    node = LMQNode(opts)
    await node.start()
    try:
        assert node.http_address is not None and node.rpc_address is not None
        reader, writer = await asyncio.open_connection(*node.http_address)
        writer.write(b"GET /messages/x?t=0 HTTP/1.1\r\n")  # and never the rest of the head
        status, _ = await _answer(reader)
        assert status == 408
        writer.close()
        held = await asyncio.open_connection(*node.rpc_address)  # the one RPC connection allowed
        refused, other = await asyncio.open_connection(*node.rpc_address)
        assert await _closed(refused)
        other.close()
        held[1].close()
    finally:
        await node.stop()


async def test_a_refused_upload_still_sending_gets_its_413_not_a_reset(node: LMQNode) -> None:
    srv = HttpServer(HttpApi(node.manager), eager=node_eager(node), max_body=1024)
    await srv.start("127.0.0.1", 0)
    try:
        reader, writer = await _raw(srv)
        writer.write(b"POST /messages/big HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n")
        for _ in range(20):  # the client goes on sending its body after the server refused it
            writer.write(b"x" * 65536)
            await asyncio.sleep(0.005)
        status, body = await _answer(reader)
        assert (status, json.loads(body)["error"]) == (413, "too_large")
        assert await _closed(reader)
        writer.close()
    finally:
        await srv.close()


async def test_a_client_waiting_for_its_100_continue_is_not_timed_out(slow_server: HttpServer, api: Api) -> None:
    reader, writer = await _raw(slow_server)
    # Behind a long poll, the 100 Continue (and so the body) waits for the poll's answer.
    writer.write(
        b"GET /messages/first?t=2 HTTP/1.1\r\nHost: t\r\n\r\n"
        b"POST /messages/second HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"
    )
    await asyncio.sleep(0.8)  # past body_timeout (0.3 s), but the client cannot send yet
    await api.push("first", b"1")
    assert await _answer(reader) == (200, b"1")
    assert await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5) == b"HTTP/1.1 100 Continue\r\n\r\n"
    writer.write(b"body")
    assert (await _answer(reader))[0] == 200
    writer.close()


def test_timeouts_limit_and_gentle_close_on_uvloop(suite_options: SuiteOptions) -> None:
    """The same on uvloop, the loop a node runs (its transports are not asyncio's)."""
    uvloop = pytest.importorskip("uvloop")

    async def main() -> None:
        node = LMQNode(suite_options(http=None, rpc=None))
        await node.start()
        srv = HttpServer(
            HttpApi(node.manager), eager=node_eager(node), max_body=1024, header_timeout=0.2, max_connections=3
        )
        await srv.start("127.0.0.1", 0)
        try:
            reader, writer = await _raw(srv)
            writer.write(b"POST /messages/big HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n")
            for _ in range(20):
                writer.write(b"x" * 65536)
                await asyncio.sleep(0.005)
            assert (await _answer(reader))[0] == 413
            assert await _closed(reader)
            writer.close()
            slow_reader, slow = await _raw(srv)
            slow.write(b"GET /messages/x HTTP/1.1\r\n")
            assert (await _answer(slow_reader))[0] == 408
            held = [await _raw(srv) for _ in range(3)]
            await _eventually(lambda: len(srv.connections) == 3, "three connections")
            refused, other = await _raw(srv)
            assert (await _answer(refused))[0] == 503
            other.close()
            for _, w in held:
                w.close()
            slow.close()
        finally:
            await srv.close()
            await node.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(asyncio.wait_for(main(), 20))


def test_the_limit_is_logged_once_a_minute_with_what_was_refused_meanwhile(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    limit = ConnectionLimit(2, "HTTP", logging.getLogger("pylmq.http"), lambda: now[0])
    caplog.set_level(logging.WARNING, logger="pylmq.http")
    assert limit.admit(1)
    for _ in range(50):
        assert not limit.admit(2)
        now[0] += 1.0  # 50 refusals over 50 s: one line
    assert [r.getMessage() for r in caplog.records] == [
        "HTTP: connection limit of 2 reached (max_connections): new connections are refused"
    ]
    now[0] += 10.0
    assert not limit.admit(5)
    assert caplog.records[-1].getMessage().endswith("; 50 refused since the last such line")
    assert len(caplog.records) == 2
