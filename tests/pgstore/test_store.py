"""PostgresStore's metadata on a real PostgreSQL: what one node writes, the others mirror (by
notification, or by re-reading on reconnection), read back exactly as written."""

from __future__ import annotations

import asyncio
import socket

import pytest

from pylmq.core.props import DefaultList, RawProps
from pylmq.errors import InvalidProps, StoreUnavailable
from pylmq.pgstore import PostgresStore
from tests.pg_helpers import PgServer
from tests.pgstore.pg_store_helpers import WAIT, Recorder, opened

PROPS: RawProps = {"timeout": 30.0, "retry": 3, "accum": 0.5, "dead_letter": "dlq", "sqs": {"b": "2", "a": "1"}}
DEFAULTS: DefaultList = [("^z", {"timeout": 5.0, "retry": None}), ("^a", {"retry": 0, "accum": 1.0})]


async def test_props_and_defaults_read_back_exactly_by_a_fresh_node(pg_dsn: str) -> None:
    async with opened(pg_dsn) as a:
        assert await a.create("q", PROPS) is True
        assert await a.create("q") is False
        await a.set_default_props(DEFAULTS)
    async with opened(pg_dsn) as b:
        got = b.queue_props("q")
        assert got == PROPS
        assert got is not None and list(got) == list(PROPS)  # the order given
        assert [type(v) for v in got.values()] == [type(v) for v in PROPS.values()]
        assert b.default_props() == DEFAULTS
        assert [list(p) for _, p in b.default_props()] == [["timeout", "retry"], ["retry", "accum"]]


async def test_another_node_hears_queues_props_defaults_and_virtual_queues(pg_dsn: str) -> None:
    async with opened(pg_dsn) as a, opened(pg_dsn) as b:
        seen = Recorder()
        b.follow(seen)
        await a.create("q", {"retry": 1})
        await seen.wait_for("created", "q")
        assert b.queue_props("q") == {"retry": 1}
        await a.set_queue_props("q", {"retry": 5})
        await seen.wait_for("props", ["q"])
        assert b.queue_props("q") == {"retry": 5}
        await a.set_default_props(DEFAULTS)
        await seen.wait_for("props", None)
        assert b.default_props() == DEFAULTS
        await a.set_virtual("v", ["q", "r"])
        await seen.wait_for("virtual", None)
        assert b.virtual_queues() == {"v": ["q", "r"]}
        await a.delete("q")
        await seen.wait_for("deleted", "q")
        assert "q" not in b.queue_names() and b.queue_props("q") is None


async def test_own_changes_are_mirrored_at_once_and_not_echoed(pg_dsn: str) -> None:
    async with opened(pg_dsn) as a:
        mine = Recorder()
        a.follow(mine)
        await a.create("q", {"timeout": 1.0})
        assert a.queue_props("q") == {"timeout": 1.0} and a.queue_names() == ["q"]
        assert await a.delete("q") is True
        assert await a.delete("q") is False
        await asyncio.sleep(0.1)  # time for an echo to arrive, if one wrongly did
        assert mine.events == []


async def test_a_dedup_id_kept_on_one_node_answers_on_another(pg_dsn: str) -> None:
    async with opened(pg_dsn) as a, opened(pg_dsn) as b:
        await a.create("f.fifo")
        seen = Recorder()
        b.follow(seen)
        a.dedup_ids("f.fifo")["k"] = (a.clock.now(), "mid", "seq1")
        a.keep_dedup("f.fifo", "k", a.clock.now(), "mid", "seq1")
        await a.barrier()

        async def heard() -> None:
            while "k" not in b.dedup_ids("f.fifo"):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(heard(), WAIT)
        assert b.dedup_ids("f.fifo")["k"][1:] == ("mid", "seq1")
    async with opened(pg_dsn) as c:
        assert c.dedup_ids("f.fifo")["k"][1:] == ("mid", "seq1")


async def test_listen_session_lost_resyncs_what_no_notification_said(pg_server: PgServer, pg_dsn: str) -> None:
    async with opened(pg_dsn, resync_interval=3600) as b:
        seen = Recorder()
        b.follow(seen)
        pid = b.listener.server_pid
        assert pid is not None
        # Written behind the nodes' backs (no NOTIFY), and the LISTEN session cut: only the
        # re-read on reconnection can tell b.
        db = pg_dsn.rsplit("/", 1)[1]
        pg_server.psql("INSERT INTO lmq.queue (name, props) VALUES ('sneaky', '[[\"retry\", 7]]')", db)
        pg_server.psql(f"SELECT pg_terminate_backend({pid})", db)
        await seen.wait_for("created", "sneaky")
        assert b.listener.connects == 2
        assert b.queue_props("sneaky") == {"retry": 7}


def test_props_postgresql_cannot_hold_are_refused() -> None:
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none")
    store.check_props({"sqs": {"a": "fine"}})
    with pytest.raises(InvalidProps, match="NUL"):
        store.check_props({"sqs": {"a": "x\x00y"}})
    with pytest.raises(InvalidProps, match="surrogate"):
        store.check_props({"sqs": {"a": "\udc80"}})


async def test_open_without_the_database_fails_naming_the_cause() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there
    store = PostgresStore(f"postgresql://lmq:secret@127.0.0.1:{port}/db", timeout=2.0)
    with pytest.raises(StoreUnavailable) as e:
        await store.open()
    assert "postgresql unreachable" in e.value.detail and "cannot start" in e.value.detail
    assert "secret" not in e.value.detail
