"""The PostgreSQL store's message operations against QueueTable (the reference), on a real
PostgreSQL: scripted sequences and hypothesis-generated ones, compared after every operation."""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import Any

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylmq.core.message import Inherit, PushOptions, msg_key
from pylmq.errors import MessageNotFound
from pylmq.pgstore import messages as pm
from pylmq.pgstore.messages import QueueState
from pylmq.pgstore.schema import migrate
from tests.pgstore.pg_diff import Side, create_queue

_names = itertools.count()


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


async def test_priority_is_served_first_among_due_records_fifo_within_a_level(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    await s.push(item(1), 0, PushOptions(), False, 1000.0)
    await s.push(item(2), 0, PushOptions(priority=2), False, 1001.0)
    await s.push(item(3), 0, PushOptions(priority=5, not_before=1050.5), False, 1002.0)  # not due yet
    await s.push(item(4), 0, PushOptions(priority=2), False, 1003.0)
    await s.push(item(5), 0, PushOptions(priority=7), False, 1004.0)
    got = [await s.dequeue(100.0 + i / 8, 1010.0 + i, False) for i in range(4)]
    assert [m.items()[0][1] if m else None for m in got] == [b"m5", b"m2", b"m4", b"m1"]
    m = await s.dequeue(1.5, 1051.0, False)
    assert m is not None and m.content == item(3)


async def test_expiry_after_a_delivery_exhausts_once_never_dead_letters(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    await s.push(item(1), None, PushOptions(expires=1100.25), True, 1000.0)
    await s.push(item(2), None, PushOptions(once=True), False, 1001.0)
    await s.push(item(3), None, PushOptions(expires=1002.5), False, 1002.0)  # expired before any delivery
    m1 = await s.dequeue(10.5, 1010.0, True)
    assert m1 is not None and m1.retry is None  # deadline before the expiry: retry unchanged
    assert await s.simple("release", m1.id[1], 0, 1011.0)
    m2 = await s.dequeue(10.75, 1012.0, True)
    assert m2 is not None and m2.content == item(2) and m2.retry == 0  # once
    m3 = await s.dequeue(10.125, 1013.0, True)
    assert m3 is not None and m3.content == item(3) and m3.retry == 0  # delivered once, expired
    # after the expiry the delivered one is exhausted: a dead letter with reason expired; the once
    # message is dropped, never dead-lettered
    assert await s.dequeue(1.0625, 1200.0, True) is None
    dead = await pm.messages(conn, s.ids["d"])
    assert [(m.content, m.ext.dead.reason if m.ext and m.ext.dead else None) for m in dead] == [
        (item(1), "expired"),
        (item(3), "expired"),
    ] or [(m.content, m.ext.dead.reason if m.ext and m.ext.dead else None) for m in dead] == [
        (item(3), "expired"),
        (item(1), "expired"),
    ]
    assert all(m.ext and m.ext.dead and m.ext.dead.origin == s.names["q"] for m in dead)


async def test_hard_expiry_drops_without_a_delivery(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    await s.push(item(1), None, PushOptions(not_before=1020.5, expires=1010.25, hard=True), False, 1000.0)
    assert await s.dequeue(5.0, 1030.0, True) is None
    assert await pm.state(conn, s.ids["d"]) == QueueState(0, 0, 0, None)


async def test_interval_replaces_the_timeout_on_delivery_and_retain(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    await s.push(item(1), 3, PushOptions(interval=7.125), False, 1000.0)
    m = await s.dequeue(30.0, 1001.0, False)
    assert m is not None and m.id[0] == 1008.125 and m.retry is None  # interval: unlimited retry
    assert await s.simple("retain", m.id[1], 30.0, 1002.0)
    assert (await pm.messages(conn, s.ids["q"]))[0].id[0] == 1009.125


async def test_groups_deliver_one_at_a_time_in_push_order(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    for i in range(4):
        await s.push(item(i), None, PushOptions(group="g"), False, 1000.0 + i)
    await s.push(item(9), None, PushOptions(group="h"), False, 1004.5)
    a = await s.dequeue(30.5, 1010.0, False)
    h = await s.dequeue(30.25, 1011.0, False)
    assert a is not None and a.content == item(0) and h is not None and h.content == item(9)
    assert await s.dequeue(30.125, 1012.0, False) is None  # g's head is in processing
    assert await s.simple("release", a.id[1], 0, 1013.0)  # nacked: keeps its place
    a2 = await s.dequeue(30.0625, 1014.0, False)
    assert a2 is not None and a2.content == item(0)
    assert await s.simple("done", a2.id[1], 0, 1015.0)
    got = []
    for i in range(3):
        m = await s.dequeue(30.5 + i / 64, 1016.0 + i, False)
        assert m is not None
        got.append(m.content)
        assert await s.simple("done", m.id[1], 0, 1016.5 + i)
    assert got == [item(1), item(2), item(3)]
    # the next message of a group becomes deliverable at an ack: the ack notifies (see below)


async def test_dead_letters_and_requeue_to_their_origin(conn: asyncpg.Connection) -> None:
    s = await side(conn, dlq_retry=None)
    for i in range(3):
        await s.enqueue(item(i), 0, 0, 1000.0 + i)
    for i in range(3):
        m = await s.dequeue(1.5 + i / 16, 1010.0 + i, True)
        assert m is not None
    assert await s.dequeue(1.0, 1020.0, True) is None  # all three exhausted: dead letters
    dead = await pm.messages(conn, s.ids["d"])
    assert len(dead) == 3 and all(m.ext and m.ext.dead and m.ext.dead.failures == 0 for m in dead)
    await s.requeue(10, False, [s.names["q"]], 1030.0)  # the origin kept: nothing moves
    assert len(await pm.messages(conn, s.ids["d"])) == 3
    moved, states = await pm.requeue(conn, s.ids["d"], 2, None, {s.names["q"]: (s.ids["q"], 4)}, [], 1031.0)
    assert moved == {s.ids["q"]: 2}
    assert states[s.ids["d"]].size == 1 and states[s.ids["q"]].size == 2
    back = await pm.messages(conn, s.ids["q"])
    assert [m.retry for m in back] == [5, 5] and all(m.ext and m.ext.dead is None for m in back)


async def test_claim_takes_back_deliveries_up_to_max_bytes(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    for i in range(4):
        await s.enqueue(item(i), 1, 0, 1000.0 + i)
    ms = [await s.dequeue(10.0 + i / 16, 1010.0 + i, False) for i in range(4)]
    ids = [m.id[1] for m in ms if m is not None]
    assert await s.simple("release", ids[1], 0, 1015.0)
    assert await s.simple("done", ids[3], 0, 1015.5)
    # held, released (spends a retry), duplicate, acked; max_bytes stops after three bytes
    await s.claim([ids[0], ids[1], ids[0], ids[3], ids[2], b"\0" * 16], 20.0, 1016.0, None)
    await s.claim([ids[0], ids[1], ids[2]], 20.25, 1017.0, 4)
    got, _ = await pm.claim(conn, s.ids["q"], [s.map[u] for u in ids[:3]], 20.0, 1018.0, 2)
    assert len(got) == 1  # the first claimed message (2 bytes) reaches max_bytes


async def test_peek_pages_and_a_cursor_that_left(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    for i in range(5):
        await s.push(item(i), 1, PushOptions(group="g" if i % 2 else None), False, 1000.0 + i)
    await s.peek(None, 3)
    await s.peek(None, 10, 1)
    await s.peek(s.uuids[2], 2)
    m = await s.dequeue(5.5, 1010.0, False)
    assert m is not None
    await s.peek(s.uuids[0], 2)  # redelivered under a new uuid: the old one left
    with pytest.raises(MessageNotFound):
        await pm.peek(conn, s.ids["q"], s.map[s.uuids[0]], 2)


async def test_find_delivery_by_key(conn: asyncpg.Connection) -> None:
    s = await side(conn)
    await s.enqueue(item(1), 1, 0, 1000.0)
    m = await s.dequeue(5.5, 1001.0, False)
    assert m is not None
    await s.find_delivery(m.id[1])
    got = await pm.find_delivery(conn, s.ids["q"], msg_key(s.map[m.id[1]]), 1002.0)
    assert got == s.map[m.id[1]]
    assert await pm.find_delivery(conn, s.ids["q"], msg_key(s.map[m.id[1]]) ^ 1, 1002.0) is None


# -- hypothesis: random operation sequences on both sides ----------------------------------------

# Every op k runs at now = BASE + 2k (+ what "advance" adds): times that an op sets get a fraction
# unique to k, so that no two records tie in ts (a tie is ordered by the random uuids).
BASE = 1000.0
FRAC = 1.0 / 4096

_retry = st.one_of(st.none(), st.integers(0, 2))
_ops = st.one_of(
    st.tuples(st.just("enqueue"), _retry, st.sampled_from([0.0, 2.5])),
    st.tuples(
        st.just("push"),
        st.one_of(st.just(Inherit.QUEUE), _retry),
        st.one_of(st.none(), st.integers(-1, 6)),  # delay
        st.one_of(st.none(), st.integers(0, 40)),  # expires after due
        st.one_of(st.none(), st.integers(1, 20)),  # interval
        st.integers(0, 3),  # priority
        st.booleans(),  # once
        st.booleans(),  # hard
        st.sampled_from([None, None, "a", "b"]),  # group
        st.booleans(),  # track
    ),
    st.tuples(st.just("dequeue"), st.integers(1, 30), st.booleans()),
    st.tuples(st.just("dequeue"), st.integers(1, 30), st.booleans()),
    st.tuples(st.sampled_from(["done", "retain", "release", "put_back"]), st.integers(0, 50), st.integers(1, 30)),
    st.tuples(st.just("claim"), st.integers(0, 50), st.integers(1, 30)),
    st.tuples(st.just("advance"), st.integers(1, 40)),
    st.tuples(st.just("peek"), st.integers(-1, 50), st.integers(1, 5), st.booleans()),
    st.tuples(st.just("find"), st.integers(0, 50)),
    st.tuples(st.just("requeue"), st.integers(1, 50)),
)


async def play(conn: asyncpg.Connection, ops: list[tuple[Any, ...]]) -> None:
    s = await side(conn)
    now = BASE
    n = 0
    for k, op in enumerate(ops, 1):
        now += 2.0
        frac = k * FRAC
        kind = op[0]
        if kind == "enqueue":
            n += 1
            await s.enqueue(item(n), op[1], op[2], now)
        elif kind == "push":
            _, retry, delay, expires, interval, priority, once, hard, group, track = op
            n += 1
            due = now if delay is None else now + delay + frac
            if once:
                retry, interval = Inherit.QUEUE, None
            if group is not None:
                priority = 0
            exp = None if expires is None else max(due, now) + expires + frac
            opts = PushOptions(
                not_before=None if delay is None else due,
                expires=exp,
                interval=None if interval is None else interval + frac,
                retry=retry,
                priority=priority,
                once=once,
                hard=hard and exp is not None,
                group=group,
            )
            await s.push(item(n), 1, opts, track, now)
        elif kind == "dequeue":
            await s.dequeue(op[1] + frac, now, op[2])
        elif kind in ("done", "retain", "release", "put_back"):
            if s.uuids:
                await s.simple(kind, s.uuids[op[1] % len(s.uuids)], op[2] + frac, now)
        elif kind == "claim":
            if s.uuids:
                await s.claim([s.uuids[op[1] % len(s.uuids)]], op[2] + frac, now, None)
        elif kind == "advance":
            now += op[1]
        elif kind == "peek":
            _, at, limit, by_uuid = op
            size = len(s.tables["q"])
            if by_uuid and s.uuids:
                await s.peek(s.uuids[at % len(s.uuids)], limit)  # maybe gone: MessageNotFound on both
            elif at >= 0 and size:
                await s.peek(None, limit, at % size)
            else:
                await s.peek(None, limit)
        elif kind == "find":
            if s.uuids:
                await s.find_delivery(s.uuids[op[1] % len(s.uuids)])
        else:
            assert kind == "requeue"
            await s.requeue(op[1], True, [], now)


def test_random_sequences_match_the_table(pg_dsn: str) -> None:
    loop = asyncio.new_event_loop()
    c = loop.run_until_complete(asyncpg.connect(pg_dsn))
    try:
        loop.run_until_complete(migrate(c))

        @settings(
            max_examples=int(os.environ.get("PG_DIFF_EXAMPLES", "60")),
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(st.lists(_ops, max_size=40))
        def run(ops: list[tuple[Any, ...]]) -> None:
            loop.run_until_complete(play(c, ops))

        run()
    finally:
        loop.run_until_complete(c.close())
        loop.close()
