"""Waiter and wake-up edge cases: a store that suspends inside its operations
(as the Mnesia store does, one transaction on a peer per call) opens windows that the memory
store never does."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from pylmq.core import ManualClock, QueueManager, make_item
from pylmq.core.message import StoredMessage
from pylmq.core.queue import RETRY_AFTER_ERROR
from pylmq.errors import InvalidQueueName, StoreError
from pylmq.metrics import QueueMetrics
from pylmq.store import MemoryStore


class GatedStore(MemoryStore):
    """A memory store whose dequeue and put_back wait on gates while they are set up."""

    def __init__(self) -> None:
        super().__init__()
        self.dequeue_gate: asyncio.Event | None = None
        self.dequeue_entered = asyncio.Event()
        self.put_back_gate: asyncio.Event | None = None
        self.put_back_entered = asyncio.Event()
        self.barrier_gate: asyncio.Event | None = None
        self.barrier_entered = asyncio.Event()

    async def barrier(self) -> None:
        # The durable store's group commit: the caller waits here for the fsync.
        if self.barrier_gate is not None:
            self.barrier_entered.set()
            await self.barrier_gate.wait()

    async def dequeue(
        self, name: str, timeout: float, dead_letter: str | None = None, *, hold: bool = False
    ) -> tuple[StoredMessage, float] | None:
        if self.dequeue_gate is not None:
            self.dequeue_entered.set()
            await self.dequeue_gate.wait()
        return await super().dequeue(name, timeout, dead_letter, hold=hold)

    async def put_back(self, name: str, uuid: bytes) -> bool:
        self.put_back_entered.set()
        if self.put_back_gate is not None:
            await self.put_back_gate.wait()
        return await super().put_back(name, uuid)


async def until(condition: Callable[[], object], turns: int = 100) -> None:
    """Let the loop run until ``condition()`` holds; fail if it does not within ``turns`` steps."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached in {turns} loop steps")


def has_waiters(manager: QueueManager, name: str) -> Callable[[], bool]:
    return lambda: (q := manager.get(name)) is not None and q.has_waiters()


# The gated fixture: a manager on a GatedStore, and that store.
Gated = tuple[QueueManager, GatedStore]


@pytest.fixture
async def gated() -> AsyncIterator[Gated]:
    store = GatedStore()
    m = QueueManager(store)
    await m.start()
    yield m, store
    await m.close()


async def test_waiter_arriving_while_a_message_is_put_back_gets_it(gated: Gated) -> None:
    manager, store = gated
    await manager.ensure("q")
    first = asyncio.create_task(manager.pull("q", None))
    await until(has_waiters(manager, "q"))
    store.dequeue_gate, store.put_back_gate = asyncio.Event(), asyncio.Event()
    await manager.push("q", make_item(b"m"))  # the queue's server takes it for `first` ...
    await asyncio.wait_for(store.dequeue_entered.wait(), 2)
    first.cancel()  # ... who leaves while the store works
    with pytest.raises(asyncio.CancelledError):
        await first
    store.dequeue_gate.set()
    await asyncio.wait_for(store.put_back_entered.wait(), 2)  # the message is going back
    second = asyncio.create_task(manager.pull("q", 2))
    await until(has_waiters(manager, "q"))
    store.put_back_gate.set()
    d = await second
    assert d is not None and d.message.content[1] == b"m", f"expected the put-back message, got {d!r}"


async def test_queue_name_longer_than_an_erlang_atom_in_bytes_is_refused(
    gated: Gated,
) -> None:
    # LMQ names a queue binary_to_atom(Name, latin1): at most 255 BYTES of the name's UTF-8.
    manager, _ = gated
    await manager.push("キ" * 85, make_item(b"fits: 255 bytes"))
    with pytest.raises(InvalidQueueName):
        await manager.push("キ" * 86, make_item(b"258 bytes"))


