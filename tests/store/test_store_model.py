"""A Hypothesis state machine drives the memory and the durable store through the same random
operations and checks both against a plain reference model of LMQ's queue semantics
(docs/lmq-contract.md#queues-and-messages) and of pylmq's per-message options (the contract of
``pylmq.core.message.MessageExt``: delay, ttl with queue_server's rule, interval, once, priority,
dead letters and requeue), written independently of ``pylmq.core.table``: lists of records
scanned for the first due one. Virtual queues are a map both stores keep. After every step the
stores hold what the model holds, ext fields included; the durable store also after restarts and
crash copies. On a failure Hypothesis shrinks the operations to a short sequence that still
fails, and prints it as steps of the machine.

Time is a ManualClock stepped 1 ms per operation; timeouts, intervals, delays, expiries and
accum windows end at distinct sub-millisecond offsets. Records that still share a ``ts`` (dead
letters moved by one pull, say) are ordered by uuid, LMQ's tie-break: the tables here draw
uuids from a counter, so uuid order is creation order in both stores, which the model follows.

The number of runs comes from a settings profile: ``store-model`` by default, the longer
``store-model-ci`` where the ``CI`` environment variable is set (as CI services do; ``CI=1 pytest
tests/store/test_store_model.py`` runs it locally).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import pylmq.core.table
from pylmq.core.clock import ManualClock
from pylmq.core.message import (
    DeadLetter,
    DeadReason,
    Inherit,
    MessageExt,
    PushOptions,
    Retry,
    State,
    StoredMessage,
    StoredMessageType,
    make_item,
)
from pylmq.store.durable import DurableStore
from pylmq.store.local import LocalStore
from pylmq.store.memory import MemoryStore

Q, DLQ = "q", "dlq"
QUEUES = (Q, DLQ)
STEP = 0.001
TIMEOUTS = (0.00513, 0.01027, 0.02041)
INTERVALS = (0.00717, 0.01931)
ACCUMS = (0.0, 0.00559, 0.01573)
DELAY_OFFSET, EXPIRY_OFFSET = 0.00031, 0.00047
DEFAULTS: dict[str, Any] = {"retry": 2, "timeout": TIMEOUTS[1], "accum": 0.0}
VIRTUAL = ("v0", "v1")
TABLE = vars(pylmq.core.table)  # where the tables look up new_uuid

# -- the reference model ---------------------------------------------------------------------------


def _dec(retry: Retry) -> Retry:
    return None if retry is None else retry - 1


def _inc(retry: Retry) -> Retry:
    return None if retry is None else retry + 1


@dataclass
class Rec:
    handle: int  # creation order of its uuid: the tie-break of equal ts
    ts: float
    state: str  # "available" | "processing" | "accum"
    compound: bool
    retry: int | None
    bodies: list[bytes]
    ext: MessageExt | None = None


@dataclass
class QueueModel:
    recs: list[Rec] = field(default_factory=list)
    exists: bool = False
    props: dict[str, Any] = field(default_factory=dict)


@dataclass
class Model:
    queues: dict[str, QueueModel] = field(default_factory=lambda: {n: QueueModel() for n in QUEUES})
    virtual: dict[str, list[str]] = field(default_factory=dict)
    _handles: int = 0

    def _new_handle(self) -> int:
        self._handles += 1
        return self._handles

    def effective(self, name: str = Q) -> dict[str, Any]:
        return {**DEFAULTS, **self.queues[name].props}

    def push(self, body: bytes, now: float) -> str:
        q = self.queues[Q]
        q.exists = True
        p = self.effective()
        retry = _inc(p["retry"])
        if p["accum"] <= 0:
            q.recs.append(Rec(self._new_handle(), now, "available", False, retry, [body]))
            return "no"
        for r in q.recs:
            if r.state == "accum" and r.ts >= now:
                r.bodies.append(body)
                return "yes"
        q.recs.append(Rec(self._new_handle(), now + p["accum"], "accum", True, retry, [body]))
        return "new"

    def push_with(self, body: bytes, options: PushOptions, track: bool, now: float) -> None:
        """A push with options: never accumulates; ``once`` is retry 0, an interval without a
        retry is unlimited; a record has an ext when an option needs one or its queue tracks
        failures (has a dead-letter queue)."""
        q = self.queues[Q]
        q.exists = True
        if options.once:
            retry: Retry = 0
        elif isinstance(options.retry, Inherit):
            retry = None if options.interval is not None else self.effective()["retry"]
        else:
            retry = options.retry
        nb = options.not_before
        ts = now if nb is None or nb <= now else nb
        ext = None
        if track or options.needs_ext():
            ext = MessageExt(options.expires, options.interval, options.priority, options.once, sent_at=now)
        q.recs.append(Rec(self._new_handle(), ts, "available", False, _inc(retry), [body], ext))

    def pull(self, name: str, now: float, dead_to: str | None) -> Rec | None:
        q = self.queues[name]
        if not q.exists:
            return None
        dead: list[tuple[Rec, DeadReason]] = []
        got = None
        while True:
            due = [r for r in q.recs if r.ts <= now]
            if not due:
                break
            urgent = [r for r in due if r.ext is not None and r.ext.priority > 0]
            if urgent:
                first = min(urgent, key=lambda r: (-r.ext.priority, r.ts, r.handle))  # type: ignore[union-attr]
            else:
                first = min(due, key=lambda r: (r.ts, r.handle))
            q.recs.remove(first)
            ext = first.ext
            spent = first.retry is not None and first.retry <= 0
            expired = ext is not None and ext.expires is not None and now >= ext.expires
            if spent or (expired and ext is not None and ext.attempts > 0):
                if dead_to is not None and not (ext is not None and ext.once):
                    dead.append((first, "expired" if expired else "retries"))
                continue
            deadline = now + (self.effective(name)["timeout"] if ext is None or ext.interval is None else ext.interval)
            retry = _dec(first.retry)
            if ext is not None:
                if expired or (ext.expires is not None and deadline >= ext.expires):
                    retry = 0
                first_at = now if ext.first_at is None else ext.first_at
                ext = replace(ext, attempts=ext.attempts + 1, first_at=first_at, last_at=now)
            got = Rec(self._new_handle(), deadline, "processing", first.compound, retry, list(first.bodies), ext)
            q.recs.append(got)
            break
        if dead_to is not None and dead:
            target = self.queues[dead_to]
            target.exists = True
            retry = _inc(self.effective(dead_to)["retry"])
            for r, reason in dead:
                ext = r.ext or MessageExt()
                letter = DeadLetter(name, ext.attempts, ext.last_at, reason)
                new_ext = MessageExt(priority=ext.priority, sent_at=ext.sent_at, dead=letter)
                target.recs.append(Rec(self._new_handle(), now, "available", r.compound, retry, r.bodies, new_ext))
        return got

    def requeue(self, count: int, to: str | None, now: float) -> int:
        dlq = self.queues[DLQ]
        if not dlq.exists:
            return 0
        letters = [r for r in dlq.recs if r.state == "available" and r.ext is not None and r.ext.dead is not None]
        taken = sorted(letters, key=lambda r: (r.ts, r.handle))[:count]
        for r in taken:
            assert r.ext is not None and r.ext.dead is not None
            dlq.recs.remove(r)
            target = to if to is not None else r.ext.dead.origin
            self.queues[target].exists = True
            ext = MessageExt(priority=r.ext.priority, sent_at=r.ext.sent_at)
            retry = _inc(self.effective(target)["retry"])
            self.queues[target].recs.append(Rec(self._new_handle(), now, "available", r.compound, retry, r.bodies, ext))
        return len(taken)

    def _in_processing(self, name: str, handle: int, now: float) -> Rec | None:
        for r in self.queues[name].recs:
            if r.handle == handle:
                return r if r.state == "processing" and r.ts >= now else None
        return None

    def ack(self, name: str, handle: int, now: float) -> bool:
        r = self._in_processing(name, handle, now)
        if r is not None:
            self.queues[name].recs.remove(r)
        return r is not None

    def ext(self, name: str, handle: int, now: float) -> bool:
        r = self._in_processing(name, handle, now)
        if r is not None:
            interval = None if r.ext is None else r.ext.interval
            r.ts = now + (self.effective(name)["timeout"] if interval is None else interval)
        return r is not None

    def nack(self, name: str, handle: int, now: float) -> bool:
        r = self._in_processing(name, handle, now)
        if r is not None:
            r.state, r.ts = "available", now
        return r is not None

    def put_back(self, name: str, handle: int, now: float) -> bool:
        r = self._in_processing(name, handle, now)
        if r is not None:
            r.state, r.ts = "available", now
            r.retry = _inc(r.retry)
            if r.ext is not None and r.ext.attempts <= 1:  # the one delivery did not happen
                r.ext = replace(r.ext, attempts=0, first_at=None, last_at=None)
            elif r.ext is not None:  # last_at stays: the delivery before is not remembered
                r.ext = replace(r.ext, attempts=r.ext.attempts - 1)
        return r is not None

    def delete(self) -> bool:
        q = self.queues[Q]
        existed = q.exists
        q.recs, q.exists, q.props = [], False, {}
        return existed

    def view(self, name: str) -> list[tuple[Any, ...]]:
        return sorted(((r.ts, r.state, r.compound, r.retry, r.bodies, r.ext) for r in self.queues[name].recs), key=repr)


def store_view(store: LocalStore, name: str) -> list[tuple[Any, ...]]:
    return sorted(
        (
            (m.ts, m.state.value, m.type is StoredMessageType.COMPOUND, m.retry, [b for _, b in m.items()], m.ext)
            for m in store.messages(name)
        ),
        key=repr,
    )


def delivered_view(m: StoredMessage) -> tuple[Any, ...]:
    return (m.ts, m.state, m.retry, [b for _, b in m.items()], m.ext)


# -- the stores under test ----------------------------------------------------------------------------

props_st = st.fixed_dictionaries(
    {},
    optional={
        "retry": st.sampled_from([0, 1, 2, None]),
        "timeout": st.sampled_from(TIMEOUTS),
        "accum": st.sampled_from(ACCUMS),
    },
)


@st.composite
def options_st(draw: st.DrawFn) -> tuple[int | None, int | None, PushOptions]:
    """Valid push options, as steps of the clock from the push: (delay, expiry, options with
    those still unset). ``once`` excludes an interval and a retry above 0, and an expiry comes
    after the message is due (what the front ends' validation lets through)."""
    delay = draw(st.one_of(st.none(), st.integers(0, 20)))
    expiry = draw(st.one_of(st.none(), st.integers(1, 25)))
    once = draw(st.booleans())
    interval = None if once else draw(st.one_of(st.none(), st.sampled_from(INTERVALS)))
    # Mostly few retries: records are exhausted (dead letters) within a run's steps.
    retries: list[Retry | Inherit] = [Inherit.QUEUE, 0] if once else [Inherit.QUEUE, None, 0, 0, 1, 1, 2]
    retry = draw(st.sampled_from(retries))
    priority = draw(st.sampled_from([0, 1, 3]))
    return delay, expiry, PushOptions(None, None, interval, retry, priority, once)


T = TypeVar("T")


@dataclass(frozen=True)
class Token:
    """A delivery: its queue, the model's handle for it and the uuid each store gave it."""

    queue: str
    handle: int
    memory: bytes
    durable: bytes


UNKNOWN = Token(Q, -1, b"\x00" * 16, b"\x00" * 16)
REPLIES = ("ack", "nack", "ext", "put_back")
# Operations between two deletes or restarts at least: rules are drawn alike, and without this
# most runs would spend themselves emptying or reopening a store that holds next to nothing.
SETTLE = 4


def settled(machine: StoreModel) -> bool:
    return machine.since_reset >= SETTLE


def pushes_without_accum(machine: StoreModel) -> bool:
    return bool(machine.model.effective()["accum"] <= 0)


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
        # uuids in creation order (see the module's docstring), for this run's tables only.
        counter = itertools.count(1)
        self._new_uuid = TABLE["new_uuid"]
        TABLE["new_uuid"] = lambda: next(counter).to_bytes(16, "big")
        self.tmp = Path(tempfile.mkdtemp(prefix="store-model-"))
        self.loop = asyncio.new_event_loop()
        self.clock = ManualClock(1000.0)
        self.model = Model()
        self.memory = MemoryStore(self.clock)
        self.durable = self._durable(self.tmp / "d0")
        self.restarts = 0
        self.bodies = 0
        self.deliveries: list[Token] = []
        self.dead_letters = False  # whether q has a dead-letter queue (dlq)
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

    @initialize(count=st.integers(1, 10), dead_letters=st.booleans())
    def first_pushes(self, count: int, dead_letters: bool) -> None:
        # Hypothesis leaves some rules out of a run (swarm testing): a run without pushes still
        # has messages to pull, answer and recover, and one without the toggle dead letters.
        self.dead_letters = dead_letters
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

    @precondition(pushes_without_accum)
    @rule(pushes=st.lists(options_st(), min_size=1, max_size=4))
    def push_with_options(self, pushes: list[tuple[int | None, int | None, PushOptions]]) -> None:
        for drawn in pushes:
            self._push_with(*drawn)

    def _push_with(self, delay: int | None, expiry: int | None, options: PushOptions) -> None:
        now = self.tick("push with options")
        due = now if delay is None else now + delay * STEP + DELAY_OFFSET
        options = replace(
            options,
            not_before=None if delay is None else due,
            expires=None if expiry is None else due + expiry * STEP + EXPIRY_OFFSET,
        )
        self.bodies += 1
        body = b"%d" % self.bodies
        self.model.push_with(body, options, self.dead_letters, now)
        retry = self.model.effective()["retry"]
        for s in self.stores:
            self.run(s.push(Q, make_item(body), retry, options, track=self.dead_letters))

    @rule(count=st.integers(1, 4), name=st.sampled_from(QUEUES))
    def pull(self, count: int, name: str) -> None:
        for _ in range(count):
            now = self.tick(f"pull {name}")
            timeout = self.model.effective(name)["timeout"]
            dead_to = DLQ if name == Q and self.dead_letters else None
            want_rec = self.model.pull(name, now, dead_to)
            uuids = []
            for s in self.stores:
                got = self.run(s.dequeue(name, timeout, dead_to))
                if want_rec is None:
                    assert got is None, f"pull from {s.kind}: expected nothing, got {got}"
                    continue
                assert got is not None, f"pull from {s.kind}: expected {want_rec}, got nothing"
                want = (want_rec.ts, State.PROCESSING, want_rec.retry, want_rec.bodies, want_rec.ext)
                assert delivered_view(got[0]) == want, f"pull from {s.kind}"
                uuids.append(got[0].uuid)
            if want_rec is not None:
                self.deliveries.append(Token(name, want_rec.handle, uuids[0], uuids[1]))

    @rule(count=st.integers(1, 4))
    def pull_again_after_the_deadlines(self, count: int) -> None:
        """A consumer that never answers: every delivery's deadline passes, then q is pulled
        (redeliveries, spent retries, expiry after delivery, dead letters)."""
        self.tick("wait")
        self.clock.advance(25 * STEP)  # past the longest timeout and interval
        self.pull(count, Q)

    def _reply(self, token: Token, reply: str) -> None:
        now = self.tick(reply)
        name = token.queue
        timeout = self.model.effective(name)["timeout"]
        want_ok = getattr(self.model, reply)(name, token.handle, now)
        for s, uuid in ((self.memory, token.memory), (self.durable, token.durable)):
            if reply == "ack":
                ok = self.run(s.done(name, uuid))
            elif reply == "nack":
                ok = self.run(s.release(name, uuid))
            elif reply == "ext":
                ok = self.run(s.retain(name, uuid, timeout))
            else:
                ok = self.run(s.put_back(name, uuid))
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

    @rule(steps=st.one_of(st.integers(1, 40), st.integers(40, 200)))
    def advance(self, steps: int) -> None:
        self.tick("advance")
        self.clock.advance(steps * STEP)

    @rule(props=props_st)
    def set_props(self, props: dict[str, Any]) -> None:
        self.tick("props")
        q = self.model.queues[Q]
        q.exists, q.props = True, dict(props)
        for s in self.stores:
            self.run(s.set_queue_props(Q, dict(props)))

    @rule(on=st.booleans())
    def dead_letter_queue(self, on: bool) -> None:
        """Give q a dead-letter queue or take it away (the manager passes it to every pull of q)."""
        self.tick("dead letters")
        self.dead_letters = on

    @rule(count=st.integers(1, 3), to=st.sampled_from([None, Q]))
    def requeue(self, count: int, to: str | None) -> None:
        now = self.tick("requeue")
        want = self.model.requeue(count, to, now)
        for s in self.stores:
            got = self.run(s.requeue(DLQ, count, to))
            assert got == want, f"requeue on {s.kind}: expected {want}, got {got}"

    @rule(name=st.sampled_from(VIRTUAL), members=st.lists(st.sampled_from(["a", Q, DLQ, "b"]), unique=True, max_size=3))
    def set_virtual(self, name: str, members: list[str]) -> None:
        self.tick("virtual")
        if members:
            self.model.virtual[name] = list(members)
        else:
            self.model.virtual.pop(name, None)
        for s in self.stores:
            self.run(s.set_virtual(name, members))

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
            for name in QUEUES:
                q = model.queues[name]
                assert store_view(s, name) == model.view(name), f"{s.kind} store differs in {name} after {self.last}"
                assert (name in s.queue_names()) == q.exists, f"{s.kind}: existence of {name} after {self.last}"
                if q.exists:
                    assert s.queue_props(name) == q.props, f"{s.kind}: props of {name} after {self.last}"
            assert s.virtual_queues() == model.virtual, f"{s.kind}: virtual queues after {self.last}"

    def teardown(self) -> None:
        try:
            if self.durable._flusher is not None:  # else a failed open or close: nothing to check
                self.restart(crash=False)
                for name in QUEUES:
                    assert store_view(self.durable, name) == self.model.view(name), "differs after a final restart"
                assert self.durable.virtual_queues() == self.model.virtual
                self.run(self.durable.close())
        finally:
            TABLE["new_uuid"] = self._new_uuid
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


settings.register_profile("store-model", max_examples=100, stateful_step_count=50, deadline=None)
settings.register_profile("store-model-ci", max_examples=400, stateful_step_count=50, deadline=None)
StoreModel.TestCase.settings = settings.get_profile("store-model-ci" if os.environ.get("CI") else "store-model")
TestMemoryAndDurableStoresFollowTheReferenceModel = StoreModel.TestCase
