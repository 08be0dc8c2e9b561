"""The manager's per-message API (docs/message-options.md) on a memory store and a ManualClock:
push_with, the dead_letter prop and its transfers, requeue, peek, resolve_key, virtual queues,
and option checks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pylmq.core import ManualClock, QueueManager, make_item
from pylmq.core.message import DeadLetter, PushOptions, StoredMessage, msg_key, uuid_text
from pylmq.core.props import MAX_SQS_BYTES, MAX_SQS_KEYS, export_props, parse_props
from pylmq.errors import BadRequest, InvalidOptions, InvalidProps, MessageNotFound, QueueNotFound
from pylmq.store import MemoryStore
from tests.core.test_manager import until, waiting


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def manager(clock: ManualClock) -> AsyncIterator[QueueManager]:
    m = QueueManager(MemoryStore(clock), clock, virtual={"v": ["a", "b"]})
    await m.start()
    yield m
    await m.close()


def body(m: StoredMessage) -> bytes:
    assert isinstance(m.content, tuple)
    return m.content[1]


# -- push_with -------------------------------------------------------------------------------------


async def test_push_with_answers_the_uuid_of_the_record(manager: QueueManager) -> None:
    ((queue, uuid),) = await manager.push_with("q", make_item(b"x"), PushOptions(priority=1))
    d = await manager.pull("q", 0)
    assert queue == "q" and d is not None and body(d.message) == b"x"
    assert manager.store.messages("q")[0].ext is not None
    assert uuid != d.message.uuid  # a delivery has an id of its own, as in LMQ


async def test_push_with_checks_options_and_names_the_field(manager: QueueManager, clock: ManualClock) -> None:
    for opts, field in [
        (PushOptions(priority=256), "priority"),
        (PushOptions(interval=0), "interval"),
        (PushOptions(not_before=clock.now() + 10, expires=clock.now() + 10), "expires"),
        (PushOptions(once=True, retry=3), "once"),
    ]:
        with pytest.raises(InvalidOptions, match=field):
            await manager.push_with("q", make_item(b"x"), opts)
    assert manager.get("q") is None, "a refused push creates nothing"


async def test_push_with_to_an_accumulating_queue_is_refused(manager: QueueManager) -> None:
    await manager.update_props("acc", {"accum": 1})
    with pytest.raises(InvalidOptions, match="accum"):
        await manager.push_with("acc", make_item(b"x"), PushOptions(not_before=1.0))
    assert manager.store.size("acc") == 0


async def test_delayed_push_wakes_a_waiting_pull_when_due(manager: QueueManager, clock: ManualClock) -> None:
    task = asyncio.create_task(manager.pull("q", None))
    await until(waiting(manager, "q"))
    await manager.push_with("q", make_item(b"later"), PushOptions(not_before=clock.now() + 3))
    await asyncio.sleep(0)
    assert not task.done()
    clock.advance(3.01)
    d = await asyncio.wait_for(task, 1)
    assert d is not None and body(d.message) == b"later"


async def test_interval_is_the_deadline_of_a_delivery(manager: QueueManager, clock: ManualClock) -> None:
    await manager.push_with("q", make_item(b"x"), PushOptions(interval=7))
    d = await manager.pull("q", 0)
    assert d is not None and d.message.ts == clock.now() + 7
    await manager.ext("q", uuid_text(d.message.uuid))
    assert manager.store.messages("q")[0].ts == clock.now() + 7


async def test_track_keeps_the_delivery_count_without_a_dead_letter_queue(
    manager: QueueManager, clock: ManualClock
) -> None:
    await manager.push_with("q", make_item(b"x"), PushOptions(track=True))
    await manager.push_with("q", make_item(b"y"), PushOptions())
    # Same push time: the table orders the two by uuid; told apart by body.
    tracked, plain = sorted(manager.store.messages("q"), key=body)
    assert tracked.ext is not None and tracked.ext.sent_at == clock.now()
    assert plain.ext is None  # no option asks for one: LMQ's compact record
    d = await manager.pull("q", 0)
    while d is not None and body(d.message) != b"x":
        d = await manager.pull("q", 0)
    assert d is not None and d.message.ext is not None
    assert (d.message.ext.attempts, d.message.ext.first_at) == (1, clock.now())


async def test_ext_with_a_timeout_sets_that_deadline(manager: QueueManager, clock: ManualClock) -> None:
    await manager.update_props("q", {"timeout": 30})
    await manager.push("q", make_item(b"x"))
    d = await manager.pull("q", 0)
    assert d is not None
    await manager.ext("q", uuid_text(d.message.uuid), 600.0)
    assert manager.store.messages("q")[0].ts == clock.now() + 600
    await manager.ext("q", uuid_text(d.message.uuid))  # LMQ's ext: the queue's timeout
    assert manager.store.messages("q")[0].ts == clock.now() + 30


# -- dead letters -----------------------------------------------------------------------------------


async def test_exhausted_message_moves_to_the_dead_letter_queue_and_wakes_its_puller(
    manager: QueueManager, clock: ManualClock
) -> None:
    await manager.update_props("q", {"retry": 1, "timeout": 1, "dead_letter": "dlq"})
    await manager.push("q", make_item(b"bad"))  # LMQ's push: an ext is kept all the same
    first = await manager.pull("q", 0)
    clock.advance(1.5)
    second = await manager.pull("q", 0)
    assert first is not None and second is not None
    waiter = asyncio.create_task(manager.pull("dlq", None))
    await asyncio.sleep(0)
    clock.advance(1.5)
    assert await manager.pull("q", 0) is None
    d = await asyncio.wait_for(waiter, 1)
    assert d is not None and body(d.message) == b"bad"
    assert d.message.ext is not None
    assert d.message.ext.dead == DeadLetter("q", 2, clock.now() - 1.5, "retries")
    assert d.message.retry == 2, "the dead-letter queue's retry, as a push there"


async def test_without_dead_letter_an_exhausted_message_is_discarded(manager: QueueManager, clock: ManualClock) -> None:
    await manager.update_props("q", {"retry": 0, "timeout": 1})
    await manager.push("q", make_item(b"x"))
    assert await manager.pull("q", 0) is not None
    clock.advance(2)
    assert await manager.pull("q", 0) is None
    assert manager.store.queue_names() == ["q"]


async def test_dead_letters_chain_and_requeue_to_their_origin(manager: QueueManager, clock: ManualClock) -> None:
    await manager.update_props("q", {"retry": 0, "timeout": 1, "dead_letter": "dlq"})
    await manager.update_props("dlq", {"retry": 0, "timeout": 1, "dead_letter": "dlq2"})
    await manager.push("q", make_item(b"m"))
    assert await manager.pull("q", 0) is not None
    clock.advance(2)
    assert await manager.pull("q", 0) is None
    assert await manager.pull("dlq", 0) is not None
    clock.advance(2)
    assert await manager.pull("dlq", 0) is None
    (m,) = manager.store.messages("dlq2")
    assert m.ext is not None and m.ext.dead is not None and m.ext.dead.origin == "dlq"
    assert await manager.requeue("dlq2", 10, "q") == 1
    (back,) = manager.store.messages("q")
    assert back.ext is not None and (back.ext.dead, back.ext.attempts) == (None, 0)
    assert back.retry == 1, "q's retry 0, as a push"
    assert manager.store.size("dlq2") == 0


async def test_requeue_moves_available_dead_letters_only_first_first(manager: QueueManager, clock: ManualClock) -> None:
    await manager.update_props("q", {"retry": 0, "timeout": 1, "dead_letter": "dlq"})
    for i in range(3):
        await manager.push("q", make_item(b"%d" % i))
        clock.advance(0.01)
    for _ in range(3):
        assert await manager.pull("q", 0) is not None
    clock.advance(2)
    assert await manager.pull("q", 0) is None
    held = await manager.pull("dlq", 0)  # in processing: stays
    assert held is not None
    dlq_order = [body(m) for m in manager.store.messages("dlq") if m.uuid != held.message.uuid]
    assert await manager.requeue("dlq", 1, None) == 1
    assert [body(m) for m in manager.store.messages("q")] == dlq_order[:1]
    assert await manager.requeue("dlq", 10, None) == 1
    assert await manager.requeue("dlq", 10, None) == 0
    assert sorted(body(m) for m in manager.store.messages("q")) == sorted(dlq_order)
    assert [m.uuid for m in manager.store.messages("dlq")] == [held.message.uuid]
    with pytest.raises(BadRequest):
        await manager.requeue("dlq", 0, None)
    with pytest.raises(QueueNotFound):
        await manager.requeue("nothing", 1, None)


async def test_dead_letter_prop_is_validated_and_exported_only_when_set(manager: QueueManager) -> None:
    assert parse_props({"dead_letter": "dlq"}) == {"dead_letter": "dlq"}
    for bad in ["", 3, "schema", "a\x00b"]:
        with pytest.raises(InvalidProps, match="dead_letter"):
            parse_props({"dead_letter": bad})
    with pytest.raises(InvalidProps, match="itself"):
        await manager.update_props("q", {"dead_letter": "q"})
    with pytest.raises(InvalidProps, match="virtual"):
        await manager.update_props("q", {"dead_letter": "v"})
    props = await manager.update_props("q", {"retry": 1})
    assert list(export_props(props)) == ["accum", "retry", "timeout"], "LMQ's answer, unchanged"
    props = await manager.update_props("q", {"dead_letter": "dlq"})
    assert export_props(props) == {"accum": 0, "retry": 1, "timeout": 30, "dead_letter": "dlq"}
    props = await manager.update_props("q", {"dead_letter": None})
    assert "dead_letter" not in export_props(props)


async def test_sqs_prop_is_a_bounded_map_of_text_exported_only_when_set(manager: QueueManager) -> None:
    assert parse_props({"sqs": {"b": "2", "a": "1"}}) == {"sqs": {"a": "1", "b": "2"}}
    assert parse_props({"sqs": None}) == {"sqs": None}
    too_many = {f"k{i}": "v" for i in range(MAX_SQS_KEYS + 1)}
    too_big = {"Policy": "x" * MAX_SQS_BYTES}
    for bad in ["text", [1], {"a b": "1"}, {"": "1"}, {"a": 1}, {"a": None}, too_many, too_big]:
        with pytest.raises(InvalidProps, match="'sqs'"):
            parse_props({"sqs": bad})
    props = await manager.update_props("q", {"retry": 1, "sqs": {"DelaySeconds": "5"}})
    assert props.sqs == (("DelaySeconds", "5"),)
    assert export_props(props) == {"accum": 0, "retry": 1, "timeout": 30, "sqs": {"DelaySeconds": "5"}}
    props = await manager.update_props("q", {"sqs": None})
    assert list(export_props(props)) == ["accum", "retry", "timeout"], "LMQ's answer, unchanged"


# -- peek and keys ------------------------------------------------------------------------------------


async def test_peek_pages_by_uuid_cursor(manager: QueueManager, clock: ManualClock) -> None:
    for i in range(7):
        await manager.push("q", make_item(b"%d" % i))
        clock.advance(0.01)
    first = await manager.peek("q", None, 3)
    rest = await manager.peek("q", uuid_text(first[-1].uuid), 1000)
    assert [body(m) for m in first + rest] == [b"%d" % i for i in range(7)]
    assert manager.store.size("q") == 7
    for bad in (0, 1001):
        with pytest.raises(BadRequest):
            await manager.peek("q", None, bad)
    with pytest.raises(BadRequest):
        await manager.peek("q", "not-a-uuid", 1)
    with pytest.raises(MessageNotFound):
        await manager.peek("q", "00000000-0000-4000-8000-000000000000", 1)


async def test_resolve_key_finds_the_delivery_of_the_queue(manager: QueueManager) -> None:
    await manager.push("q", make_item(b"x"))
    d = await manager.pull("q", 0)
    assert d is not None
    key = msg_key(d.message.uuid)
    assert manager.resolve_key("q", key) == d.message.uuid
    assert manager.resolve_key("other", key) is None
    await manager.ack("q", uuid_text(d.message.uuid))
    assert manager.resolve_key("q", key) is None


# -- virtual queues -----------------------------------------------------------------------------------


async def test_push_to_a_virtual_queue_pushes_to_each_of_its_queues(manager: QueueManager, clock: ManualClock) -> None:
    got = await manager.push_with("v", make_item(b"x"), None)
    assert [q for q, _ in got] == ["a", "b"]
    clock.advance(0.01)
    assert await manager.push("v", make_item(b"y")) == "no"
    assert [[body(m) for m in manager.store.messages(q)] for q in ("a", "b")] == [[b"x", b"y"]] * 2
    assert "v" not in manager.store.queue_names(), "a virtual name never becomes a queue"


async def test_anything_but_a_push_on_a_virtual_queue_is_refused_naming_its_queues(manager: QueueManager) -> None:
    refusal = "virtual queue: pull from its queues a, b"
    calls = [
        manager.pull("v", 0),
        manager.pull_many("v", 2, 0),
        manager.ack("v", "00000000-0000-4000-8000-000000000000"),
        manager.nack("v", "00000000-0000-4000-8000-000000000000"),
        manager.ext("v", "00000000-0000-4000-8000-000000000000"),
        manager.get_props("v"),
        manager.update_props("v", {"retry": 1}),
        manager.delete("v"),
        manager.peek("v", None, 10),
    ]
    for call in calls:
        with pytest.raises(BadRequest, match=refusal):
            await call
    assert "v" not in manager.store.queue_names()


async def test_virtual_queues_are_validated_bound_and_removed(manager: QueueManager) -> None:
    await manager.push("real", make_item(b"x"))
    for name, members, why in [
        ("real", ["a"], "is a queue"),
        ("w", [], "1 to 64"),
        ("w", [f"q{i}" for i in range(65)], "1 to 64"),
        ("w", ["a", "a"], "twice"),
        ("w", ["v"], "virtual"),
        ("w", ["w"], "virtual"),
        ("a", ["c"], "queue of virtual queue 'v'"),
    ]:
        with pytest.raises(BadRequest, match=why):
            await manager.set_virtual(name, members)
    await manager.update_props("real", {"dead_letter": "dead"})
    with pytest.raises(BadRequest, match="dead-letter queue"):
        await manager.set_virtual("dead", ["c"])
    with pytest.raises(InvalidProps, match="virtual"):
        await manager.set_default_props([("^x", {"dead_letter": "v"})])
    await manager.set_virtual("w", ["c", "d"])
    assert manager.virtual_members("w") == ["c", "d"]
    assert manager.store.virtual_queues() == {"w": ["c", "d"]}
    assert manager.virtual_queues() == {"v": ["a", "b"], "w": ["c", "d"]}
    assert await manager.delete_virtual("w")
    assert not await manager.delete_virtual("w")
    assert manager.virtual_members("w") is None and manager.store.virtual_queues() == {}


async def test_the_stored_virtual_map_wins_over_the_configured_one(clock: ManualClock) -> None:
    store = MemoryStore(clock)
    await store.set_virtual("v", ["x"])
    m = QueueManager(store, clock, virtual={"v": ["a", "b"], "u": ["c"]})
    await m.start()
    try:
        assert m.virtual_queues() == {"v": ["x"], "u": ["c"]}
    finally:
        await m.close()
