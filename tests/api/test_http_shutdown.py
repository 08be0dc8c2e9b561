"""A node's graceful stop (LMQNode.stop): in-flight requests finish, waits end, idle
connections do not hold it up, a stalled request holds it at most ``shutdown_timeout``."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pylmq.node import LMQNode
from tests.suite_store import SuiteOptions

# Far beyond what a stop that does not wait on the connection in question takes, far below
# what one that waits out the shutdown timeout (60 s here) would.
NO_WAIT = 20.0


async def _node(options: SuiteOptions, *, durable: bool = False, shutdown_timeout: float = 60.0) -> LMQNode:
    node = LMQNode(options(durable=durable, http=("127.0.0.1", 0), rpc=None, shutdown_timeout=shutdown_timeout))
    await node.start()
    return node


async def _connect(node: LMQNode) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert node.http_address is not None
    return await asyncio.open_connection(*node.http_address)


async def _response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """Status line and body of one response (Content-Length framed, as all of ours are)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return head.split(b"\r\n", 1)[0], await reader.readexactly(length)


async def _stop(node: LMQNode, what: str) -> None:
    try:
        await asyncio.wait_for(node.stop(), NO_WAIT)
    except TimeoutError:
        raise AssertionError(f"stop did not finish within {NO_WAIT} s: it waited on {what}") from None


async def test_stop_does_not_wait_for_idle_keep_alive_connections(suite_options: SuiteOptions) -> None:
    node = await _node(suite_options)
    conns = [await _connect(node) for _ in range(8)]
    for _, writer in conns:
        writer.write(b"POST /messages/idle HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx")
    for reader, _ in conns:
        status, body = await _response(reader)
        assert (status, body) == (b"HTTP/1.1 200 OK", b'{"accum":"no"}'), (status, body)
    await _stop(node, "idle keep-alive connections")
    for reader, writer in conns:
        assert await reader.read() == b"", "an idle connection must be closed by the stop"
        writer.close()


async def test_stop_answers_a_waiting_long_poll_with_204(suite_options: SuiteOptions) -> None:
    node = await _node(suite_options)
    reader, writer = await _connect(node)
    writer.write(b"GET /messages/lp HTTP/1.1\r\nHost: t\r\n\r\n")
    for _ in range(300):
        q = node.manager.get("lp")
        if q is not None and q.has_waiters():
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the long poll never started waiting")
    stopping = asyncio.create_task(_stop(node, "a waiting long poll"))
    status, _ = await asyncio.wait_for(_response(reader), NO_WAIT)
    assert status == b"HTTP/1.1 204 No Content", status
    await stopping
    writer.close()


async def test_stop_lets_a_push_in_flight_finish_and_keeps_its_message(suite_options: SuiteOptions) -> None:
    node = await _node(suite_options, durable=True)
    reader, writer = await _connect(node)
    # The body is half there when the stop begins: the push is in flight.
    writer.write(b"POST /messages/inflight HTTP/1.1\r\nHost: t\r\nContent-Length: 8\r\n\r\nkept")
    await writer.drain()
    await asyncio.sleep(0.1)
    stopping = asyncio.create_task(_stop(node, "nothing (the push was completed)"))
    await asyncio.sleep(0.2)
    assert not stopping.done(), "stop must wait for the push in flight"
    writer.write(b"safe")
    try:
        status, body = await asyncio.wait_for(_response(reader), NO_WAIT)
    except TimeoutError:
        raise AssertionError("the push in flight was never answered: the rest of its body was dropped") from None
    assert (status, body) == (b"HTTP/1.1 200 OK", b'{"accum":"no"}'), (status, body)
    await stopping
    assert await reader.read() == b"", "the connection must be closed after its last answer"
    writer.close()
    again = await _node(suite_options, durable=True)
    try:
        r, w = await _connect(again)
        w.write(b"GET /messages/inflight?t=0 HTTP/1.1\r\nHost: t\r\n\r\n")
        status, body = await _response(r)
        assert (status, body) == (b"HTTP/1.1 200 OK", b"keptsafe"), (status, body)
        w.close()
    finally:
        await again.stop()


async def test_a_stalled_request_holds_the_stop_only_for_the_shutdown_timeout(suite_options: SuiteOptions) -> None:
    node = await _node(suite_options, shutdown_timeout=0.5)
    reader, writer = await _connect(node)
    writer.write(b"POST /messages/stalled HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nnever finished")
    await writer.drain()
    await asyncio.sleep(0.1)
    await _stop(node, "a request stalled past the shutdown timeout of 0.5 s")
    assert await reader.read() == b"", "the stalled request's connection must be closed"
    writer.close()
    assert node.manager.get("stalled") is None, "a push whose body never came must queue nothing"


@pytest.mark.slow  # starts a node process
def test_sigterm_stops_a_node_with_idle_and_waiting_connections(tmp_path: Path, suite_options: SuiteOptions) -> None:
    opts = suite_options()
    store = ["--store", opts.store, *(["--dsn", opts.dsn] if opts.dsn else [])]
    proc = subprocess.Popen(
        [sys.executable, "-m", "pylmq", "--http", "127.0.0.1:0", "--rpc", "127.0.0.1:0", *store,
         "--qs", "off", "--sqs", "off", "--statsd", "off", "--stats-interval", "0", "--log-level", "warning"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith("pylmq ready"), ready + (proc.stderr.read() if proc.stderr else "")
        port = int(ready.split("http=('127.0.0.1', ")[1].split(")")[0])

        async def clients() -> bytes:
            idle_r, idle_w = await asyncio.open_connection("127.0.0.1", port)
            idle_w.write(b"POST /messages/s HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx")
            await _response(idle_r)
            lp_r, lp_w = await asyncio.open_connection("127.0.0.1", port)
            lp_w.write(b"GET /messages/empty HTTP/1.1\r\nHost: t\r\n\r\n")
            await lp_w.drain()
            await asyncio.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            status, _ = await asyncio.wait_for(_response(lp_r), NO_WAIT)
            for w in (idle_w, lp_w):
                w.close()
            return status

        assert asyncio.run(clients()) == b"HTTP/1.1 204 No Content"
        try:
            assert proc.wait(NO_WAIT) == 0, proc.stderr.read() if proc.stderr else ""
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the node did not exit within {NO_WAIT} s of SIGTERM") from None
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
