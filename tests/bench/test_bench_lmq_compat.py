"""The bench's clients measure an original Erlang LMQ as well as pylmq, against a small stand-in
(no LMQ is needed): LMQ's msgpack-erlang 0.2.3 parses only old-spec msgpack and closes the
connection on a str8 or a bin, so the RPC driver packs old-spec for the external target
(``--lmq-rpc-oldspec``).
"""

from __future__ import annotations

import asyncio
import collections
import socketserver
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgpack
import pytest

from bench.drivers import RpcDriver
from bench.pygen import Lane, run_lanes

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
