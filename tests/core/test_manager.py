"""Queue manager and queue behaviour: waiters, wake-ups, pull-any, props precedence."""

from __future__ import annotations

import asyncio

import pytest

from pylmq.core import QueueManager, make_item
from pylmq.core.props import effective_props
from pylmq.errors import InvalidQueueName, InvalidRegex, MessageNotFound, QueueNotFound
from pylmq.store import MemoryStore


@pytest.fixture
async def manager():
    m = QueueManager(MemoryStore())
    await m.start()
    yield m
    await m.close()


async def test_waiters_are_served_in_arrival_order(manager: QueueManager) -> None:
    tasks = [asyncio.create_task(manager.pull("q", 2)) for _ in range(3)]
    await asyncio.sleep(0.01)
    for i in range(3):
        await manager.push("q", make_item(b"%d" % i))
    got = [(await t) for t in tasks]
    assert [d.message.content[1] for d in got if d] == [b"0", b"1", b"2"]


async def test_waiter_wakes_when_processing_message_deadline_passes(manager: QueueManager) -> None:
    await manager.update_props("q", {"timeout": 0.2})
    await manager.push("q", make_item(b"m"))
    first = await manager.pull("q", 0)
    assert first is not None
    again = await manager.pull("q", 2)
    assert again is not None and again.message.uuid != first.message.uuid


async def test_pull_times_out_with_none(manager: QueueManager) -> None:
    assert await manager.pull("empty", 0.05) is None
    assert await manager.pull("empty", 0) is None


async def test_cancelled_waiter_loses_nothing(manager: QueueManager) -> None:
    t = asyncio.create_task(manager.pull("q", None))
    await asyncio.sleep(0.01)
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
    await asyncio.sleep(0.01)
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
    await asyncio.sleep(0.01)
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
    defaults = [("^a", {"retry": 5}), ("^ab", {"retry": 9, "timeout": 1.0})]
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
    await asyncio.sleep(0.01)
    await manager.store.enqueue("q", make_item(b"remote"), q.props.retry, 0)
    manager.on_remote_new_message("q")
    d = await t
    assert d is not None and d.message.content[1] == b"remote"
