"""The PostgreSQL store's message operations against QueueTable (the reference), on a real
PostgreSQL: scripted sequences and hypothesis-generated ones, compared after every operation."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator

import asyncpg
import pytest

from pylmq.core.message import PushOptions
from pylmq.pgstore import messages as pm
from pylmq.pgstore.messages import QueueState
from pylmq.pgstore.schema import migrate
from tests.pgstore.pg_diff import Side, create_queue

_names = itertools.count()


@pytest.fixture
async def conn(pg_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    c = await asyncpg.connect(pg_dsn)
    await migrate(c)
    try:
        yield c
    finally:
        await c.close()


async def side(conn: asyncpg.Connection, **kw: object) -> Side:
    s = Side(conn, f"t{next(_names)}.", **kw)  # type: ignore[arg-type]
    await s.open()
    return s


def item(n: int) -> tuple[tuple[tuple[bytes, bytes], ...], bytes]:
    return (((b"content-type", b"text/plain"),) if n % 2 else ()), b"m%d" % n


async def test_core_cycle_matches_the_table(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    now = 1000.0
    for i in range(3):
        await s.enqueue(item(i), 1, 0, now + i)
    m = await s.dequeue(30.5, 1010.0, False)
    assert m is not None and m.content == item(0) and m.retry == 1
    m2 = await s.dequeue(30.25, 1011.0, False)
    assert m2 is not None
    assert await s.simple("done", m.id[1], 0, 1012.0)
    assert not await s.simple("done", m.id[1], 0, 1013.0)  # acked already
    assert await s.simple("retain", m2.id[1], 60.125, 1014.0)
    assert await s.simple("release", m2.id[1], 0, 1015.0)
    m3 = await s.dequeue(5.0625, 1016.0, False)
    assert m3 is not None and m3.content == item(2)
    assert await s.simple("put_back", m3.id[1], 0, 1017.0)
    # m3's deadline passes unacked: a late ack fails, a dequeue redelivers under a new uuid
    m4 = await s.dequeue(1.5, 1018.0, False)
    assert m4 is not None
    assert not await s.simple("done", m4.id[1], 0, 1020.0)
    assert not await s.simple("retain", m4.id[1], 5, 1020.0)
    await s.dequeue(1.75, 1021.0, False)


async def test_retry_spent_records_are_dropped(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    await s.enqueue(item(1), 0, 0, 1000.0)  # one delivery
    m = await s.dequeue(1.5, 1001.0, False)
    assert m is not None and m.retry == 0
    assert await s.dequeue(1.25, 1003.0, False) is None  # exhausted on its redelivery
    assert await pm.state(conn, s.ids["q"]) == QueueState(0, 0, 0, None)


async def test_accumulation(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    assert await s.enqueue(item(1), None, 2.5, 1000.0) == "new"
    assert await s.enqueue(item(2), None, 2.5, 1001.0) == "yes"
    assert await s.dequeue(10.5, 1002.0, False) is None  # window still open
    assert await s.enqueue(item(3), None, 2.5, 1002.5) == "yes"  # ts >= now: still appends
    m = await s.dequeue(10.25, 1003.0, False)
    assert m is not None and m.content == [item(1), item(2), item(3)]
    assert await s.enqueue(item(4), None, 2.5, 1004.0) == "new"


async def test_first_ts_and_counts_follow_every_operation(conn: asyncpg.Connection) -> None:
    q = await create_queue(conn, "plain")
    _, st = await pm.enqueue(conn, q, ((), b"abc"), 0, 0, 100.0)
    assert st == QueueState(1, 3, 0, 100.0)
    got, st, _ = await pm.dequeue(conn, q, 30.0, 101.0, None)
    assert got is not None and st == QueueState(1, 3, 1, 131.0)
    ok, st = await pm.done(conn, q, got[0].id[1], 102.0)
    assert ok and st == QueueState(0, 0, 0, None)


async def test_push_options_round_trip_exactly(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    await s.push(item(1), 2, PushOptions(), False, 1000.0)  # no ext: LMQ's record
    await s.push(item(2), 2, PushOptions(), True, 1001.0)  # track: an ext
    await s.push(item(3), 2, PushOptions(not_before=1005.0009765625), False, 1002.0)
    await s.push(item(4), 2, PushOptions(expires=1100.1, interval=7.3, priority=3), False, 1003.0)
    await s.push(item(5), 2, PushOptions(once=True), False, 1004.0)
    await s.push(item(6), 2, PushOptions(group="g"), False, 1004.5)
    msgs = await pm.messages(conn, s.ids["q"])
    assert msgs[0].ext is None and msgs[1].ext is not None
    assert msgs == sorted(msgs, key=lambda m: m.id)