async def test_deleting_a_queue_drops_its_meters() -> None:
    # Per-queue meters are ticked every few seconds: a node with short-lived queues must not
    # keep one set per queue it ever had.
    metrics = QueueMetrics()
    manager = QueueManager(MemoryStore(), observer=metrics)
    await manager.start()
    try:
        await manager.push("tmp", make_item(b"x"))
        await manager.pull("tmp", 0)
        assert metrics.stats("tmp") is not None
        await manager.delete("tmp")
        assert metrics.stats("tmp") is None, "expected the deleted queue's meters to be gone"
        await manager.push("gone-remotely", make_item(b"x"))
        await manager.on_remote_queue_deleted("gone-remotely")
        assert metrics.stats("gone-remotely") is None
    finally:
        await manager.close()


async def test_pull_any_does_not_starve_a_queue_behind_a_busy_one(gated: Gated) -> None:
    # LMQ asks every matching queue at once and the first answer wins, so every queue with a
    # backlog gets its turns; always starting from the first name would drain "a" before "b".
    manager, _ = gated
    for name in ("a", "b"):
        for i in range(3):
            await manager.push(name, make_item(b"%d" % i))
    got = []
    for _ in range(4):
        d = await manager.pull_any("^[ab]$", 0)
        assert d is not None
        got.append(d.queue)
    assert sorted(got[:2]) == ["a", "b"] and sorted(got[2:]) == ["a", "b"], f"expected turns, got {got}"


async def test_pull_with_t_0_gets_a_message_left_over_after_the_waiters_are_served(
    gated: Gated,
) -> None:
    # LMQ queues a t=0 pull behind the clients already waiting and answers it in the same
    # round: the waiters get the first messages, the t=0 pull the next one, if any.
    manager, _ = gated
    waiting = asyncio.create_task(manager.pull("q", 2))
    await until(has_waiters(manager, "q"))
    await manager.push("q", make_item(b"first"))
    await manager.push("q", make_item(b"second"))
    now = await manager.pull("q", 0)
    assert now is not None and now.message.content[1] == b"second", f"expected the second message, got {now!r}"
    got = await waiting
    assert got is not None and got.message.content[1] == b"first"
    assert await manager.pull("q", 0) is None


