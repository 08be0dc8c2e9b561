"""A raw MessagePack-RPC test client (and ``until_waiting``, for a pull sent to be waiting).

The client speaks the wire format with plain ``msgpack`` over asyncio streams (not pylmq's own
framing module), so these tests check the server against the spec, not against itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack

from pylmq.core.queue import Queue
from pylmq.node import LMQNode

WAIT = 5.0  # upper bound for any single reply in these tests


class RawClient:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self.ids = itertools.count(1)
        self.responses: dict[int, tuple[Any, Any]] = {}
        self.other: list[Any] = []

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    def request(self, method: str, *params: Any) -> int:
        msgid = next(self.ids)
        self.send(msgpack.packb([0, msgid, method, list(params)], use_bin_type=True))
        return msgid

    async def _read_one(self) -> Any:
        while True:
            for obj in self.unpacker:
                return obj
            data = await self.reader.read(65536)
            if not data:
                raise ConnectionError("server closed the connection")
            self.unpacker.feed(data)

    async def response(self, msgid: int, timeout: float = WAIT) -> tuple[Any, Any]:
        """``(error, result)`` of the response to ``msgid``."""

        async def wait() -> tuple[Any, Any]:
            while msgid not in self.responses:
                obj = await self._read_one()
                if isinstance(obj, list) and len(obj) == 4 and obj[0] == 1:
                    self.responses[obj[1]] = (obj[2], obj[3])
                else:
                    self.other.append(obj)
            return self.responses.pop(msgid)

        return await asyncio.wait_for(wait(), timeout)

    async def call(self, method: str, *params: Any, timeout: float = WAIT) -> Any:
        """The result; fails the test if the server answered an error."""
        error, result = await self.response(self.request(method, *params), timeout)
        assert error is None, f"{method}{params!r}: expected a result, got error {error!r}"
        return result

    async def error(self, method: str, *params: Any) -> Any:
        """The error slot; fails the test if the server answered a result."""
        error, result = await self.response(self.request(method, *params))
        assert error is not None, f"{method}{params!r}: expected an error, got result {result!r}"
        return error

    async def closed_by_server(self, timeout: float = WAIT) -> bool:
        """True once the server has closed the connection (after draining what it sent)."""

        async def wait() -> bool:
            while True:
                try:
                    data = await self.reader.read(65536)
                except ConnectionResetError:
                    # The server closed with bytes of ours unread: the kernel answers with a reset.
                    return True
                if not data:
                    return True
                self.unpacker.feed(data)
                for obj in self.unpacker:
                    if isinstance(obj, list) and len(obj) == 4 and obj[0] == 1:
                        self.responses[obj[1]] = (obj[2], obj[3])
                    else:
                        self.other.append(obj)

        return await asyncio.wait_for(wait(), timeout)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()


Connect = Callable[[], Awaitable[RawClient]]


async def open_client(address: tuple[str, int]) -> RawClient:
    reader, writer = await asyncio.open_connection(*address)
    return RawClient(reader, writer)


async def until_waiting(node: LMQNode, name: str, timeout: float = 5.0) -> Queue:
    """The queue ``name`` once a pull is waiting on it: a pull sent reaches the line at once on
    an in-process store, after its round trips on a remote one."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while (queue := node.manager.get(name)) is None or not queue.has_waiters():
        if loop.time() > deadline:
            raise AssertionError(f"no pull waiting on {name} after {timeout} s")
        await asyncio.sleep(0.01)
    return queue
