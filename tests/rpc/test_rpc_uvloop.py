"""The RPC server on uvloop, the loop `python -m pylmq` runs (its transports differ from asyncio's).

These are plain tests that run their own uvloop loop, so the rest of the suite keeps asyncio's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import msgpack
import uvloop

from pylmq.node import LMQNode
from tests.rpc.rpc_helpers import RawClient, open_client, until_waiting
from tests.suite_store import SuiteOptions

Scenario = Callable[[LMQNode, Callable[[], Awaitable[RawClient]]], Awaitable[None]]


def on_uvloop(scenario: Scenario, options: SuiteOptions) -> None:
    async def main() -> None:
        assert isinstance(asyncio.get_running_loop(), uvloop.Loop)
        node = LMQNode(options(http=None, rpc=("127.0.0.1", 0)))
        await node.start()
        clients: list[RawClient] = []

        async def connect() -> RawClient:
            assert node.rpc_address is not None
            clients.append(await open_client(node.rpc_address))
            return clients[-1]

        try:
            await asyncio.wait_for(scenario(node, connect), 20)
        finally:
            for c in clients:
                await c.close()
            await node.stop()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


def test_push_pull_done_on_uvloop(suite_options: SuiteOptions) -> None:
    async def scenario(node: LMQNode, connect: Callable[[], Awaitable[RawClient]]) -> None:
        c = await connect()
        assert await c.call("push", "q", {"k": [1, None]}) == "ok"
        r = await c.call("pull", "q", 0)
        assert r["content"] == {"k": [1, None]}
        assert await c.call("done", "q", r["id"]) == "ok"

    on_uvloop(scenario, suite_options)


def test_disconnect_during_long_poll_on_uvloop_loses_nothing(suite_options: SuiteOptions) -> None:
    async def scenario(node: LMQNode, connect: Callable[[], Awaitable[RawClient]]) -> None:
        a = await connect()
        a.request("pull", "q")
        assert await a.call("get_default_props") == []
        await a.close()
        b = await connect()
        await b.call("push", "q", "kept")
        r = await b.call("pull", "q", 1)
        assert (r["content"], r["retry"]) == ("kept", 2)

    on_uvloop(scenario, suite_options)


def test_garbage_on_uvloop_closes_only_that_connection(suite_options: SuiteOptions) -> None:
    async def scenario(node: LMQNode, connect: Callable[[], Awaitable[RawClient]]) -> None:
        a, b = await connect(), await connect()
        a.send(b"\xc1garbage")
        assert await a.closed_by_server()
        assert await b.call("push", "q", 1) == "ok"
        b.send(msgpack.packb([0, 5, "pull", ["q", 0]]))
        error, r = await b.response(5)
        assert error is None and r["content"] == 1

    on_uvloop(scenario, suite_options)


def test_node_stop_on_uvloop_answers_a_waiting_pull(suite_options: SuiteOptions) -> None:
    async def scenario(node: LMQNode, connect: Callable[[], Awaitable[RawClient]]) -> None:
        c = await connect()
        poll = c.request("pull", "q")
        await until_waiting(node, "q")
        await node.stop()
        error, _ = await c.response(poll)
        assert error[0] == "shutting_down"

    on_uvloop(scenario, suite_options)
