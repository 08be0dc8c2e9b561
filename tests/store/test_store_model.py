"""Random operation sequences against the memory and the durable store, checked against a
plain reference model of LMQ's queue semantics (docs/lmq-contract.md#queues-and-messages), written independently of
``pylmq.core.table``: a list of records scanned for the smallest ``ts``.

Time is a ManualClock stepped 1 ms per operation; timeouts and accum windows end at distinct
sub-millisecond offsets, so no two records ever share a ``ts`` and the order never depends on
random uuids (LMQ's tie-break).
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pylmq.core.clock import ManualClock
from pylmq.core.message import Message, MessageType, State, make_item
from pylmq.store.durable import DurableStore
from pylmq.store.local import LocalStore
from pylmq.store.memory import MemoryStore

Q = "q"
STEP = 0.001
TIMEOUTS = (0.00513, 0.01027, 0.02041)
ACCUMS = (0.0, 0.00559, 0.01573)
DEFAULTS: dict[str, Any] = {"retry": 2, "timeout": TIMEOUTS[1], "accum": 0.0}

# -- the reference model ---------------------------------------------------------------------------


@dataclass
class Rec:
    handle: int
    ts: float
    state: str  # "available" | "processing" | "accum"
    compound: bool
    retry: int | None
    bodies: list[bytes]


@dataclass
class Model:
    recs: list[Rec] = field(default_factory=list)
    exists: bool = False
    props: dict[str, Any] = field(default_factory=dict)
    _handles: int = 0

    def _new_handle(self) -> int:
        self._handles += 1
        return self._handles

    def effective(self) -> dict[str, Any]:
        return {**DEFAULTS, **self.props}

    def push(self, body: bytes, now: float) -> str:
        self.exists = True
        p = self.effective()
        retry = None if p["retry"] is None else p["retry"] + 1
        if p["accum"] <= 0:
            self.recs.append(Rec(self._new_handle(), now, "available", False, retry, [body]))
            return "no"
        for r in self.recs:
            if r.state == "accum" and r.ts >= now:
                r.bodies.append(body)
                return "yes"
        self.recs.append(Rec(self._new_handle(), now + p["accum"], "accum", True, retry, [body]))
        return "new"

    def pull(self, now: float) -> Rec | None:
        if not self.exists:
            return None
        while self.recs:
            first = min(self.recs, key=lambda r: r.ts)
            if first.ts > now:
                return None
            self.recs.remove(first)
            if first.retry is not None and first.retry <= 0:
                continue
            retry = None if first.retry is None else first.retry - 1
            deadline = now + self.effective()["timeout"]
            new = Rec(self._new_handle(), deadline, "processing", first.compound, retry, list(first.bodies))
            self.recs.append(new)
            return new
        return None

    def _in_processing(self, handle: int, now: float) -> Rec | None:
        for r in self.recs:
            if r.handle == handle:
                return r if r.state == "processing" and r.ts >= now else None
        return None

    def ack(self, handle: int, now: float) -> bool:
        r = self._in_processing(handle, now)
        if r is not None:
            self.recs.remove(r)
        return r is not None

    def ext(self, handle: int, now: float) -> bool:
        r = self._in_processing(handle, now)
        if r is not None:
            r.ts = now + self.effective()["timeout"]
        return r is not None

    def nack(self, handle: int, now: float) -> bool:
        r = self._in_processing(handle, now)
        if r is not None:
            r.state, r.ts = "available", now
        return r is not None

    def put_back(self, handle: int, now: float) -> bool:
        r = self._in_processing(handle, now)
        if r is not None:
            r.state, r.ts = "available", now
            r.retry = None if r.retry is None else r.retry + 1
        return r is not None

    def delete(self) -> bool:
        existed = self.exists
        self.recs, self.exists, self.props = [], False, {}
        return existed

    def view(self) -> list[tuple[Any, ...]]:
        return sorted((r.ts, r.state, r.compound, r.retry, r.bodies) for r in self.recs)


def store_view(store: LocalStore) -> list[tuple[Any, ...]]:
    return sorted(
        (m.ts, m.state.value, m.type is MessageType.COMPOUND, m.retry, [b for _, b in m.items()])
        for m in store.messages(Q)
    )


def delivered_view(m: Message) -> tuple[Any, ...]:
    return (m.ts, m.state, m.retry, [b for _, b in m.items()])


# -- operations --------------------------------------------------------------------------------------

props_st = st.fixed_dictionaries(
    {},
    optional={
        "retry": st.sampled_from([0, 1, 2, None]),
        "timeout": st.sampled_from(TIMEOUTS),
        "accum": st.sampled_from(ACCUMS),
    },
)
# Weighted so that sequences pull, settle and redeliver often; delete and restart now and then.
KINDS = ["push"] * 6 + ["pull"] * 5 + ["ack"] * 2 + ["nack", "ext", "put_back"] + ["advance"] * 3 + ["props", "restart"]
ops = st.sampled_from([*KINDS, "delete"]).flatmap(
    lambda kind: st.tuples(
        st.just(kind),
        {
            "ack": st.integers(0, 50),
            "nack": st.integers(0, 50),
            "ext": st.integers(0, 50),
            "put_back": st.integers(0, 50),
            "advance": st.integers(1, 40),
            "props": props_st,
            "restart": st.booleans(),
        }.get(kind, st.none()),
    )
)


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.clock = ManualClock(1000.0)
        self.model = Model()
        self.memory = MemoryStore(self.clock)
        self.durable = DurableStore(tmp / "d0", fsync="none", clock=self.clock, compact_min_bytes=2048)
        self.restarts = 0
        # (model handle, uuid in memory store, uuid in durable store) per delivery
        self.tokens: list[tuple[int, bytes, bytes]] = []
        self.bodies = 0

    @property
    def stores(self) -> tuple[LocalStore, LocalStore]:
        return (self.memory, self.durable)

    async def open(self) -> None:
        await self.memory.open()
        await self.durable.open()

    async def close(self) -> None:
        await self.durable.close()

    async def restart(self, crash: bool) -> None:
        self.restarts += 1
        if crash:
            await self.durable.barrier()
            dest = self.tmp / f"d{self.restarts}"
            shutil.copytree(self.durable.data_dir, dest, ignore=shutil.ignore_patterns("LOCK"))
            await self.durable.close()
        else:
            await self.durable.close()
            dest = self.durable.data_dir
        self.durable = DurableStore(dest, fsync="none", clock=self.clock, compact_min_bytes=2048)
        await self.durable.open()

    async def step(self, op: tuple[Any, ...]) -> None:
        self.clock.advance(STEP)
        now, model = self.clock.now(), self.model
        kind = op[0]
        if kind == "push":
            self.bodies += 1
            body = b"%d" % self.bodies
            want = model.push(body, now)
            p = model.effective()
            for s in self.stores:
                got = await s.enqueue(Q, make_item(body), p["retry"], p["accum"])
                assert got == want, f"push to {s.kind}: expected {want!r}, got {got!r}"
        elif kind == "pull":
            timeout = model.effective()["timeout"]
            want_rec = model.pull(now)
            uuids = []
            for s in self.stores:
                got = await s.dequeue(Q, timeout)
                if want_rec is None:
                    assert got is None, f"pull from {s.kind}: expected nothing, got {got}"
                    continue
                assert got is not None, f"pull from {s.kind}: expected {want_rec}, got nothing"
                want = (want_rec.ts, State.PROCESSING, want_rec.retry, want_rec.bodies)
                assert delivered_view(got[0]) == want, f"pull from {s.kind}"
                uuids.append(got[0].uuid)
            if want_rec is not None:
                self.tokens.append((want_rec.handle, uuids[0], uuids[1]))
        elif kind in ("ack", "nack", "ext", "put_back"):
            if self.tokens:
                handle, mem_uuid, dur_uuid = self.tokens[-1 - op[1] % len(self.tokens)]  # mostly recent deliveries
            else:
                handle, mem_uuid, dur_uuid = -1, b"\x00" * 16, b"\x00" * 16
            timeout = model.effective()["timeout"]
            want_ok = getattr(model, kind)(handle, now)
            for s, uuid in ((self.memory, mem_uuid), (self.durable, dur_uuid)):
                if kind == "ack":
                    ok = await s.done(Q, uuid)
                elif kind == "nack":
                    ok = await s.release(Q, uuid)
                elif kind == "ext":
                    ok = await s.retain(Q, uuid, timeout)
                else:
                    ok = await s.put_back(Q, uuid)
                assert ok == want_ok, f"{kind} on {s.kind}: expected {want_ok}, got {ok}"
        elif kind == "advance":
            self.clock.advance(op[1] * STEP)
        elif kind == "props":
            model.exists, model.props = True, dict(op[1])
            for s in self.stores:
                await s.set_queue_props(Q, dict(op[1]))
        elif kind == "delete":
            want_ok = model.delete()
            for s in self.stores:
                ok = await s.delete(Q)
                assert ok == want_ok, f"delete on {s.kind}: expected {want_ok}, got {ok}"
        elif kind == "restart":
            await self.restart(op[1])
        for s in self.stores:
            await s.barrier()
            assert store_view(s) == model.view(), f"{s.kind} store differs from the model after {op}"
            assert (Q in s.queue_names()) == model.exists, f"{s.kind}: queue existence after {op}"
            if model.exists:
                assert s.queue_props(Q) == model.props, f"{s.kind}: props after {op}"


async def run(ops_: list[tuple[Any, ...]], tmp: Path) -> None:
    h = Harness(tmp)
    await h.open()
    try:
        for op in ops_:
            await h.step(op)
        await h.restart(crash=False)
        assert store_view(h.durable) == h.model.view(), "durable store differs from the model after a final restart"
    finally:
        await h.close()


@settings(max_examples=40, deadline=None)
@given(st.lists(ops, min_size=20, max_size=80))
def test_memory_and_durable_stores_follow_the_reference_model(ops_: list[tuple[Any, ...]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        asyncio.run(run(ops_, Path(d)))
