"""The bench's clients measure an original Erlang LMQ as well as pylmq, against small stand-ins
that have the two traits of LMQ that matter here (no LMQ is needed):

- its msgpack-erlang 0.2.3 parses only old-spec msgpack and closes the connection on a str8 or
  a bin, so the RPC driver packs old-spec for the external target (``--lmq-rpc-oldspec``);
- its queue may answer a pull empty while producers still push, so a steady consumer (wrk's
  Lua script, the Python generator's consume lanes) stops only on an empty answer to a pull
  sent once every producer was done; a drain stops on the first empty answer.
"""

from __future__ import annotations

import asyncio
import collections
import shutil
import socketserver
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import msgpack
import pytest

from bench.drivers import RpcDriver
from bench.pygen import Lane, run_lanes
from bench.wrk import run_wrk

PUSHES = 20
PUSH_DELAY = 0.005  # seconds a push is answered late, so that consumers run while producers push


class _Queue:
    """One queue that hands out nothing while fewer than ``busy_until`` pushes have come in
    (LMQ's busy queue process taken to the extreme), then everything pushed."""

    def __init__(self, busy_until: int) -> None:
        self.busy_until = busy_until
        self.lock = threading.Lock()
        self.pushed = 0
        self.ready: collections.deque[str] = collections.deque()
        self.processing: set[str] = set()
        self.acked = 0

    def push(self) -> None:
        time.sleep(PUSH_DELAY)
        with self.lock:
            self.pushed += 1
            self.ready.append(str(uuid.uuid4()))

    def pull(self) -> str | None:
        with self.lock:
            if self.pushed < self.busy_until or not self.ready:
                return None
            mid = self.ready.popleft()
            self.processing.add(mid)
            return mid

    def ack(self, mid: str) -> bool:
        with self.lock:
            if mid not in self.processing:
                return False
            self.processing.discard(mid)
            self.acked += 1
            return True


# -- MessagePack-RPC ------------------------------------------------------------------------------


def _is_oldspec(obj: Any, raw: bytes) -> bool:
    """Whether ``raw`` (one msgpack object, decoded with raw=True) is packed as old-spec msgpack.

    Old-spec packing of the decoded object gives the same bytes unless ``raw`` held a str8 or
    a bin (or a str packed longer than needed, which no client does)."""
    return bool(msgpack.packb(obj, use_bin_type=False) == raw)


class _OldSpecRpc(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, queue: _Queue) -> None:
        super().__init__(("127.0.0.1", 0), _OldSpecRpcHandler)
        self.queue = queue
        self.closed_on_newspec = 0

    def addr(self) -> tuple[str, int]:
        host, port = self.server_address[:2]
        return str(host), int(port)


class _OldSpecRpcHandler(socketserver.BaseRequestHandler):
    server: _OldSpecRpc

    def handle(self) -> None:
        unpacker = msgpack.Unpacker(raw=True)
        seen = bytearray()
        start = 0
        while data := self.request.recv(65536):
            seen += data
            unpacker.feed(data)
            for req in unpacker:
                end = unpacker.tell()
                raw, start = bytes(seen[start:end]), end
                if not _is_oldspec(req, raw):
                    self.server.closed_on_newspec += 1
                    return  # what msgpack-erlang 0.2.3 does: the connection ends
                _, msgid, method, params = req
                self.request.sendall(msgpack.packb([1, msgid, None, self._answer(method, params)], use_bin_type=False))

    def _answer(self, method: bytes, params: list[Any]) -> Any:
        q = self.server.queue
        if method == b"push":
            q.push()
            return "ok"
        if method == b"pull":
            mid = q.pull()
            return "empty" if mid is None else {"id": mid, "type": "normal", "content": b"x"}
        if method == b"done":
            return "ok" if q.ack(params[1].decode()) else "not_found"
        return "ok"


@contextmanager
def _rpc_server(queue: _Queue) -> Iterator[_OldSpecRpc]:
    srv = _OldSpecRpc(queue)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_rpc_driver_old_spec_packs_the_message_id_and_body_as_raw() -> None:
    """A 36-character id is a str8 and a body a bin in the current spec; old spec has neither."""
    mid = str(uuid.uuid4())
    current = RpcDriver("127.0.0.1", 1).packer.pack([0, 1, "done", ["q", mid]])
    old = RpcDriver("127.0.0.1", 1, oldspec=True).packer.pack([0, 1, "done", ["q", mid]])
    assert b"\xd9\x24" + mid.encode() in current, "the current spec packs the id as str8"
    assert b"\xda\x00\x24" + mid.encode() in old and b"\xd9" not in old, f"old spec: raw16, got {old!r}"
    body = RpcDriver("127.0.0.1", 1, oldspec=True).packer.pack([0, 2, "push", ["q", b"x" * 100]])
    assert b"\xda\x00\x64" + b"x" * 100 in body and b"\xc4" not in body, f"old spec body: raw16, got {body!r}"


async def test_rpc_driver_old_spec_keeps_its_connection_to_an_old_spec_server() -> None:
    queue = _Queue(busy_until=0)
    with _rpc_server(queue) as srv:
        old = RpcDriver(*srv.addr(), oldspec=True)
        await old.connect()
        try:
            await asyncio.wait_for(old.push("q", b"x" * 100), 5)
            handle = await asyncio.wait_for(old.pull("q", 0), 5)
            assert isinstance(handle, str) and len(handle) == 36, handle
            await asyncio.wait_for(old.ack("q", handle), 5)
        finally:
            await old.close()
        current = RpcDriver(*srv.addr())
        await current.connect()
        try:
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(current.push("q", b"x" * 100), 5)
        finally:
            await current.close()
    assert queue.acked == 1 and srv.closed_on_newspec == 1, (queue.acked, srv.closed_on_newspec)


