"""Queue manager and queue behaviour: waiters, wake-ups, pull-any, props precedence.

Waits run on a ManualClock shared by the store and the manager: a test moves the time past a
deadline or a pull's timeout instead of sleeping until it passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

import pytest

from pylmq.core import ManualClock, QueueManager, make_item
from pylmq.core.props import RawProps, effective_props
from pylmq.errors import InvalidQueueName, InvalidRegex, MessageNotFound, QueueNotFound
from pylmq.store import MemoryStore


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def manager(clock: ManualClock) -> AsyncIterator[QueueManager]:
    m = QueueManager(MemoryStore(clock), clock)
    await m.start()
    yield m
    await m.close()


async def until(condition: Callable[[], object], turns: int = 100) -> None:
    """Let the loop run until ``condition()`` holds; fail if it does not within ``turns`` steps."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached in {turns} loop steps")


async def steps(n: int = 20) -> None:
    """Let the loop run ``n`` steps: what is ready to run has run (the clock does not move)."""
    for _ in range(n):
        await asyncio.sleep(0)


def waiting(manager: QueueManager, name: str) -> Callable[[], bool]:
    return lambda: (q := manager.get(name)) is not None and q.has_waiters()


async def test_waiters_are_served_in_arrival_order(manager: QueueManager, clock: ManualClock) -> None:
    tasks = [asyncio.create_task(manager.pull("q", 2)) for _ in range(3)]
    await until(lambda: clock.pending() == 3)  # one timeout timer per waiting pull
    for i in range(3):
        clock.advance(0.001)  # pushed at distinct times: equal times are ordered by uuid, as in LMQ
        await manager.push("q", make_item(b"%d" % i))
    got = [(await t) for t in tasks]
    assert [d.message.content[1] for d in got if d] == [b"0", b"1", b"2"]


async def test_waiter_wakes_when_processing_message_deadline_passes(manager: QueueManager, clock: ManualClock) -> None:
    # LMQ's default 30 s timeout, passed on the clock: 30 s of sleep with the loop's timers.
    await manager.push("q", make_item(b"m"))
    first = await manager.pull("q", 0)
    assert first is not None and first.message.retry is not None
    again = asyncio.create_task(manager.pull("q", 60))
    await until(lambda: clock.pending() == 2)  # the pull's timeout and the queue's wake-up
    clock.advance(29.9)
    await steps()
    assert not again.done(), "woken before the deadline of the message in processing"
    clock.advance(0.2)
    d = await asyncio.wait_for(again, 5)  # a bound only: the wake-up is due at once
    assert d is not None and d.message.uuid != first.message.uuid
    assert d.message.content == first.message.content and d.message.retry == first.message.retry - 1


async def test_pull_times_out_with_none_when_its_timeout_passes(manager: QueueManager, clock: ManualClock) -> None:
    t = asyncio.create_task(manager.pull("empty", 3600))
    await until(waiting(manager, "empty"))
    clock.advance(3599.9)
    await steps()
    assert not t.done(), "timed out early"
    clock.advance(0.2)
    assert await asyncio.wait_for(t, 5) is None
    assert clock.pending() == 0
    assert await manager.pull("empty", 0) is None


async def test_an_answered_pull_cancels_its_timeout(manager: QueueManager, clock: ManualClock) -> None:
    t = asyncio.create_task(manager.pull("q", 10))
    await until(waiting(manager, "q"))
    assert clock.pending() == 1
    await manager.push("q", make_item(b"m"))
    assert await t is not None
    assert clock.pending() == 0, "the timer of an answered pull is left behind"


async def test_cancelled_waiter_loses_nothing(manager: QueueManager) -> None:
    t = asyncio.create_task(manager.pull("q", None))
    await until(waiting(manager, "q"))
    t.cancel()
    with pytest.raises(asyncio.CancelledError):
        await t
    await manager.push("q", make_item(b"kept"))
    d = await manager.pull("q", 0)
    assert d is not None and d.message.content[1] == b"kept" and d.message.retry == 2


