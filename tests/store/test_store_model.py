"""A Hypothesis state machine drives the memory and the durable store through the same random
operations and checks both against a plain reference model of LMQ's queue semantics
(docs/lmq-contract.md#queues-and-messages), written independently of ``pylmq.core.table``: a list
of records scanned for the smallest ``ts``. On a failure Hypothesis shrinks the operations to a
short sequence that still fails, and prints it as steps of the machine.

Time is a ManualClock stepped 1 ms per operation; timeouts and accum windows end at distinct
sub-millisecond offsets, so no two records ever share a ``ts`` and the order never depends on
random uuids (LMQ's tie-break).

The number of runs comes from a settings profile: ``store-model`` by default, the longer
``store-model-ci`` where the ``CI`` environment variable is set (as CI services do; ``CI=1 pytest
tests/store/test_store_model.py`` runs it locally).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pylmq.core.clock import ManualClock
from pylmq.core.message import State, StoredMessage, StoredMessageType, make_item
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
        (m.ts, m.state.value, m.type is StoredMessageType.COMPOUND, m.retry, [b for _, b in m.items()])
        for m in store.messages(Q)
    )


def delivered_view(m: StoredMessage) -> tuple[Any, ...]:
    return (m.ts, m.state, m.retry, [b for _, b in m.items()])


# -- the stores under test ----------------------------------------------------------------------------

props_st = st.fixed_dictionaries(
    {},
    optional={
        "retry": st.sampled_from([0, 1, 2, None]),
        "timeout": st.sampled_from(TIMEOUTS),
        "accum": st.sampled_from(ACCUMS),
    },
)

T = TypeVar("T")


@dataclass(frozen=True)
class Token:
    """A delivery: the model's handle for it and the uuid each store gave it."""

    handle: int
    memory: bytes
    durable: bytes


UNKNOWN = Token(-1, b"\x00" * 16, b"\x00" * 16)
REPLIES = ("ack", "nack", "ext", "put_back")
# Operations between two deletes or restarts at least: rules are drawn alike, and without this
# most runs would spend themselves emptying or reopening a store that holds next to nothing.
SETTLE = 4


def settled(machine: StoreModel) -> bool:
    return machine.since_reset >= SETTLE


async def between_compactions(store: DurableStore) -> None:
    """Wait until every write is done and no compaction runs. The crash copy is taken file by
    file: one taken while the compaction thread renames and removes segments is a state no
    crash leaves (crashes amid compaction are test_durable_crash.py's, with a real SIGKILL)."""
    for _ in range(5000):
        await store.barrier()
        if store._compaction is None and not store._holding:
            return
        await asyncio.sleep(0.001)
    raise AssertionError("the durable store's compaction did not end in 5 s")