def test_generator_processes_pack_old_spec_when_told() -> None:
    queue = _Queue(busy_until=0)
    with _rpc_server(queue) as srv:
        lanes = [Lane("push", "q", PUSHES), Lane("push", "q", PUSHES)]
        res = run_lanes("rpc", list(srv.addr()), lanes, procs=2, seconds=20, rpc_oldspec=True)
        assert res.errors == 0 and srv.closed_on_newspec == 0, (res.error_text, srv.closed_on_newspec)
        assert res.pushed == 2 * PUSHES == queue.pushed, (res.pushed, queue.pushed)
        res = run_lanes("rpc", list(srv.addr()), lanes, procs=2, seconds=20)
        assert res.errors == 2 and srv.closed_on_newspec == 2, (res.error_text, srv.closed_on_newspec)


def test_generator_consumer_keeps_pulling_while_a_producer_in_another_process_pushes() -> None:
    """A consumer in one process does not stop on the empty answers it gets while the producer
    in the other process still pushes."""
    queue = _Queue(busy_until=PUSHES)
    with _rpc_server(queue) as srv:
        lanes = [Lane("push", "q", PUSHES), Lane("consume", "q", PUSHES)]
        res = run_lanes("rpc", list(srv.addr()), lanes, procs=2, seconds=20, rpc_oldspec=True)
        assert res.errors == 0 and srv.closed_on_newspec == 0, (res.error_text, srv.closed_on_newspec)
        assert res.pushed == PUSHES and res.acked == PUSHES == queue.acked, (res.pushed, res.acked, queue.acked)
        assert res.empties >= 1, "the consumer was never answered empty: the rule was not exercised"


def test_generator_drain_lanes_stop_on_the_first_empty_answer() -> None:
    queue = _Queue(busy_until=0)
    with _rpc_server(queue) as srv:
        res = run_lanes("rpc", list(srv.addr()), [Lane("drain", "q", 100)] * 2, procs=2, seconds=20,
                        rpc_oldspec=True)  # fmt: skip
        assert res.errors == 0 and res.acked == 0 and res.empties == 2, (res.error_text, res.acked, res.empties)


# -- HTTP with wrk and bench/lua/lmq.lua ------------------------------------------------------------


class _HttpHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _reply(self, status: int, headers: dict[str, str] | None = None, body: bytes = b"") -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if status != 204:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        n = int(self.headers.get("Content-Length", "0"))
        if n:
            self.rfile.read(n)
        q: _Queue = self.server.queue
        parts = self.path.split("?")[0].strip("/").split("/")
        if len(parts) == 2:
            q.push()
            self._reply(200, body=b'{"result":"ok"}')
        elif q.ack(parts[2]):
            self._reply(200, body=b'{"result":"ok"}')
        else:
            self._reply(404)

    def do_GET(self) -> None:
        mid = self.server.queue.pull() if self.path.startswith("/messages/") else None
        if mid is None:
            self._reply(204)
        else:
            self._reply(200, {"X-Lmq-Message-Id": mid, "X-Lmq-Message-Type": "normal"}, b"x")


@contextmanager
def _http_server(queue: _Queue) -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _HttpHandler)
    srv.daemon_threads = True
    srv.queue = queue  # type: ignore[attr-defined]
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def _wrk() -> str:
    wrk = shutil.which("wrk")
    assert wrk is not None, "wrk is needed by the bench (make bench installs it)"
    return wrk


def test_lua_steady_consumer_keeps_pulling_on_204_until_every_producer_is_done() -> None:
    queue = _Queue(busy_until=2 * PUSHES)
    with _http_server(queue) as url:
        # Threads 1 and 2 push, thread 3 consumes: it is answered 204 until both are done.
        run = run_wrk(_wrk(), url, mode="steady", queue="q", connections=3, quota=PUSHES, pull_t="1",
                      producers=2, seconds=20)  # fmt: skip
    s = run.stats
    assert run.done, f"not every connection finished: {s}"
    assert s["pushed"] == 2 * PUSHES and s["acked"] == PUSHES == queue.acked and s["bad"] == 0, s
    assert s["empties"] >= 1, f"the consumer was never answered 204: the rule was not exercised: {s}"


def test_lua_steady_consumer_stops_on_204_once_producers_are_done() -> None:
    queue = _Queue(busy_until=0)
    with _http_server(queue) as url:
        # Two consumers with a quota of PUSHES each: only a 204 after the producer can end them,
        # and not before they have taken every message.
        run = run_wrk(_wrk(), url, mode="steady", queue="q", connections=3, quota=PUSHES, pull_t="1",
                      producers=1, seconds=20)  # fmt: skip
    s = run.stats
    assert run.done and s["pushed"] == PUSHES == s["acked"] == queue.acked and s["bad"] == 0, s
    assert run.wall < 10, f"the consumer did not stop on a 204 after the producer was done: {run.wall:.1f}s {s}"


def test_lua_drain_stops_on_the_first_204() -> None:
    queue = _Queue(busy_until=0)
    with _http_server(queue) as url:
        run = run_wrk(_wrk(), url, mode="drain", queue="q", connections=2, quota=100, pull_t="0", seconds=20)
    s = run.stats
    assert run.done and s["empties"] == 2 and s["acked"] == 0, s
