"""Accepting connections: a burst of clients waiting in the accept queue is let in within one
pass of the loop (on uvloop, the node's loop, as on asyncio's), a pass takes a bounded number,
and running out of file descriptors pauses accepting instead of spinning.

Loop passes are counted with a chain of ``call_soon`` callbacks (one link per pass): no timing."""

from __future__ import annotations

import asyncio
import errno
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from pylmq.api._listen import Listener, listen
from pylmq.api.http import HttpApi
from pylmq.api.http_server import HttpServer
from pylmq.api.rpc_server import RpcServer
from pylmq.node import LMQNode
from tests.suite_store import SuiteOptions, node_eager

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}


def run_on(loop_name: str, main: Coroutine[Any, Any, None]) -> None:
    with asyncio.Runner(loop_factory=LOOPS[loop_name]) as runner:
        runner.run(asyncio.wait_for(main, 20))


class PassCounter:
    """Counts passes of the loop: each pass runs one link of a call_soon chain."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.passes = 0
        self.loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.passes += 1
        if self.passes < 1000:
            self.loop.call_soon(self._tick)


def connect_while_the_loop_is_held(port: int, n: int) -> list[socket.socket]:
    """Open ``n`` connections from inside a loop callback: the kernel completes each handshake
    and queues it for accept, and the loop can take none of them until this returns."""
    clients = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        clients.append(s)
    return clients


class Recorder(asyncio.Protocol):
    """Notes the loop pass in which each connection is made."""

    def __init__(self, made: list[int], counter: PassCounter) -> None:
        self.made = made
        self.counter = counter

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made.append(self.counter.passes)


async def assert_let_in_within_a_few_passes(count: Callable[[], int], n: int) -> None:
    """``n`` connections waiting are let in within a few passes of the loop (accept, set up the
    transports, run connection_made, wake this task), however many they are: not one pass per
    connection."""
    counter = PassCounter()
    start = counter.passes
    while count() < n and counter.passes < start + 200:
        await asyncio.sleep(0)
    assert count() == n
    took = counter.passes - start
    assert took <= 4, f"{n} waiting connections took {took} passes of the loop to be let in"


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_burst_of_waiting_connections_is_accepted_within_one_pass_of_the_loop(
    loop_name: str, suite_options: SuiteOptions
) -> None:
    n = 40

    async def main() -> None:
        node = LMQNode(suite_options(http=None, rpc=None))
        await node.start()
        srv = HttpServer(HttpApi(node.manager), eager=node_eager(node))
        _, port = await srv.start("127.0.0.1", 0)
        clients = connect_while_the_loop_is_held(port, n)
        try:
            await assert_let_in_within_a_few_passes(lambda: len(srv.connections), n)
            # And they are served: each gets its answer.
            for c in clients:
                c.sendall(b"GET /messages/q?t=0 HTTP/1.1\r\nHost: t\r\n\r\n")
            for c in clients:
                c.setblocking(False)
            got = 0
            while got < n:
                await asyncio.sleep(0.01)
                for c in clients:
                    try:
                        if c.recv(4096).startswith(b"HTTP/1.1 204"):
                            got += 1
                    except BlockingIOError:
                        pass
        finally:
            for c in clients:
                c.close()
            await srv.close()
            await node.stop()

    run_on(loop_name, main())


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_the_rpc_server_too_accepts_a_burst_within_a_few_passes(loop_name: str, suite_options: SuiteOptions) -> None:
    n = 40

    async def main() -> None:
        node = LMQNode(suite_options(http=None, rpc=None))
        await node.start()
        srv = RpcServer(node.manager, eager=node_eager(node))
        _, port = await srv.start("127.0.0.1", 0)
        clients = connect_while_the_loop_is_held(port, n)
        try:
            await assert_let_in_within_a_few_passes(lambda: len(srv._conns), n)
        finally:
            for c in clients:
                c.close()
            await srv.close()
            await node.stop()

    run_on(loop_name, main())


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_one_pass_accepts_at_most_a_batch(loop_name: str) -> None:
    async def main() -> None:
        made: list[int] = []
        counter = PassCounter()
        listener = listen(lambda: Recorder(made, counter), "127.0.0.1", 0)
        listener.batch = 4
        port = listener.sockets[0].getsockname()[1]
        clients = connect_while_the_loop_is_held(port, 10)
        try:
            while len(made) < 10 and counter.passes < 200:
                await asyncio.sleep(0)
            assert len(made) == 10
            per_pass = [made.count(p) for p in sorted(set(made))]
            assert max(per_pass) <= 4, f"connections made per pass: {per_pass}"
            assert len(per_pass) >= 3
        finally:
            listener.close()
            for c in clients:
                c.close()

    run_on(loop_name, main())


class FailingOnce(socket.socket):
    """A listening socket whose first accept fails as a process out of descriptors does."""

    accepts = 0

    def accept(self) -> tuple[socket.socket, Any]:
        FailingOnce.accepts += 1
        if FailingOnce.accepts == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_out_of_descriptors_pauses_accepting_then_resumes(loop_name: str) -> None:
    async def main() -> None:
        FailingOnce.accepts = 0
        sock = FailingOnce(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        sock.setblocking(False)
        made: list[int] = []
        counter = PassCounter()
        listener = Listener(asyncio.get_running_loop(), lambda: Recorder(made, counter), [sock], retry_delay=1.0)
        client = socket.create_connection(sock.getsockname(), timeout=5)
        try:
            # The socket stays readable; paused, it is not tried again on every pass.
            while counter.passes < 50:
                await asyncio.sleep(0)
            assert FailingOnce.accepts == 1
            assert made == []
            for _ in range(100):
                if made:
                    break
                await asyncio.sleep(0.05)
            assert len(made) == 1, "accepting did not resume after the pause"
        finally:
            listener.close()
            client.close()

    run_on(loop_name, main())


@pytest.mark.parametrize("loop_name", ["asyncio", "uvloop"])
def test_a_closed_listener_refuses_new_connections(loop_name: str) -> None:
    async def main() -> None:
        listener = listen(asyncio.Protocol, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        listener.close()
        listener.close()  # twice is harmless
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()

    run_on(loop_name, main())


def test_a_port_in_use_is_a_clear_error() -> None:
    async def main() -> None:
        first = listen(asyncio.Protocol, "127.0.0.1", 0)
        port = first.sockets[0].getsockname()[1]
        try:
            with pytest.raises(OSError, match=r"error while attempting to bind on address .*127\.0\.0\.1"):
                listen(asyncio.Protocol, "127.0.0.1", port)
        finally:
            first.close()

    run_on("uvloop", main())
