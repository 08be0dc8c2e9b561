"""A real node serving queue_server's protocol on 127.0.0.1 (port 0), and raw socket helpers."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pylmq.client import AsyncHttpClient
from pylmq.core.clock import ManualClock
from pylmq.node import LMQNode
from pylmq.node.testing import http_url, local_options, running_node

TIMEOUT = 5.0


@asynccontextmanager
async def qs_node(**overrides: Any) -> AsyncIterator[LMQNode]:
    async with running_node(local_options(qs=("127.0.0.1", 0), rpc=None, **overrides)) as node:
        yield node


def qs_address(node: LMQNode) -> tuple[str, int]:
    assert node.qs_address is not None
    return node.qs_address


def http(node: LMQNode) -> AsyncHttpClient:
    return AsyncHttpClient(http_url(node))


class Tcp:
    """A raw TCP connection: bytes out, answers (one JSON object and a newline each) in."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, node: LMQNode) -> Tcp:
        return cls(*await asyncio.open_connection(*qs_address(node)))

    async def send(self, data: bytes | dict[str, Any]) -> None:
        self.writer.write(data if isinstance(data, bytes) else json.dumps(data).encode())
        await self.writer.drain()

    async def line(self) -> bytes:
        raw = await asyncio.wait_for(self.reader.readline(), TIMEOUT)
        assert raw.endswith(b"\n"), raw
        return raw

    async def answer(self) -> dict[str, Any]:
        obj = json.loads(await self.line())
        assert isinstance(obj, dict)
        return obj

    async def ask(self, req: dict[str, Any] | bytes) -> dict[str, Any]:
        await self.send(req)
        return await self.answer()

    async def closed(self) -> bool:
        """Whether the server closed the connection (end of stream within the timeout)."""
        try:
            return await asyncio.wait_for(self.reader.read(), TIMEOUT) == b""
        except ConnectionResetError:
            return True  # closed with bytes of ours unread: the kernel resets

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


class Udp:
    """A UDP socket sending datagrams to the node's queue_server port."""

    def __init__(self, node: LMQNode) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.sock.connect(qs_address(node))

    async def ask_raw(self, data: bytes) -> bytes:
        loop = asyncio.get_running_loop()
        await loop.sock_sendall(self.sock, data)
        return await asyncio.wait_for(loop.sock_recv(self.sock, 70000), TIMEOUT)

    async def ask(self, req: dict[str, Any] | bytes) -> dict[str, Any]:
        raw = await self.ask_raw(req if isinstance(req, bytes) else json.dumps(req).encode())
        assert not raw.endswith(b"\n")
        obj = json.loads(raw)
        assert isinstance(obj, dict)
        return obj

    def close(self) -> None:
        self.sock.close()


@asynccontextmanager
async def clock_node(**overrides: Any) -> AsyncIterator[tuple[LMQNode, ManualClock]]:
    """A node whose clock moves only when the test says (it starts at the real time, so that
    queue_server's absolute times look as a client would send them)."""
    clock = ManualClock(float(int(time.time())))
    node = LMQNode(local_options(qs=("127.0.0.1", 0), rpc=None, **overrides), clock=clock)
    await node.start()
    try:
        yield node, clock
    finally:
        await node.stop()
