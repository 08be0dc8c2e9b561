"""Adversarial probes of the postgres store through real nodes over HTTP on one throwaway
PostgreSQL: races between nodes (a queue deleted on one node while another pushes), waiters
across nodes, hostile input."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import msgpack

from pylmq.node import LMQNode
from pylmq.pgstore import PostgresStore
from pylmq.pgstore.meta import decode_props
from tests.api.api_helpers import Api, Reply
from tests.pg_helpers import PgServer
from tests.pgstore.conftest import StartPgNode

JSON_CT = {"Content-Type": "application/json"}


async def _count(dsn: str, sql: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        n: int = await conn.fetchval(sql)
        return n
    finally:
        await conn.close()


ORPHANS = "SELECT count(*) FROM lmq.message m WHERE NOT EXISTS (SELECT 1 FROM lmq.queue q WHERE q.id = m.queue_id)"


async def _forgotten(node: LMQNode, name: str, qid: int) -> None:
    """Until the node's store no longer maps ``name`` to ``qid`` (it heard of the delete)."""
    assert isinstance(node.store, PostgresStore)
    while node.store._ids.get(name) == qid:
        await asyncio.sleep(0.02)


async def test_a_push_answered_200_right_after_another_node_deleted_the_queue_is_not_lost(
    start: StartPgNode, pg_dsn: str
) -> None:
    _, api_a = await start()
    b, api_b = await start(refresh_delay=1.0, resync_interval=3600)
    assert isinstance(b.store, PostgresStore)
    await api_b.push("q", b"first")
    qid = b.store._ids["q"]
    assert (await api_a.request("DELETE", "/queues/q")).status == 204
    # b has not followed the delete yet (as any push racing the delete): its answer must hold.
    r = await api_b.push("q", b"after delete")
    assert r.status == 200, r
    await asyncio.wait_for(_forgotten(b, "q", qid), 5)
    got = [await api_b.pull("q", t=0), await api_a.pull("q", t=0)]
    assert [g.body for g in got if g.status == 200] == [b"after delete"], got
    assert await _count(pg_dsn, ORPHANS) == 0


async def test_a_default_props_regex_jsonb_cannot_hold_is_a_400(start: StartPgNode) -> None:
    _, api = await start()
    r = await api.request("PUT", "/properties", data='[["a\\u0000",{"timeout":3}]]', headers=JSON_CT)
    assert r.status == 400 and r.json()["error"] == "invalid_props", r
    assert (await api.request("GET", "/properties")).body == b"[]"
    # A NUL in a default's props is refused with a 400 already.
    r = await api.request("PUT", "/properties", data='[["^d",{"dead_letter":"x\\u0000"}]]', headers=JSON_CT)
    assert r.status == 400, r


async def test_an_ack_on_a_node_that_has_not_mirrored_the_new_queue_yet_is_done(start: StartPgNode) -> None:
    _, api_a = await start()
    _, api_b = await start(refresh_delay=1.0, resync_interval=3600)
    await api_a.set_props("fresh", timeout=1)
    await api_a.push("fresh", b"one")
    got = await api_a.pull("fresh", t=0)
    assert got.status == 200, got
    r = await api_b.ack("fresh", got.id)  # a load balancer sent the ack to b
    assert r.status == 204, r
    await asyncio.sleep(1.2)  # past the delivery's timeout: an ack not done would show here
    again = await api_a.pull("fresh", t=0)
    assert again.status == 204, again


async def test_binding_a_virtual_name_another_node_made_a_queue_is_refused(start: StartPgNode) -> None:
    _, api_a = await start(refresh_delay=1.0, resync_interval=3600)
    _, api_b = await start(refresh_delay=1.0, resync_interval=3600)
    assert (await api_b.push("v", b"real")).status == 200  # committed before the bind begins
    r = await api_a.request("PUT", "/virtual/v", data=json.dumps({"queues": ["m1", "m2"]}), headers=JSON_CT)
    assert r.status == 400, r


async def test_sessions_terminated_under_load_give_503_never_500(start: StartPgNode, pg_dsn: str) -> None:
    _, api_a = await start()
    _, api_b = await start()
    await api_a.set_props("t", timeout=2)
    bad: list[Reply] = []
    stop = asyncio.Event()

    async def worker(api: Api) -> None:
        while not stop.is_set():
            replies = [await api.push("t", b"x"), p := await api.pull("t", t=0)]
            if p.status == 200:
                replies.append(await api.ack("t", p.id))
            bad.extend(r for r in replies if r.status >= 500 and r.status != 503)

    tasks = [asyncio.ensure_future(worker(api)) for api in (api_a, api_b, api_a, api_b)]
    admin = await asyncpg.connect(pg_dsn)
    try:
        for _ in range(20):
            await asyncio.sleep(0.2)
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'pylmq' AND pid <> pg_backend_pid()"
            )
    finally:
        await admin.close()
        stop.set()
        await asyncio.gather(*tasks)
    assert not bad, bad[:3]


