"""A pylmq node on the postgres store, through real HTTP: the store contract end to end, two
nodes on one database (a pull waiting on one wakes when the other pushes), and the database
going away and coming back under a running node (503 store_unavailable, then service)."""

from __future__ import annotations

import asyncio

from pylmq.pgstore import PostgresStore
from tests.pg_helpers import PgServer
from tests.pgstore.conftest import StartPgNode

JSON_CT = {"Content-Type": "application/json"}


async def test_push_pull_ack_nack_on_the_postgres_store(start: StartPgNode) -> None:
    node, api = await start()
    assert node.store.kind == "postgres"
    assert (await api.push("q", b'{"m":1}', "application/json")).body == b'{"accum":"no"}'
    assert node.store.size("q") == 1
    r = await api.pull("q", t=None)
    assert (r.status, r.body, r.retry) == (200, b'{"m":1}', "2"), r
    assert (await api.reply("q", r.id, "nack")).status == 204
    again = await api.pull("q")
    assert again.status == 200 and again.id != r.id and again.retry == "1", again
    assert (await api.ack("q", again.id)).status == 204
    assert (await api.ack("q", again.id)).status == 404
    assert (await api.pull("q", t=0)).status == 204
    assert node.store.size("q") == 0


async def test_props_defaults_status_and_delete(start: StartPgNode) -> None:
    node, api = await start()
    await api.set_props("q", retry=0, timeout=7)
    assert (await api.props("q")).json() == {"accum": 0, "retry": 0, "timeout": 7}
    defaults = b'[["^d",{"timeout":3,"retry":"infinity"}]]'
    assert (await api.request("PUT", "/properties", data=defaults, headers=JSON_CT)).status == 204
    assert (await api.request("GET", "/properties")).body == defaults
    await api.push("q", b"x" * 10)
    await api.push("d1")
    stats = (await api.request("GET", "/stats")).json()
    assert {name: e["size"] for name, e in stats["queues"].items()} == {"q": 1, "d1": 1}, stats
    assert stats["queues"]["q"]["memory"] > stats["queues"]["d1"]["memory"], stats
    assert (await api.request("DELETE", "/queues/q")).status == 204
    assert "q" not in node.store.queue_names()
    assert (await api.pull("q", t=0)).status == 204


async def test_a_pull_waiting_on_one_node_wakes_when_another_pushes(start: StartPgNode) -> None:
    _, api_a = await start()
    _, api_b = await start(resync_interval=3600)
    await api_b.set_props("w", timeout=30)  # b made it: no news of it can be pending on b
    await api_a.push("w", b"warm-up")
    assert (await api_b.pull("w", t=2)).body == b"warm-up"
    waiting = asyncio.ensure_future(api_b.pull("w", t=10))
    await asyncio.sleep(0.2)  # the pull is parked on b
    assert not waiting.done()
    loop = asyncio.get_running_loop()
    pushed_at = loop.time()
    await api_a.push("w", b"from a")
    r = await asyncio.wait_for(waiting, 5)
    assert (r.status, r.body) == (200, b"from a"), r
    # Well under the pull's 10 s: woken by the notification, not by a timer.
    assert loop.time() - pushed_at < 5


async def test_a_queue_created_on_one_node_is_listed_on_the_other(start: StartPgNode) -> None:
    _, api_a = await start()
    b, api_b = await start()
    await api_a.set_props("made-on-a", timeout=9)

    async def listed() -> None:
        while "made-on-a" not in b.manager.queue_names():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(listed(), 5)
    assert (await api_b.props("made-on-a")).json()["timeout"] == 9


async def test_database_down_is_503_store_unavailable_then_served_again(
    pg_server: PgServer, start: StartPgNode
) -> None:
    node, api = await start()
    await api.push("q", b"before")
    pg_server.stop()
    try:
        for r in (await api.push("q", b"during"), await api.pull("q", t=0)):
            assert r.status == 503, r
            assert r.json()["error"] == "store_unavailable", r
            assert "postgresql unreachable" in r.json()["detail"], r
    finally:
        pg_server.start()
    assert isinstance(node.store, PostgresStore)

    # The node itself is not restarted: its pool and LISTEN session reconnect by themselves.
    got = await api.pull("q", t=0)
    assert (got.status, got.body) == (200, b"before"), got
    assert (await api.ack("q", got.id)).status == 204
    assert (await api.pull("q", t=0)).status == 204, "the push answered 503 must not be there"
    assert (await api.push("q", b"after")).status == 200


async def test_a_push_missed_while_the_listen_session_was_down_wakes_the_waiter(start: StartPgNode) -> None:
    _, api_a = await start()
    b, api_b = await start(resync_interval=3600)
    assert isinstance(b.store, PostgresStore)
    await api_b.set_props("w", timeout=30)  # b made it: no news of it can be pending on b
    await api_a.push("w", b"warm-up")
    assert (await api_b.pull("w", t=2)).body == b"warm-up"
    # b heard the warm-up's push: its follower re-reads the queue's state refresh_delay later and
    # wakes the waiters if a record is due then, which would find the push below without any
    # notification (a node starts faster than refresh_delay). Let that re-read pass first.
    while b.store._work.is_set() or b.store._dirty:
        await asyncio.sleep(0.01)
    await asyncio.sleep(b.store.refresh_delay)
    listener = b.store.listener
    gate = asyncio.Event()
    connect = listener._connect

    async def held_connect() -> None:
        await gate.wait()  # b stays deaf until the push below has committed
        await connect()

    listener._connect = held_connect  # type: ignore[method-assign]
    waiting = asyncio.ensure_future(api_b.pull("w", t=10))
    pid = listener.server_pid
    assert pid is not None
    _, api_a2 = await start()  # any node's pool will do to cut b's session
    await b.store._run("cut", lambda c: c.execute("SELECT pg_terminate_backend($1)", pid))
    while listener.conn is not None:
        await asyncio.sleep(0.01)
    await api_a2.push("w", b"unheard")
    await asyncio.sleep(0.3)
    assert not waiting.done(), "nothing could have told b yet"
    gate.set()
    r = await asyncio.wait_for(waiting, 5)
    assert (r.status, r.body) == (200, b"unheard"), r
