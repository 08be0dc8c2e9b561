"""The PostgreSQL side of the message operations: concurrent consumers, query plans at depth,
and the wake-up notifications."""

from __future__ import annotations

import asyncio
import re
import uuid

import asyncpg

from pylmq.core.message import PushOptions, State
from pylmq.pgstore import messages as pm
from pylmq.pgstore.messages import QueueState
from pylmq.pgstore.schema import SCHEMA_VERSION, migrate
from tests.pgstore.pg_diff import create_queue


async def test_concurrent_consumers_never_share_nor_lose_a_delivery(pg_dsn: str, conn: asyncpg.Connection) -> None:
    q = await create_queue(conn, "busy")
    total = 600
    pool = await asyncpg.create_pool(pg_dsn, min_size=9, max_size=9)
    assert pool is not None
    delivered: list[bytes] = []
    bodies: list[bytes] = []
    pushed = asyncio.Event()

    async def producer() -> None:
        for i in range(total):
            await pm.enqueue(pool, q, ((), b"%d" % i), None, 0, 1000.0)
        pushed.set()

    async def consumer() -> None:
        while True:
            got, _, _ = await pm.dequeue(pool, q, 60.0, 1001.0, None)
            if got is None:
                if pushed.is_set():
                    got, _, _ = await pm.dequeue(pool, q, 60.0, 1001.0, None)
                    if got is None:
                        return
                else:
                    await asyncio.sleep(0.005)
                    continue
            msg, _ = got
            delivered.append(msg.id[1])
            bodies.append(msg.items()[0][1])
            ok, _ = await pm.done(pool, q, msg.id[1], 1002.0)
            assert ok

    try:
        await asyncio.gather(producer(), *(consumer() for _ in range(8)))
    finally:
        await pool.close()
    assert len(delivered) == len(set(delivered)) == total
    assert sorted(bodies) == sorted(b"%d" % i for i in range(total))
    assert await pm.state(conn, q) == QueueState(0, 0, 0, None)


async def test_concurrent_consumers_keep_each_group_in_order(pg_dsn: str, conn: asyncpg.Connection) -> None:
    """Pushes, deliveries and acks of four groups all at once: each group is delivered in push
    order, one at a time, and none is left stuck (an ack's promotion of the next record and a
    push that finds the head leaving take turns on the group's lock)."""
    q = await create_queue(conn, "fifo")
    pool = await asyncpg.create_pool(pg_dsn, min_size=7, max_size=7)
    assert pool is not None
    seen: dict[str, list[int]] = {}
    in_flight: set[str] = set()
    pushed = asyncio.Event()

    async def producer() -> None:
        for i in range(160):
            await pm.push(pool, q, ((), b"%d" % i), None, PushOptions(group=f"g{i % 4}"), False, 1000.0)
        pushed.set()

    async def consumer() -> None:
        while True:
            got, st, _ = await pm.dequeue(pool, q, 60.0, 1001.0, None)
            if got is None:
                if st.size == 0 and pushed.is_set():
                    return
                await asyncio.sleep(0.002)
                continue
            msg, _ = got
            assert msg.ext is not None and msg.ext.group is not None
            g = msg.ext.group
            assert g not in in_flight  # one delivery of a group at a time
            in_flight.add(g)
            seen.setdefault(g, []).append(int(msg.items()[0][1]))
            await asyncio.sleep(0)
            in_flight.discard(g)
            ok, _ = await pm.done(pool, q, msg.id[1], 1002.0)
            assert ok

    try:
        await asyncio.wait_for(asyncio.gather(producer(), *(consumer() for _ in range(6))), 60)
    finally:
        await pool.close()
    assert seen == {f"g{k}": list(range(k, 160, 4)) for k in range(4)}


