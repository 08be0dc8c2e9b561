"""The Redis driver (RESP written directly, replies parsed by hiredis) against a real
redis-server started by the bench's own target: a stream per queue, one consumer group."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.drivers import RedisDriver
from bench.install import have
from bench.targets import Env, Redis
from tests.bench.bench_helpers import run_cycles


@pytest.fixture
def redis_target(tmp_path: Path) -> Iterator[Redis]:
    if have("redis-server") is None:
        pytest.skip("redis-server is not installed (the bench installs it: python -m bench --targets redis)")
    target = Redis(Env(tmp_path, False, False))
    target.start()
    try:
        yield target
    finally:
        target.stop()


def test_push_pull_ack_cycles_leave_the_stream_empty(redis_target: Redis) -> None:
    async def go() -> None:
        host, port = redis_target.addr("redis")
        d = RedisDriver(host, port)
        await d.connect()
        try:
            await run_cycles(d, "rq1", bytes)
            # a pull that waits gives up after its timeout
            assert await d.pull("rq1", 0.2) is None
            await d.delete("rq1")
        finally:
            await d.close()

    asyncio.run(asyncio.wait_for(go(), 30))


def test_pipelined_callers_on_one_connection_get_their_own_replies(redis_target: Redis) -> None:
    async def go() -> None:
        host, port = redis_target.addr("redis")
        d = RedisDriver(host, port)
        await d.connect()
        try:
            await asyncio.gather(*(d.push(f"rq-{i % 4}", b"m%d" % i) for i in range(40)))
            handles = await asyncio.gather(*(d.pull(f"rq-{i % 4}", 0) for i in range(40)))
            # stream ids are unique within a stream (two streams may hand out the same one)
            assert all(isinstance(h, bytes) for h in handles)
            assert len({(i % 4, h) for i, h in enumerate(handles)}) == 40
            await asyncio.gather(*(d.ack(f"rq-{i % 4}", h) for i, h in enumerate(handles)))
            assert [await d.pull(f"rq-{i}", 0) for i in range(4)] == [None] * 4
        finally:
            await d.close()

    asyncio.run(asyncio.wait_for(go(), 30))


def test_an_error_reply_raises_with_its_text(redis_target: Redis) -> None:
    async def go() -> None:
        host, port = redis_target.addr("redis")
        d = RedisDriver(host, port)
        await d.connect()
        try:
            with pytest.raises(RuntimeError, match="Invalid stream ID"):
                await d.call(b"XADD", b"rq2", b"not-an-id", b"b", b"x")
            # an ack that acknowledges nothing is an error of the run, not a silent success
            with pytest.raises(RuntimeError, match="answered 0"):
                await d.ack("no-such-stream", b"1-0")
            # the connection goes on after an error reply
            await run_cycles(d, "rq2", bytes, rounds=1)
        finally:
            await d.close()

    asyncio.run(asyncio.wait_for(go(), 30))
