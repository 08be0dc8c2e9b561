"""PostgresStore's metadata on a real PostgreSQL: what one node writes, the others mirror (by
notification, or by re-reading on reconnection), read back exactly as written."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import asyncpg
import pytest

from pylmq.core.props import DefaultList, RawProps
from pylmq.errors import InvalidProps, StoreUnavailable
from pylmq.pgstore import PostgresStore, messages
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


async def test_a_read_begun_before_an_own_change_does_not_undo_it(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with opened(pg_dsn, resync_interval=3600) as a:
        await a.create("q", {"retry": 1})
        await a.create("gone")
        run = a._run
        raced = False

        async def change_after_the_read(what: str, fn: Any, *, retry: bool = False) -> Any:
            nonlocal raced
            result = await run(what, fn, retry=retry)
            if what == "load the queues" and not raced:
                raced = True  # committed after the read's snapshot, applied before its result
                await a.set_queue_props("q", {"retry": 9})
                await a.delete("gone")
            return result

        monkeypatch.setattr(a, "_run", change_after_the_read)
        await a._load_all()
        assert raced
        assert a.queue_props("q") == {"retry": 9}
        assert "gone" not in a.queue_names()


async def test_a_statement_past_the_timeout_is_store_unavailable(pg_dsn: str) -> None:
    async with opened(pg_dsn, timeout=0.5) as a:
        blocker = await asyncpg.connect(pg_dsn)
        try:
            async with blocker.transaction():
                await blocker.execute("LOCK TABLE lmq.queue IN ACCESS EXCLUSIVE MODE")
                with pytest.raises(StoreUnavailable) as e:
                    await a.create("q")
            assert "postgresql unreachable" in e.value.detail and "create queue q" in e.value.detail
            assert await a.create("q") is True  # the lock gone, the same store goes on
        finally:
            await blocker.close()


def _lost_after(real: Any) -> Any:
    """``real``, which commits, then the connection drops before the answer comes back."""
    calls: list[int] = []

    async def lost(*args: Any) -> Any:
        result = await real(*args)
        calls.append(1)
        if len(calls) == 1:
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation")
        return result

    lost.calls = calls  # type: ignore[attr-defined]
    return lost


async def test_a_push_whose_answer_is_lost_is_not_made_twice(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with opened(pg_dsn) as a:
        await a.create("q")
        lost = _lost_after(messages.enqueue)
        monkeypatch.setattr(messages, "enqueue", lost)
        with pytest.raises(StoreUnavailable) as e:
            await a.enqueue("q", ((), b"once"), None, 0.0)
        assert "outcome is unknown" in e.value.detail and "not retried" in e.value.detail
        assert lost.calls == [1]
        assert [msg.items() for msg in await a.load_messages("q")] == [[((), b"once")]]


async def test_an_ack_whose_answer_is_lost_is_tried_again_and_answered_done(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(pg_dsn) as a:
        await a.enqueue("q", ((), b"m"), None, 0.0)
        got = await a.dequeue("q", 30.0)
        assert got is not None
        lost = _lost_after(messages.done)
        monkeypatch.setattr(messages, "done", lost)
        assert await a.done("q", got[0].uuid) is True  # the retry finds it gone: the first did it
        assert lost.calls == [1, 1]
        assert a.size("q") == 0 and await a.load_messages("q") == []


async def test_a_pull_moving_exhausted_records_answers_with_the_dead_letter_queue_sized(pg_dsn: str) -> None:
    async with opened(pg_dsn) as a:
        moved: list[str] = []
        a.listen_transfers(moved.append)
        await a.enqueue("q", ((), b"m"), 0, 0.0)
        first = await a.dequeue("q", 0.0, "dlq")  # its one delivery, deadline now
        assert first is not None
        assert await a.dequeue("q", 30.0, "dlq") is None  # no retry left: dead-lettered
        assert moved == ["dlq"]
        assert (a.size("q"), a.size("dlq")) == (0, 1)
        assert a.waittime("dlq") == 0


async def test_sizes_are_exact_once_concurrent_operations_end(pg_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async with opened(pg_dsn, resync_interval=3600) as a:
        await a.create("q")
        real = messages.enqueue
        others_done = asyncio.Event()

        async def first_answer_last(*args: Any) -> Any:
            result = await real(*args)
            if args[2][1] == b"m0":  # committed first, answered last: its state is the oldest
                await others_done.wait()
            return result

        monkeypatch.setattr(messages, "enqueue", first_answer_last)
        first = asyncio.ensure_future(a.enqueue("q", ((), b"m0"), None, 0.0))

        async def committed() -> None:
            while not await a.peek("q", None, 1):
                await asyncio.sleep(0.001)

        await asyncio.wait_for(committed(), WAIT)  # m0 is in, its answer held back
        await asyncio.gather(*(a.enqueue("q", ((), b"m%d" % i), None, 0.0) for i in range(1, 50)))
        others_done.set()
        await first
        assert (a.size("q"), a.memory("q")) == (50, sum(len(b"m%d" % i) for i in range(50)))


async def test_a_pull_answered_after_a_push_does_not_put_the_queue_to_sleep(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with opened(pg_dsn, resync_interval=3600) as a:
        await a.create("q")
        woken: list[str] = []
        a.listen_transfers(woken.append)
        real = messages.dequeue
        ran, pushed = asyncio.Event(), asyncio.Event()

        async def answered_after_the_push(*args: Any) -> Any:
            result = await real(*args)  # found the queue empty
            ran.set()
            await pushed.wait()
            return result

        monkeypatch.setattr(messages, "dequeue", answered_after_the_push)
        pull = asyncio.ensure_future(a.dequeue("q", 30.0))
        await asyncio.wait_for(ran.wait(), WAIT)
        await a.enqueue("q", ((), b"m"), None, 0.0)
        assert a.waittime("q") == 0
        pushed.set()
        assert await pull is None
        # Its answer said "empty", older than the push's: the queue is read again and woken.
        assert a.waittime("q") == 0
        assert woken == ["q"]


async def test_another_nodes_pushes_pulls_and_acks_show_in_sizes(pg_dsn: str) -> None:
    async with opened(pg_dsn) as a, opened(pg_dsn, resync_interval=0.2) as b:
        await a.create("q")
        await b.create("q")

        async def size_on_b(n: int) -> None:
            while b.size("q") != n:
                await asyncio.sleep(0.01)

        await a.enqueue("q", ((), b"m"), None, 0.0)
        await asyncio.wait_for(size_on_b(1), WAIT)  # the push notified: re-read soon after
        got = await a.dequeue("q", 30.0)
        assert got is not None and await a.done("q", got[0].uuid)
        await asyncio.wait_for(size_on_b(0), WAIT)  # no notification: the periodic re-read


@pytest.mark.parametrize(
    "error",
    [
        asyncpg.InternalClientError("cannot switch to state 12; another operation (2) is in progress"),
        asyncpg.ProtocolError("unexpected message"),
        asyncpg.InterfaceError("cannot perform operation: another operation is in progress"),
        asyncpg.InterfaceError("cannot perform operation: connection is closed"),
        asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
        asyncpg.CannotConnectNowError("the database system is shutting down"),
        asyncpg.AdminShutdownError("terminating connection due to administrator command"),
        asyncpg.CrashShutdownError("terminating connection because of crash of another server process"),
        asyncpg.TooManyConnectionsError("sorry, too many clients already"),
        ConnectionResetError(104, "Connection reset by peer"),
    ],
    ids=type,
)
async def test_a_broken_connection_is_503_and_never_lent_again(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    """What asyncpg raises when the server goes away mid-operation (a fast shutdown or a restart
    under load): StoreUnavailable, and the pool's only connection is replaced, not lent again
    broken (the pool runs no reset query on release that would notice)."""
    async with opened(pg_dsn, pool_size=1) as a:
        await a.create("q")
        real = messages.enqueue
        pids: list[int] = []

        async def broken(db: Any, *args: Any) -> Any:
            pids.append(db.get_server_pid())
            if len(pids) == 1:
                raise error
            return await real(db, *args)

        monkeypatch.setattr(messages, "enqueue", broken)
        with pytest.raises(StoreUnavailable) as e:  # a push is not retried: its outcome is unknown
            await a.enqueue("q", ((), b"lost"), None, 0.0)
        assert "postgresql unreachable" in e.value.detail
        await a.enqueue("q", ((), b"m"), None, 0.0)
        assert len(pids) == 2 and pids[0] != pids[1]
        assert [msg.items() for msg in await a.load_messages("q")] == [[((), b"m")]]


@pytest.mark.parametrize(
    "error",
    [asyncpg.DataError("invalid input for query argument $1"), asyncpg.UndefinedFunctionError("no such function")],
    ids=type,
)
async def test_errors_of_ours_stay_what_they_are(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch, error: Exception
) -> None:
    async with opened(pg_dsn, pool_size=1) as a:
        await a.create("q")

        async def buggy(*_args: Any) -> Any:
            raise error

        monkeypatch.setattr(messages, "dequeue", buggy)
        with pytest.raises(type(error)):
            await a.dequeue("q", 30.0)


async def test_releasing_a_connection_costs_no_round_trip(pg_dsn: str) -> None:
    """The pool releases connections without a reset query: an operation is one statement."""
    async with opened(pg_dsn, pool_size=1) as a:
        await a.create("q")
        seen: list[str] = []
        async with a._db().acquire() as conn:
            conn.add_query_logger(lambda record: seen.append(record.query))
        await a.enqueue("q", ((), b"m"), None, 0.0)
        assert len(seen) == 1 and "lmq.enqueue" in seen[0], seen