async def test_concurrent_accumulating_pushes_open_one_window(pg_dsn: str, conn: asyncpg.Connection) -> None:
    q = await create_queue(conn, "accum")
    pool = await asyncpg.create_pool(pg_dsn, min_size=8, max_size=8)
    assert pool is not None
    try:
        results = await asyncio.gather(*(pm.enqueue(pool, q, ((), b"%d" % i), None, 5.0, 1000.0) for i in range(40)))
    finally:
        await pool.close()
    assert sorted(r for r, _ in results) == ["new"] + ["yes"] * 39
    (msg,) = await pm.messages(conn, q)
    assert sorted(int(b) for _, b in msg.items()) == list(range(40))
    assert await pm.state(conn, q) == QueueState(1, sum(len(b"%d" % i) for i in range(40)), 0, 1005.0)


async def _plans(conn: asyncpg.Connection, sql: str, *args: object, buffers: bool = False) -> str:
    """The plans of every statement the call runs, nested ones included (auto_explain); with
    ``buffers``, as run, with the pages each node touched."""
    logs: list[str] = []

    def listener(_c: object, message: asyncpg.PostgresLogMessage) -> None:
        logs.append(str(message))

    conn.add_log_listener(listener)
    await conn.execute(
        "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0;"
        " SET auto_explain.log_nested_statements = on; SET client_min_messages = log;"
        f" SET auto_explain.log_analyze = {buffers}; SET auto_explain.log_buffers = {buffers}"
    )
    try:
        await conn.fetch(sql, *args)
    finally:
        await conn.execute("RESET client_min_messages; SET auto_explain.log_min_duration = -1")
        conn.remove_log_listener(listener)
    await asyncio.sleep(0)
    return "\n".join(logs)


async def test_operations_use_index_scans_on_a_deep_queue(conn: asyncpg.Connection) -> None:
    q = await create_queue(conn, "deep")
    other = await create_queue(conn, "other")
    # 100k records (a quarter of them in processing) in the queue, 20k in another one.
    await conn.execute(
        "INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key)"
        " SELECT $1, 1000 + i, u, (i % 4 = 0)::int, false, NULL, '\\x9290c400'::bytea, 0, lmq.msg_key(u)"
        " FROM (SELECT i, gen_random_uuid() AS u FROM generate_series(1, 100000) i) s",
        q,
    )
    await conn.execute(
        "INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key)"
        " SELECT $1, 500 + i, u, 0, false, NULL, '\\x9290c400'::bytea, 0, lmq.msg_key(u)"
        " FROM (SELECT i, gen_random_uuid() AS u FROM generate_series(1, 20000) i) s",
        other,
    )
    await conn.execute("ANALYZE lmq.message")
    # PL/pgSQL caches its statements' plans and may keep a generic one (parameters unknown)
    # after five calls: both kinds must walk the indexes.
    for k, mode in enumerate(["force_custom_plan", "force_generic_plan"]):
        await conn.execute(f"SET plan_cache_mode = {mode}")
        now = 200000 + 10 * k
        plans = await _plans(conn, "SELECT f.ndead FROM lmq.dequeue($1, 30, $2, NULL, NULL) f", q, now)
        assert "Seq Scan on message" not in plans and "FOR KEY SHARE" not in plans
        assert "Index Only Scan using message_priority" in plans or "Index Scan using message_priority" in plans
        assert "Index Scan using message_due on message" in plans
        got, _, _ = await pm.dequeue(conn, q, 30.0, now + 1.0, None)
        assert got is not None and got[0].content == ((), b"")
        u = uuid.UUID(bytes=got[0].id[1])
        plans = await _plans(conn, "SELECT f.ok FROM lmq.done($1, $2, $3) f", q, u, now + 2)
        assert "Seq Scan on message" not in plans and "message_pkey" in plans
        plans = await _plans(conn, "SELECT f.ts FROM lmq.peek($1, 5000, NULL, false, 10) f", q)
        # two index walks merged (no sort of the queue)
        assert "Seq Scan on message" not in plans and "Merge Append" in plans and "message_held" in plans
        plans = await _plans(
            conn, "SELECT f.result FROM lmq.enqueue($1, '\\x9290c400'::bytea, 0, NULL, 2, $2) f", q, now + 3
        )
        assert "Seq Scan on message" not in plans and "message_accum" in plans and "FOR KEY SHARE" not in plans