async def _cancelled_in_barrier(store: GatedStore, op: Awaitable[object]) -> None:
    """Run ``op`` until it waits for durability, then cancel it (its client went away)."""
    gate = store.barrier_gate = asyncio.Event()
    store.barrier_entered.clear()
    task = asyncio.ensure_future(op)
    await asyncio.wait_for(store.barrier_entered.wait(), 2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    store.barrier_gate = None
    gate.set()  # the commit completes for whoever else waits on it


async def test_push_whose_client_left_during_the_commit_still_wakes_a_waiter(
    gated: Gated,
) -> None:
    manager, store = gated
    await manager.ensure("q")
    waiting = asyncio.create_task(manager.pull("q", 2))
    await until(has_waiters(manager, "q"))
    await _cancelled_in_barrier(store, manager.push("q", make_item(b"m")))
    d = await waiting
    assert d is not None and d.message.content[1] == b"m", f"expected the pushed message, got {d!r}"


async def test_nack_whose_client_left_during_the_commit_still_wakes_a_waiter(
    gated: Gated,
) -> None:
    manager, store = gated
    await manager.push("q", make_item(b"m"))
    first = await manager.pull("q", 0)
    assert first is not None
    waiting = asyncio.create_task(manager.pull("q", 2))
    await until(has_waiters(manager, "q"))
    await _cancelled_in_barrier(store, manager.nack("q", first.message.uuid))
    d = await waiting
    assert d is not None and d.message.content[1] == b"m", f"expected the nacked message, got {d!r}"


async def test_props_change_whose_client_left_during_the_commit_still_applies(
    gated: Gated,
) -> None:
    manager, store = gated
    await manager.ensure("q")
    await _cancelled_in_barrier(store, manager.update_props("q", {"retry": 7}))
    assert manager.raw_props("q") == {"retry": 7}
    assert (await manager.get_props("q")).retry == 7, "the stored props must be the ones in use"
    await _cancelled_in_barrier(store, manager.set_default_props([("^q$", {"timeout": 5.0})]))
    assert (await manager.get_props("q")).timeout == 5.0


class SlowDeleteStore(MemoryStore):
    """Deleting takes a while (one Mnesia transaction on a peer)."""

    def __init__(self) -> None:
        super().__init__()
        self.delete_entered = asyncio.Event()

    async def delete(self, name: str) -> bool:
        self.delete_entered.set()
        await asyncio.Event().wait()  # the transaction outlasts the client that asked for it
        return await super().delete(name)


async def test_delete_whose_client_left_midway_does_not_strand_the_queues_waiters() -> None:
    manager = QueueManager(SlowDeleteStore())
    await manager.start()
    try:
        await manager.ensure("q")
        waiting = asyncio.create_task(manager.pull("q", None))
        await until(has_waiters(manager, "q"))
        deleting = asyncio.create_task(manager.delete("q"))
        await asyncio.wait_for(manager.store.delete_entered.wait(), 2)  # type: ignore[attr-defined]
        deleting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await deleting
        assert await asyncio.wait_for(waiting, 2) is None, "the waiter of a queue being deleted must be answered"
    finally:
        await manager.close()


class FlakyStore(MemoryStore):
    """The first dequeue fails (a peer of the Mnesia store went away mid-transaction)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.failures = 0

    async def dequeue(
        self, name: str, timeout: float, dead_letter: str | None = None, *, hold: bool = False
    ) -> tuple[StoredMessage, float] | None:
        if self.failures == 0 and self.waittime(name) == 0:
            self.failures += 1
            raise StoreError("peer gone")
        return await super().dequeue(name, timeout, dead_letter, hold=hold)


async def test_waiters_are_served_again_after_the_store_failed_once() -> None:
    clock = ManualClock()
    store = FlakyStore(clock)
    manager = QueueManager(store, clock)
    await manager.start()
    try:
        await manager.ensure("q")
        waiting = asyncio.create_task(manager.pull("q", 60))
        await until(has_waiters(manager, "q"))
        await manager.push("q", make_item(b"m"))
        await until(lambda: store.failures == 1 and clock.pending() == 2)  # the pull's timeout, the retry
        clock.advance(RETRY_AFTER_ERROR * 0.9)
        await asyncio.sleep(0)
        assert not waiting.done(), "served again before RETRY_AFTER_ERROR"
        clock.advance(RETRY_AFTER_ERROR * 0.2)
        d = await asyncio.wait_for(waiting, 5)  # a bound only: the retry is due at once
        assert d is not None and d.message.content[1] == b"m", f"expected the message after a retry, got {d!r}"
    finally:
        await manager.close()


async def test_pull_any_sees_a_queue_created_while_it_looked_at_the_others(
    gated: Gated,
) -> None:
    manager, store = gated
    await manager.ensure("job-1")
    store.dequeue_gate = asyncio.Event()
    waiting = asyncio.create_task(manager.pull_any("^job-", 2))
    await asyncio.wait_for(store.dequeue_entered.wait(), 2)  # it is asking job-1's store for a message
    await manager.push("job-2", make_item(b"new queue"))
    store.dequeue_gate.set()
    d = await waiting
    assert d is not None and d.queue == "job-2", f"expected the message of the new queue, got {d!r}"


async def test_pull_of_a_queue_deleted_while_it_asked_the_store_ends_empty(
    gated: Gated,
) -> None:
    manager, store = gated
    await manager.ensure("q")
    store.dequeue_gate = asyncio.Event()
    waiting = asyncio.create_task(manager.pull("q", None))
    await asyncio.wait_for(store.dequeue_entered.wait(), 2)  # it is asking the store for a message
    await manager.delete("q")
    store.dequeue_gate.set()
    assert await asyncio.wait_for(waiting, 2) is None, "a pull of a deleted queue must end, as one waiting does"