async def test_pull_any_sees_queue_created_while_waiting(manager: QueueManager) -> None:
    await manager.push("other", make_item(b"no"))
    await manager.pull("other", 0)
    t = asyncio.create_task(manager.pull_any("^job-", 2))
    await until(lambda: manager._any_waiters)
    await manager.push("job-1", make_item(b"yes"))
    d = await t
    assert d is not None and d.queue == "job-1"


async def test_push_all_reaches_only_existing_matching_queues(manager: QueueManager) -> None:
    await manager.ensure("a1")
    await manager.ensure("a2")
    await manager.ensure("b1")
    assert await manager.push_all("^a", make_item(b"x")) == {"a1": "no", "a2": "no"}
    assert manager.get("a3") is None


async def test_bad_regex_is_invalid_regex(manager: QueueManager) -> None:
    with pytest.raises(InvalidRegex):
        await manager.pull_any("(", 0)


async def test_delete_unknown_queue_is_not_found(manager: QueueManager) -> None:
    with pytest.raises(QueueNotFound):
        await manager.delete("nope")


async def test_delete_ends_waiters_and_drops_messages(manager: QueueManager) -> None:
    await manager.push("q", make_item(b"gone"))
    t = asyncio.create_task(manager.pull("w", None))
    await until(waiting(manager, "w"))
    await manager.delete("w")
    assert await t is None
    await manager.delete("q")
    assert await manager.pull("q", 0) is None


async def test_ack_unknown_id_or_queue(manager: QueueManager) -> None:
    await manager.ensure("q")
    with pytest.raises(MessageNotFound):
        await manager.ack("q", "00000000-0000-4000-8000-000000000000")
    with pytest.raises(MessageNotFound):
        await manager.ack("q", "not-a-uuid")
    with pytest.raises(QueueNotFound):
        await manager.ack("nope", "00000000-0000-4000-8000-000000000000")


async def test_reserved_and_empty_names_are_refused(manager: QueueManager) -> None:
    for bad in ("", "__lmq_info__", "schema", "x" * 256):
        with pytest.raises(InvalidQueueName):
            await manager.push(bad, make_item(b""))


def test_props_precedence_own_over_first_matching_default_over_system() -> None:
    defaults: list[tuple[str, RawProps]] = [("^a", {"retry": 5}), ("^ab", {"retry": 9, "timeout": 1.0})]
    assert effective_props("abc", None, defaults).retry == 5, "first match wins"
    assert effective_props("abc", None, defaults).timeout == 30
    assert effective_props("abc", {"retry": 0}, defaults).retry == 0
    assert effective_props("zzz", None, defaults).retry == 2


async def test_update_props_merges_and_none_resets(manager: QueueManager) -> None:
    await manager.update_props("q", {"retry": 7})
    await manager.update_props("q", {"timeout": 3.0})
    p = await manager.get_props("q")
    assert (p.retry, p.timeout) == (7, 3.0)
    await manager.update_props("q", None)
    p = await manager.get_props("q")
    assert (p.retry, p.timeout) == (2, 30.0)


async def test_default_props_apply_to_existing_queues(manager: QueueManager) -> None:
    await manager.ensure("log-1")
    await manager.set_default_props([("^log-", {"timeout": 1.5})])
    assert (await manager.get_props("log-1")).timeout == 1.5


async def test_remote_new_message_wakes_waiters(manager: QueueManager) -> None:
    """The seam for the cluster: a message that appears in the store from elsewhere."""
    q = await manager.ensure("q")
    t = asyncio.create_task(manager.pull("q", 2))
    await until(waiting(manager, "q"))
    await manager.store.enqueue("q", make_item(b"remote"), q.props.retry, 0)
    manager.on_remote_new_message("q")
    d = await t
    assert d is not None and d.message.content[1] == b"remote"