def _pages(plans: str, about: str) -> int:
    """Pages touched by the statements of a call whose text has ``about`` (their top nodes)."""
    total = 0
    for block in plans.split("Query Text:")[1:]:
        m = about in block.split("\n\n")[0] and re.search(r"Buffers: shared((?: \w+=\d+)+)", block)
        if m:
            total += sum(int(v) for v in re.findall(r"=(\d+)", m.group(1)))
    return total


async def test_priority_levels_are_walked_not_their_records(conn: asyncpg.Connection) -> None:
    """20,000 records of priority 9 not due yet, 20,000 due ones without a priority, and one due
    record of priority 2: a dequeue finds it in a few index probes (levels), walking neither
    the records of priority 9 before it nor the due ones."""
    q = await create_queue(conn, "levels")
    await conn.execute(
        "INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key)"
        " SELECT $1, i / 100.0, u, 0, false, NULL, '\\x9290c400'::bytea, 0, lmq.msg_key(u)"
        " FROM (SELECT i, gen_random_uuid() AS u FROM generate_series(1, 20000) i) s",
        q,
    )
    await conn.execute(
        "INSERT INTO lmq.message (queue_id, ts, uuid, state, compound, retry, content, nbytes, key, ext, priority)"
        " SELECT $1, 5000 + i, u, 0, false, NULL, '\\x9290c400'::bytea, 0, lmq.msg_key(u), true, 9"
        " FROM (SELECT i, gen_random_uuid() AS u FROM generate_series(1, 20000) i) s",
        q,
    )
    await pm.push(conn, q, ((), b"due"), None, PushOptions(priority=2), False, 1000.0)
    await conn.execute("VACUUM ANALYZE lmq.message")
    plans = await _plans(conn, "SELECT f.ndead FROM lmq.dequeue($1, 30, 1001, NULL, NULL) f", q, buffers=True)
    assert "Seq Scan on message" not in plans
    # the walk of the levels: 4 probes (a dozen pages); either 20,000 index entries are 60 pages
    assert 0 < _pages(plans, "x.priority") < 30
    (msg,) = [m for m in await pm.messages(conn, q) if m.state is State.PROCESSING]
    assert msg.items() == [((), b"due")]


async def test_changes_that_make_a_record_deliverable_notify(conn: asyncpg.Connection, pg_dsn: str) -> None:
    q = await create_queue(conn, "wake")
    listener = await asyncpg.connect(pg_dsn)
    got: list[str] = []
    await listener.add_listener("lmq_due", lambda *a: got.append(a[3]))
    try:
        await pm.enqueue(conn, q, ((), b"a"), None, 0, 100.5)
        await pm.push(conn, q, ((), b"b"), None, PushOptions(not_before=150.25), False, 101.0)
        m, _, _ = await pm.dequeue(conn, q, 30.0, 102.0, None)
        assert m is not None
        await pm.retain(conn, q, m[0].id[1], 30.0, 103.0)  # not a new deliverable record: silent
        await pm.release(conn, q, m[0].id[1], 104.0)
        for _ in range(100):
            if len(got) >= 3:
                break
            await asyncio.sleep(0.01)
        assert got == [f"{q}:100.5", f"{q}:150.25", f"{q}:104"]
    finally:
        await listener.close()


async def test_deleting_a_queue_deletes_its_messages_and_counts(conn: asyncpg.Connection) -> None:
    q = await create_queue(conn, "gone")
    keep = await create_queue(conn, "kept")
    for qid in (q, keep):
        await pm.enqueue(conn, qid, ((), b"x"), None, 0, 100.0)
    await conn.execute("DELETE FROM lmq.queue WHERE id = $1", q)
    assert await conn.fetchval("SELECT count(*) FROM lmq.message WHERE queue_id = $1", q) == 0
    assert await pm.state(conn, q) == QueueState(0, 0, 0, None)
    assert await pm.state(conn, keep) == QueueState(1, 1, 0, 100.0)


