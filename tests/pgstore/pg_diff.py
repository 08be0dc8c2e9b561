"""A differential driver: the same message operations on a :class:`QueueTable` (the reference)
and on :mod:`pylmq.pgstore.messages`, compared after each one.

The two sides draw their uuids independently, so the driver keeps a map from the table's uuids
to the database's (filled by every operation that hands one out) and compares records by
everything but their uuid, checking the map where a record's place is not a tie. Tests keep ids
apart by using distinct times (a tie in ts is ordered by the random uuid, differently on each
side).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import asyncpg
import pytest

from pylmq.core.message import Item, MessageId, PushOptions, Retry, State, StoredMessage
from pylmq.core.table import QueueTable, dead_letter_record, requeued_record
from pylmq.errors import MessageNotFound
from pylmq.pgstore import messages as pm
from pylmq.pgstore.messages import QueueState

__all__ = ["Side", "create_queue", "norm"]


async def create_queue(conn: asyncpg.Connection, name: str) -> int:
    qid: int = await conn.fetchval("INSERT INTO lmq.queue (name) VALUES ($1) RETURNING id", name)
    return qid


def norm(m: StoredMessage) -> tuple[Any, ...]:
    """A record without its uuid."""
    return (m.id[0], m.state, m.type, m.retry, m.content, m.ext)


def table_state(t: QueueTable) -> QueueState:
    msgs = t.messages()
    first = t.first()
    return QueueState(
        len(msgs),
        sum(m.nbytes() for m in msgs),
        sum(1 for m in msgs if m.state is State.PROCESSING),
        None if first is None else first.id[0],
    )


class Side:
    """Queue ``q`` with dead-letter queue ``d`` and requeue target ``r``, on both sides."""

    def __init__(self, conn: asyncpg.Connection, prefix: str, dlq_retry: Retry = 1, r_retry: Retry = None) -> None:
        self.conn = conn
        self.names = {k: f"{prefix}{k}" for k in "qdr"}
        self.tables = {k: QueueTable(n) for k, n in self.names.items()}
        self.ids: dict[str, int] = {}
        self.dlq_retry = dlq_retry
        self.r_retry = r_retry
        self.uuids: list[bytes] = []  # table uuids handed out, in order (stale ones stay)
        self.map: dict[bytes, bytes] = {}  # table uuid -> database uuid

    async def open(self) -> None:
        for k, n in self.names.items():
            self.ids[k] = await create_queue(self.conn, n)

    def _learn(self, tu: bytes, pu: bytes) -> None:
        if tu not in self.map:
            self.uuids.append(tu)
        self.map[tu] = pu

    def pg_uuid(self, tu: bytes) -> bytes:
        return self.map.get(tu, tu)

    async def check(self, k: str = "q", st: QueueState | None = None) -> None:
        """Both sides hold the same records in the same order, and the state matches."""
        t = self.tables[k]
        ours = await pm.messages(self.conn, self.ids[k])
        ref = t.messages()
        self.compare(ref, ours)
        want = table_state(t)
        assert await pm.state(self.conn, self.ids[k]) == want
        if st is not None:
            assert st == want

    def compare(self, ref: list[StoredMessage], ours: list[StoredMessage]) -> None:
        assert [m.id[0] for m in ref] == [m.id[0] for m in ours]
        rs, os_ = _by_ts(ref), _by_ts(ours)
        assert sorted(rs, key=repr) == sorted(os_, key=repr), (ref, ours)
        tss = [m.id[0] for m in ref]
        for a, b in zip(ref, ours, strict=True):
            if tss.count(a.id[0]) == 1:
                assert norm(a) == norm(b)
                if a.id[1] in self.map:
                    assert self.map[a.id[1]] == b.id[1]

    # -- operations ---------------------------------------------------------------------------

    async def enqueue(self, item: Item, retry: Retry, accum: float, now: float) -> str:
        t = self.tables["q"]
        want = t.enqueue(item, retry, accum, now)
        got, st = await pm.enqueue(self.conn, self.ids["q"], item, retry, accum, now)
        assert got == want
        await self.check("q", st)
        return got

    async def push(self, item: Item, retry: Retry, opts: PushOptions, track: bool, now: float) -> None:
        tu = self.tables["q"].push(item, retry, now, opts, track=track)
        pu, st = await pm.push(self.conn, self.ids["q"], item, retry, opts, track, now)
        self._learn(tu, pu)
        await self.check("q", st)

    async def dequeue(self, timeout: float, now: float, dead: bool) -> StoredMessage | None:
        t = self.tables["q"]
        deadl: list[StoredMessage] | None = [] if dead else None
        want = t.dequeue(timeout, now, deadl)
        for m in deadl or ():
            self.tables["d"].adopt(dead_letter_record(m, self.dlq_retry, now))
        got, st, ndead = await pm.dequeue(
            self.conn, self.ids["q"], timeout, now, (self.ids["d"], self.dlq_retry) if dead else None
        )
        assert ndead == len(deadl or ())
        assert (got is None) == (want is None), (want, got)
        if want is not None and got is not None:
            assert norm(want[0]) == norm(got[0])
            assert want[1] == got[1]
            self._learn(want[0].id[1], got[0].id[1])
        await self.check("q", st)
        await self.check("d")
        return None if want is None else want[0]

    async def simple(self, op: str, tu: bytes, timeout: float, now: float) -> bool:
        t = self.tables["q"]
        pu = self.pg_uuid(tu)
        qid = self.ids["q"]
        if op == "done":
            want = t.done(tu, now)
            got, st = await pm.done(self.conn, qid, pu, now)
        elif op == "retain":
            want = t.retain(tu, timeout, now)
            got, st = await pm.retain(self.conn, qid, pu, timeout, now)
        elif op == "release":
            want = t.release(tu, now)
            got, st = await pm.release(self.conn, qid, pu, now)
        else:
            assert op == "put_back"
            want = t.put_back(tu, now)
            got, st = await pm.put_back(self.conn, qid, pu, now)
        assert got == want, op
        await self.check("q", st)
        return got

    async def claim(self, tus: list[bytes], timeout: float, now: float, max_bytes: int | None) -> None:
        want = self.tables["q"].claim(tus, timeout, now, max_bytes)
        got, st = await pm.claim(self.conn, self.ids["q"], [self.pg_uuid(u) for u in tus], timeout, now, max_bytes)
        assert len(got) == len(want)
        for a, b in zip(want, got, strict=True):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert norm(a) == norm(b)
                assert self.map.get(a.id[1], a.id[1]) == b.id[1]
        await self.check("q", st)

    async def peek(self, after: MessageId | bytes | None, limit: int, at: int | None = None) -> None:
        """Peek after ``after`` (a table id or uuid), or after the ``at``-th record."""
        t = self.tables["q"]
        pafter: MessageId | bytes | None = after
        if at is not None:
            after = t.messages()[at].id
            pafter = (await pm.messages(self.conn, self.ids["q"]))[at].id
        elif isinstance(after, bytes):
            pafter = self.pg_uuid(after)
        try:
            want = t.peek(after, limit)
        except MessageNotFound:
            with pytest.raises(MessageNotFound):
                await pm.peek(self.conn, self.ids["q"], pafter, limit)
            return
        got = await pm.peek(self.conn, self.ids["q"], pafter, limit)
        self.compare(want, got)

    async def find_delivery(self, tu: bytes) -> None:
        from pylmq.core.message import msg_key

        want = self.tables["q"].find_delivery(msg_key(tu))
        got = await pm.find_delivery(self.conn, self.ids["q"], msg_key(self.pg_uuid(tu)), 0.0)
        assert (want is None) == (got is None)
        if want is not None:
            assert self.map[want] == got

    async def requeue(self, count: int, to_r: bool, keep: list[str], now: float) -> None:
        d = self.tables["d"]
        moved_want: dict[str, int] = {}
        for m in d.take_dead(count, () if to_r else keep):
            assert m.ext is not None and m.ext.dead is not None
            k = "r" if to_r else next(k for k, n in self.names.items() if n == m.ext.dead.origin)
            retry = self.r_retry if k == "r" else None
            self.tables[k].adopt(requeued_record(m, retry, now))
            moved_want[k] = moved_want.get(k, 0) + 1
        targets: dict[str, tuple[int, Retry]] = {self.names["q"]: (self.ids["q"], None)}
        moved, states = await pm.requeue(
            self.conn, self.ids["d"], count, (self.ids["r"], self.r_retry) if to_r else None, targets, keep, now
        )
        assert moved == {self.ids[k]: n for k, n in moved_want.items()}
        for k in "dqr":
            if self.ids[k] in states:
                assert states[self.ids[k]] == table_state(self.tables[k])
            await self.check(k)


def _by_ts(ms: Iterable[StoredMessage]) -> list[tuple[Any, ...]]:
    return [norm(m) for m in ms]