class StoreModel(RuleBasedStateMachine):
    """Each rule is one operation on both stores and the model, one STEP after the last."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="store-model-"))
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock(1000.0)
        self.model = Model()
        self.memory = MemoryStore(self.clock)
        self.durable = self._durable(self.tmp / "d0")
        self.restarts = 0
        self.bodies = 0
        self.deliveries: list[Token] = []
        self.since_reset = 0  # operations since the last delete or restart
        self.last = "start"
        self.run(self.memory.open())
        self.run(self.durable.open())

    def _durable(self, path: Path) -> DurableStore:
        # A small compaction threshold: compactions happen within a run's few hundred records.
        return DurableStore(path, fsync="none", clock=self.clock, compact_min_bytes=2048)

    def run(self, aw: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(aw)

    @property
    def stores(self) -> tuple[LocalStore, LocalStore]:
        return (self.memory, self.durable)

    def tick(self, what: str) -> float:
        self.last = what
        self.since_reset += 1
        self.clock.advance(STEP)
        return self.clock.now()

    @initialize(count=st.integers(1, 10))
    def first_pushes(self, count: int) -> None:
        # Hypothesis leaves some rules out of a run (swarm testing): a run without pushes still
        # has messages to pull, answer and recover.
        self.push(count)

    @rule(count=st.integers(1, 5))
    def push(self, count: int) -> None:
        for _ in range(count):
            now = self.tick("push")
            self.bodies += 1
            body = b"%d" % self.bodies
            want = self.model.push(body, now)
            p = self.model.effective()
            for s in self.stores:
                got = self.run(s.enqueue(Q, make_item(body), p["retry"], p["accum"]))
                assert got == want, f"push to {s.kind}: expected {want!r}, got {got!r}"

    @rule(count=st.integers(1, 3))
    def pull(self, count: int) -> None:
        for _ in range(count):
            now = self.tick("pull")
            timeout = self.model.effective()["timeout"]
            want_rec = self.model.pull(now)
            uuids = []
            for s in self.stores:
                got = self.run(s.dequeue(Q, timeout))
                if want_rec is None:
                    assert got is None, f"pull from {s.kind}: expected nothing, got {got}"
                    continue
                assert got is not None, f"pull from {s.kind}: expected {want_rec}, got nothing"
                want = (want_rec.ts, State.PROCESSING, want_rec.retry, want_rec.bodies)
                assert delivered_view(got[0]) == want, f"pull from {s.kind}"
                uuids.append(got[0].uuid)
            if want_rec is not None:
                self.deliveries.append(Token(want_rec.handle, uuids[0], uuids[1]))

    def _reply(self, token: Token, reply: str) -> None:
        now = self.tick(reply)
        timeout = self.model.effective()["timeout"]
        want_ok = getattr(self.model, reply)(token.handle, now)
        for s, uuid in ((self.memory, token.memory), (self.durable, token.durable)):
            if reply == "ack":
                ok = self.run(s.done(Q, uuid))
            elif reply == "nack":
                ok = self.run(s.release(Q, uuid))
            elif reply == "ext":
                ok = self.run(s.retain(Q, uuid, timeout))
            else:
                ok = self.run(s.put_back(Q, uuid))
            assert ok == want_ok, f"{reply} on {s.kind}: expected {want_ok}, got {ok}"

    @rule(reply=st.sampled_from(REPLIES), back=st.integers(0, 7))
    def reply_to_a_delivery(self, reply: str, back: int) -> None:
        """Reply to one of the last deliveries (older ones are mostly past their deadline). It
        may have been answered before, or be past its deadline: then it is not found."""
        token = self.deliveries[-1 - back % len(self.deliveries)] if self.deliveries else UNKNOWN
        self._reply(token, reply)

    @rule(reply=st.sampled_from(REPLIES))
    def reply_to_an_unknown_id(self, reply: str) -> None:
        self._reply(UNKNOWN, reply)

    @rule(steps=st.integers(1, 40))
    def advance(self, steps: int) -> None:
        self.tick("advance")
        self.clock.advance(steps * STEP)

    @rule(props=props_st)
    def set_props(self, props: dict[str, Any]) -> None:
        self.tick("props")
        self.model.exists, self.model.props = True, dict(props)
        for s in self.stores:
            self.run(s.set_queue_props(Q, dict(props)))

    @precondition(settled)
    @rule()
    def delete(self) -> None:
        self.tick("delete")
        self.since_reset = 0
        want_ok = self.model.delete()
        for s in self.stores:
            ok = self.run(s.delete(Q))
            assert ok == want_ok, f"delete on {s.kind}: expected {want_ok}, got {ok}"

    @precondition(settled)
    @rule(crash=st.booleans())
    def restart(self, crash: bool) -> None:
        """Reopen the durable store: after a close, or from a copy of its files (a crash after
        every operation so far was answered)."""
        self.tick("restart")
        self.since_reset = 0
        self.restarts += 1
        if crash:
            self.run(between_compactions(self.durable))
            dest = self.tmp / f"d{self.restarts}"
            shutil.copytree(self.durable.data_dir, dest, ignore=shutil.ignore_patterns("LOCK"))
        else:
            dest = self.durable.data_dir
        self.run(self.durable.close())
        self.durable = self._durable(dest)
        self.run(self.durable.open())

    @invariant()
    def stores_hold_what_the_model_holds(self) -> None:
        model = self.model
        for s in self.stores:
            self.run(s.barrier())
            assert store_view(s) == model.view(), f"{s.kind} store differs from the model after {self.last}"
            assert (Q in s.queue_names()) == model.exists, f"{s.kind}: queue existence after {self.last}"
            if model.exists:
                assert s.queue_props(Q) == model.props, f"{s.kind}: props after {self.last}"

    def teardown(self) -> None:
        try:
            if self.durable._flusher is not None:  # else a failed open or close: nothing to check
                self.restart(crash=False)
                assert store_view(self.durable) == self.model.view(), "durable store differs after a final restart"
                self.run(self.durable.close())
        finally:
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


settings.register_profile("store-model", max_examples=100, stateful_step_count=50, deadline=None)
settings.register_profile("store-model-ci", max_examples=400, stateful_step_count=50, deadline=None)
StoreModel.TestCase.settings = settings.get_profile("store-model-ci" if os.environ.get("CI") else "store-model")
TestMemoryAndDurableStoresFollowTheReferenceModel = StoreModel.TestCase