async def test_a_push_racing_the_ack_of_its_groups_head_is_not_left_waiting(
    pg_dsn: str, conn: asyncpg.Connection
) -> None:
    """The ack of a group's only record, not yet committed, and a push to the group: the push
    must not see the leaving head (and wait behind it forever): it waits for the ack's end."""
    q = await create_queue(conn, "race")
    await pm.push(conn, q, ((), b"a"), None, PushOptions(group="g"), False, 1000.0)
    got, _, _ = await pm.dequeue(conn, q, 60.0, 1001.0, None)
    assert got is not None
    other = await asyncpg.connect(pg_dsn)
    try:
        tr = conn.transaction()
        await tr.start()
        ok, _ = await pm.done(conn, q, got[0].id[1], 1002.0)
        assert ok
        push = asyncio.create_task(pm.push(other, q, ((), b"b"), None, PushOptions(group="g"), False, 1003.0))
        await asyncio.sleep(0.2)  # the push runs now (and, correctly, waits for the ack's lock)
        await tr.commit()
        await asyncio.wait_for(push, 10)
    finally:
        await other.close()
    got, _, _ = await pm.dequeue(conn, q, 60.0, 1004.0, None)
    assert got is not None and got[0].items() == [((), b"b")]


async def test_the_queue_tables_vacuum_after_a_fixed_number_of_dead_rows(conn: asyncpg.Connection) -> None:
    """Not after a fraction of the table (the default 20%): a deep queue would pile up dead rows
    before the index walks of its deliveries, which every delivery and ack leave behind."""
    rows = await conn.fetch(
        "SELECT relname, reloptions FROM pg_class WHERE relnamespace = 'lmq'::regnamespace"
        " AND relname IN ('message', 'queue_count')"
    )
    opts = {r["relname"]: set(r["reloptions"]) for r in rows}
    assert {"autovacuum_vacuum_scale_factor=0", "autovacuum_vacuum_insert_scale_factor=0"} <= opts["message"]
    assert {"autovacuum_vacuum_scale_factor=0", "fillfactor=50"} <= opts["queue_count"]
    assert await migrate(conn) == SCHEMA_VERSION  # applied once: a second node finds it done


async def test_helpers_called_from_plpgsql_are_plpgsql(conn: asyncpg.Connection) -> None:
    """A SQL function called from PL/pgSQL (not inlined) is planned again at every call: only
    msg_key, a single expression PostgreSQL inlines, stays SQL."""
    rows = await conn.fetch(
        "SELECT p.proname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang"
        " WHERE p.pronamespace = 'lmq'::regnamespace AND l.lanname = 'sql'"
    )
    assert [r["proname"] for r in rows] == ["msg_key"]


async def test_a_cycle_calls_no_nested_function(conn: asyncpg.Connection) -> None:
    """Every operation counts and reads its queue's state: inline statements, not nested
    PL/pgSQL calls (each one more executor start and function frame, most of the state's cost
    when it was a function), nor for the wake-up notification."""
    q = await create_queue(conn, "calls")
    async with conn.transaction():
        await conn.execute("SET LOCAL track_functions = 'pl'")
        await pm.enqueue(conn, q, ((), b"m"), None, 0.0, 1000.0)
        got, st, _ = await pm.dequeue(conn, q, 30.0, 1001.0, None)
        assert got is not None and st == QueueState(1, 1, 1, 1031.0)
        ok, st = await pm.done(conn, q, got[0].id[1], 1002.0)
        assert ok and st == QueueState(0, 0, 0, None)
        rows = await conn.fetch("SELECT funcname, calls FROM pg_stat_xact_user_functions WHERE schemaname = 'lmq'")
    assert {r["funcname"]: r["calls"] for r in rows} == {"enqueue": 1, "dequeue": 1, "done": 1}
