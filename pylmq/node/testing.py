"""Real pylmq nodes for tests, benchmarks and the Spark source's tests.

Two shapes, both on 127.0.0.1 with ports picked by the OS and the memory store by default:

- :func:`running_node` (``async with``): a node on the caller's event loop, for asyncio tests.
- :class:`NodeThread` (``with``): a node on its own event loop in a background thread, for
  blocking clients (``HttpClient``, ``RpcClient``), Spark and the benchmark, which must not share
  a loop with the code under test.

:func:`refused_url` / :func:`refused_address` give an address where nothing listens, for
failover tests.

    with NodeThread() as node:
        with HttpClient(node.http_url) as c:
            c.push("q", b"hello")
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import AsyncIterator, Coroutine
from concurrent.futures import Future
from dataclasses import replace
from types import TracebackType
from typing import Any, TypeVar

from pylmq.node.lmq_node import LMQNode, NodeOptions

__all__ = ["NodeThread", "http_url", "local_options", "refused_address", "refused_url", "running_node"]

T = TypeVar("T")


def local_options(**overrides: Any) -> NodeOptions:
    """Options for a test node: HTTP and RPC on free 127.0.0.1 ports, memory store, no
    queue_server protocol (``qs=("127.0.0.1", 0)`` serves it on a free port: never on its
    default port, which tests side by side would fight over)."""
    opts = NodeOptions(http=("127.0.0.1", 0), rpc=("127.0.0.1", 0), qs=None, store="memory", shutdown_timeout=1.0)
    return replace(opts, **overrides)


def http_url(node: LMQNode) -> str:
    assert node.http_address is not None, "the node serves no HTTP"
    host, port = node.http_address
    return f"http://{host}:{port}"


@contextlib.asynccontextmanager
async def running_node(opts: NodeOptions | None = None) -> AsyncIterator[LMQNode]:
    """A started node on the running loop; stopped on exit."""
    node = LMQNode(opts or local_options())
    await node.start()
    try:
        yield node
    finally:
        await node.stop()


class NodeThread:
    """A node served by a private event loop in a daemon thread.

    ``start()`` returns once the node listens (or raises what its start raised); ``stop()``
    stops the node gracefully and ends the thread. :meth:`call` runs a coroutine on the node's
    loop, e.g. ``node.call(node.node.manager.delete("q"))``.
    """

    def __init__(self, opts: NodeOptions | None = None) -> None:
        self.node = LMQNode(opts or local_options())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="pylmq-test-node", daemon=True)
        self._started: Future[None] = Future()
        self._stop: asyncio.Event | None = None

    @property
    def http_url(self) -> str:
        return http_url(self.node)

    @property
    def rpc_address(self) -> tuple[str, int]:
        assert self.node.rpc_address is not None, "the node serves no MessagePack-RPC"
        return self.node.rpc_address

    def start(self) -> NodeThread:
        self._thread.start()
        self._started.result(timeout=30)
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            await self.node.start()
        except BaseException as e:
            self._started.set_exception(e)
            return
        self._started.set_result(None)
        try:
            await self._stop.wait()
        finally:
            await self.node.stop()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def stop(self) -> None:
        if self._thread.is_alive():
            stop = self._stop
            if stop is not None:
                self._loop.call_soon_threadsafe(stop.set)
            self._thread.join(timeout=30)

    def __enter__(self) -> NodeThread:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def refused_address() -> tuple[str, int]:
    """A 127.0.0.1 port where nothing listens (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return ("127.0.0.1", port)


def refused_url() -> str:
    host, port = refused_address()
    return f"http://{host}:{port}"