async def test_a_waiter_on_one_node_gets_what_another_node_delays_nacks_or_lets_time_out(
    start: StartPgNode,
) -> None:
    """Passing probe: only notifications (and the pulls' own states) drive b's waiter here."""
    loop = asyncio.get_running_loop()
    _, api_a = await start()
    _, api_b = await start(resync_interval=3600)
    await api_b.set_props("w", timeout=1, retry=5)
    await api_a.push("w", b"warm-up")
    warm = await api_b.pull("w", t=2)
    assert warm.body == b"warm-up"
    assert (await api_b.ack("w", warm.id)).status == 204
    # A delayed push on a: b's parked pull gets it when due, not before, well before its 10 s.
    waiting = asyncio.ensure_future(api_b.pull("w", t=10))
    await asyncio.sleep(0.2)
    pushed = loop.time()
    assert (await api_a.request("POST", "/messages/w", {"delay": 1.5}, data=b"delayed")).status == 200
    r = await waiting
    assert (r.status, r.body) == (200, b"delayed"), r
    assert 1.4 <= loop.time() - pushed < 5
    assert (await api_b.ack("w", r.id)).status == 204
    # A nack on a of a's delivery: b's parked pull gets it at once.
    await api_a.push("w", b"nacked")
    got = await api_a.pull("w", t=0)
    waiting = asyncio.ensure_future(api_b.pull("w", t=10))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    assert (await api_a.reply("w", got.id, "nack")).status == 204
    r = await asyncio.wait_for(waiting, 5)
    assert (r.status, r.body, r.retry) == (200, b"nacked", "4"), r
    # b lets its delivery time out (1 s): b's pull, parked on the deadline, gets it back on a.
    waiting = asyncio.ensure_future(api_a.pull("w", t=10))
    r2 = await waiting
    assert (r2.status, r2.body, r2.retry) == (200, b"nacked", "3"), r2
    assert (await api_b.ack("w", r.id)).status == 404  # the old delivery is gone
    assert (await api_a.ack("w", r2.id)).status == 204


async def test_a_parked_pull_survives_a_postgresql_restart_and_gets_the_next_push(
    start: StartPgNode, pg_server: PgServer
) -> None:
    """Passing probe: b's LISTEN session is cut by the restart; b's pull neither fails nor
    sleeps through a's push once the database is back."""
    loop = asyncio.get_running_loop()
    _, api_a = await start()
    _, api_b = await start(resync_interval=3600)
    await api_b.set_props("w", timeout=30)
    await api_a.push("w", b"warm-up")
    assert (await api_b.pull("w", t=2)).status == 200
    waiting = asyncio.ensure_future(api_b.pull("w", t=20))
    await asyncio.sleep(0.3)
    pg_server.stop()
    try:
        await asyncio.sleep(1.0)
        assert not waiting.done()
    finally:
        pg_server.start()
    for _ in range(100):
        r = await api_a.push("w", b"after")
        if r.status == 200:
            break
        assert r.status == 503, r
        await asyncio.sleep(0.1)
    pushed = loop.time()
    r = await asyncio.wait_for(waiting, 10)
    assert (r.status, r.body) == (200, b"after"), r
    assert loop.time() - pushed < 6  # the listener's backoff at most, not the pull's 20 s


async def test_patches_of_one_queues_props_on_two_nodes_both_stay(start: StartPgNode, pg_dsn: str) -> None:
    _, api_a = await start(refresh_delay=1.0, resync_interval=3600)
    b, api_b = await start(refresh_delay=1.0, resync_interval=3600)
    await api_a.set_props("p", timeout=7)

    async def mirrored() -> None:
        while b.store.queue_props("p") != {"timeout": 7}:
            await asyncio.sleep(0.02)

    await asyncio.wait_for(mirrored(), 5)
    await api_a.set_props("p", retry=4)  # 204: committed
    await api_b.set_props("p", accum=2)  # 204: committed, b not told of a's patch yet
    conn = await asyncpg.connect(pg_dsn)
    try:
        stored = decode_props(await conn.fetchval("SELECT props::text FROM lmq.queue WHERE name = 'p'"))
    finally:
        await conn.close()
    assert stored == {"timeout": 7, "retry": 4, "accum": 2}


async def test_a_claim_on_a_node_that_has_not_mirrored_the_new_queue_yet_takes_the_message(
    start: StartPgNode,
) -> None:
    _, api_a = await start()
    _, api_b = await start(refresh_delay=1.0, resync_interval=3600)
    await api_a.set_props("fresh", timeout=30)
    await api_a.push("fresh", b"one")
    got = await api_a.pull("fresh", t=0)
    assert got.status == 200, got
    # The client lost track of the delivery and a load balancer sent its claim to b.
    r = await api_b.request("POST", "/claims/fresh", data=json.dumps({"ids": [got.id]}), headers=JSON_CT)
    assert r.status == 200, r
    doc = msgpack.unpackb(r.body)
    assert [(m["queue"], m["id"], m["items"][0][1]) for m in doc["messages"]] == [("fresh", got.id, b"one")], doc
    assert doc["not_found"] == [], doc
    assert (await api_b.ack("fresh", got.id)).status == 204
    assert (await api_a.pull("fresh", t=0)).status == 204
