"""PostgresStore when another node deleted, created or bound a name this node has not heard of
yet (its notification not followed: ``refresh_delay`` long): writes never land under a deleted
queue's id, names stay disjoint, patches of props merge in the database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from pylmq.errors import BadRequest, StoreUnavailable
from pylmq.pgstore import PostgresStore
from pylmq.pgstore.meta import decode_props
from tests.pgstore.pg_store_helpers import Recorder, opened

ORPHANS = "SELECT count(*) FROM lmq.message m WHERE NOT EXISTS (SELECT 1 FROM lmq.queue q WHERE q.id = m.queue_id)"


@asynccontextmanager
async def slow(dsn: str) -> AsyncIterator[PostgresStore]:
    """A store that follows other nodes' notifications only 30 s later (never in a test)."""
    async with opened(dsn, resync_interval=3600.0) as store:
        store.refresh_delay = 30.0
        yield store


async def _fetchval(dsn: str, sql: str, *args: object) -> object:
    conn = await asyncpg.connect(dsn)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def _dead_letter_ready(store: PostgresStore) -> None:
    """A record of q with no retry left, delivered once (deadline now): the next pull moves it."""
    await store.enqueue("q", ((), b"m"), 0, 0.0)
    assert await store.dequeue("q", 0.0, "dlq") is not None


async def test_a_dead_letter_to_a_queue_another_node_deleted_lands_in_it_created_again(pg_dsn: str) -> None:
    async with opened(pg_dsn) as a, slow(pg_dsn) as b:
        await b.create("dlq")
        old = b._ids["dlq"]
        await _dead_letter_ready(b)
        assert await a.delete("dlq") is True
        assert b._ids["dlq"] == old  # b has not heard of it
        assert await b.dequeue("q", 30.0, "dlq") is None  # the record is dead-lettered
        assert await _fetchval(pg_dsn, ORPHANS) == 0
        assert b._ids["dlq"] != old
        assert [m.content for m in await b.load_messages("dlq")] == [((), b"m")]
        assert b.size("dlq") == 1


async def test_a_requeue_to_a_queue_another_node_deleted_lands_in_it_created_again(pg_dsn: str) -> None:
    async with opened(pg_dsn) as a, slow(pg_dsn) as b:
        await _dead_letter_ready(b)
        assert await b.dequeue("q", 30.0, "dlq") is None
        await b.create("t")
        assert await a.delete("t") is True
        assert await b.requeue("dlq", 10, "t") == 1
        assert await _fetchval(pg_dsn, ORPHANS) == 0
        assert [m.content for m in await b.load_messages("t")] == [((), b"m")]
        assert (b.size("t"), b.size("dlq")) == (1, 0)


async def test_a_queue_name_another_node_bound_as_virtual_is_refused(pg_dsn: str) -> None:
    async with slow(pg_dsn) as a, slow(pg_dsn) as b:
        await b.set_virtual("v", ["m1", "m2"])
        with pytest.raises(BadRequest):
            await a.create("v")
        assert await _fetchval(pg_dsn, "SELECT count(*) FROM lmq.queue WHERE name = 'v'") == 0
        await b.set_virtual("v", [])  # unbound: the name may be a queue again
        assert await a.create("v") is True
        with pytest.raises(BadRequest):
            await b.set_virtual("v", ["m1"])


async def test_patches_merge_in_the_database_and_a_reset_clears_every_key(pg_dsn: str) -> None:
    async with slow(pg_dsn) as a, slow(pg_dsn) as b:
        await a.create("p", {"timeout": 7})
        assert await b.lookup("p") is True
        await a.set_queue_props("p", {"timeout": 7, "retry": 4})
        await b.set_queue_props("p", {"timeout": 7, "accum": 2})  # b's mirror lacks retry
        assert b.queue_props("p") == {"timeout": 7, "retry": 4, "accum": 2}  # as stored
        await a.set_queue_props("p", {"timeout": 3, "retry": 4})  # a changed value, a's mirror lacks accum
        stored = decode_props(str(await _fetchval(pg_dsn, "SELECT props::text FROM lmq.queue WHERE name = 'p'")))
        assert stored == {"timeout": 3, "retry": 4, "accum": 2}
        await b.set_queue_props("p", {})  # a reset: the whole object
        assert await _fetchval(pg_dsn, "SELECT props::text FROM lmq.queue WHERE name = 'p'") == "[]"


async def test_a_lookup_mirrors_a_queue_created_elsewhere_and_tells_the_manager(pg_dsn: str) -> None:
    async with opened(pg_dsn) as a, slow(pg_dsn) as b:
        seen = Recorder()
        b.follow(seen)
        await a.create("fresh", {"retry": 2})
        await a.enqueue("fresh", ((), b"x"), 2, 0.0)
        assert "fresh" not in b.queue_names()
        assert await b.lookup("fresh") is True
        assert seen.events == [("created", "fresh")]
        assert (b.queue_props("fresh"), b.size("fresh")) == ({"retry": 2}, 1)
        assert await b.lookup("nothing") is False
        assert "nothing" not in b.queue_names()


async def test_deletes_of_a_dead_letter_chain_during_pulls_never_fail_but_with_a_503(pg_dsn: str) -> None:
    """Queues q0 -> q1 -> ... -> q4 (each the dead-letter queue of the one before), pulled on
    two nodes while both keep deleting queues of the chain, which the pulls' dead letters create
    again. Two deletes of a name that a pull re-created between them used to deadlock
    (PostgreSQL aborted one: a 500). Every operation must succeed, or be refused with
    StoreUnavailable (a 503: the queue kept being deleted), and no record outlives its queue."""
    name = pg_dsn.rsplit("/", 1)[1]
    # Deadlocks are found within milliseconds instead of PostgreSQL's default second.
    await _fetchval(pg_dsn, f"ALTER DATABASE {name} SET deadlock_timeout = '20ms'")
    chain = [f"q{i}" for i in range(5)]
    refused: list[Exception] = []
    async with opened(pg_dsn) as a, opened(pg_dsn) as b:
        stores = [a, b]

        async def puller(i: int, store: PostgresStore) -> None:
            for _ in range(120):
                try:
                    # retry -1: no delivery left, so the pull moves it on to the next queue.
                    await store.enqueue(chain[i], ((), b"x"), -1, 0.0)
                    await store.dequeue(chain[i], 30.0, chain[i + 1] if i + 1 < len(chain) else None)
                except StoreUnavailable as e:
                    refused.append(e)

        async def deleter(k: int) -> None:
            for n in range(150):
                try:
                    await stores[(k + n) % 2].delete(chain[(k * 7 + n) % len(chain)])
                except StoreUnavailable as e:
                    refused.append(e)
                await asyncio.sleep(0)

        pullers = [puller(i, s) for i in range(len(chain)) for s in stores]
        await asyncio.gather(*pullers, *(deleter(k) for k in range(6)))
    assert all("keeps being deleted" in str(e) for e in refused), refused
    assert await _fetchval(pg_dsn, ORPHANS) == 0
    # Not one deadlock (the stores run an aborted transaction again: none may show even then).
    assert await _fetchval(pg_dsn, "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()") == 0
