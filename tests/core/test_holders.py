"""Holder tags: the book's bounds, and QueueManager.claim_holder over a memory store."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pylmq.core import Delivery, QueueManager, make_item
from pylmq.core.clock import ManualClock
from pylmq.core.holders import MAX_HOLDER_LENGTH, HolderBook, check_holder
from pylmq.core.manager import MAX_REPLY_IDS
from pylmq.core.message import uuid_text
from pylmq.errors import BadRequest, QueueNotFound
from pylmq.store import MemoryStore
from tests.core.test_manager_selection import LoopTurns


def u(i: int) -> bytes:
    return i.to_bytes(16, "big")


@pytest.mark.parametrize("tag", ["", "a" * (MAX_HOLDER_LENGTH + 1), "a b", "t\n", "tâg", "\x00", 7, None, b"t"])
def test_bad_tags_are_refused(tag: object) -> None:
    with pytest.raises(BadRequest, match="holder tag"):
        check_holder(tag)


def test_good_tags_pass() -> None:
    for tag in ("r", "a" * MAX_HOLDER_LENGTH, "spark-1f3e/run:2"):
        assert check_holder(tag) == tag


def test_book_keeps_each_holder_uuids_in_delivery_order_and_forgets_answered_ones() -> None:
    book = HolderBook()
    book.record("a", [u(1), u(2)])
    book.record("b", [u(3)])
    book.record("a", [u(4)])
    assert book.of("a") == [u(1), u(2), u(4)] and book.of("b") == [u(3)] and book.of("c") == []
    book.forget([u(2), u(3), u(99)])
    assert book.of("a") == [u(1), u(4)] and book.of("b") == [] and len(book) == 2
    assert book.holders() == ["a"]  # a tag with no delivery left takes no room


def test_a_uuid_recorded_again_moves_to_its_new_holder() -> None:
    book = HolderBook()
    book.record("a", [u(1)])
    book.record("b", [u(1)])
    assert book.of("a") == [] and book.of("b") == [u(1)] and len(book) == 1


def test_book_drops_its_oldest_records_past_its_bound() -> None:
    book = HolderBook(max_records=3)
    book.record("a", [u(1), u(2)])
    book.record("b", [u(3), u(4)])
    assert len(book) == 3 and book.of("a") == [u(2)] and book.of("b") == [u(3), u(4)]


def test_book_drops_the_least_recently_used_holder_past_its_bound() -> None:
    book = HolderBook(max_holders=2)
    book.record("a", [u(1)])
    book.record("b", [u(2)])
    book.record("a", [u(3)])  # a is now the most recent
    book.record("c", [u(4)])
    assert sorted(book.holders()) == ["a", "c"] and book.of("b") == [] and len(book) == 3


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def manager(clock: ManualClock) -> AsyncIterator[QueueManager]:
    m = QueueManager(MemoryStore(clock=clock), clock=clock)
    await m.start()
    yield m
    await m.close()


async def push(manager: QueueManager, n: int) -> None:
    for i in range(n):
        await manager.push("q", make_item(b"%d" % i))


async def test_claim_by_holder_takes_back_what_is_still_held_and_nothing_answered(manager: QueueManager) -> None:
    await manager.update_props("q", {"timeout": 30.0, "retry": 5})
    await push(manager, 5)
    first = await manager.pull_many("q", 3, 0, holder="r1")
    other = await manager.pull_many("q", 2, 0, holder="r2")
    await manager.ack("q", first[0].message.uuid)
    await manager.nack("q", first[1].message.uuid)
    out = await manager.claim_holder("q", "r1")
    assert [d.message.uuid for d in out.delivered] == [first[2].message.uuid]
    assert out.delivered[0].message.retry == first[2].message.retry  # still held: no retry spent
    assert out.not_found == [] and out.later == []
    again = await manager.claim_holder("q", "r2")
    assert [d.message.uuid for d in again.delivered] == [d.message.uuid for d in other]
    # A claim keeps the uuid and the holder: the same holder can claim once more.
    assert len((await manager.claim_holder("q", "r1")).delivered) == 1


async def test_claim_by_holder_after_the_deadline_spends_a_retry_and_skips_redelivered(
    manager: QueueManager, clock: ManualClock
) -> None:
    await manager.update_props("q", {"timeout": 1.0, "retry": 3})
    await push(manager, 2)
    got = await manager.pull_many("q", 2, 0, holder="r")
    clock.advance(2.0)  # both deadlines pass; one is pulled again by someone else
    taken = await manager.pull("q", 0)
    # Equal deadlines: which one comes first is up to their random uuids.
    assert taken is not None and taken.message.content in [d.message.content for d in got]
    left = next(d for d in got if d.message.content != taken.message.content)
    out = await manager.claim_holder("q", "r")
    assert [d.message.uuid for d in out.delivered] == [left.message.uuid]
    retry = left.message.retry
    assert retry is not None and out.delivered[0].message.retry == retry - 1
    assert (await manager.claim_holder("q", "r")).delivered[0].message.uuid == left.message.uuid


async def test_reply_many_forgets_the_tag_and_put_back_keeps_it(manager: QueueManager) -> None:
    await push(manager, 4)
    got = await manager.pull_many("q", 4, 0, holder="r")
    await manager.reply_many("q", "ack", [got[0].message.uuid.hex()])
    await manager.reply_many("q", "nack", [got[3].message.uuid.hex()])
    await manager.put_back("q", got[1].message.uuid)  # its client never had it: kept
    await manager.reply_many("q", "ext", [got[2].message.uuid.hex()])  # still held: kept
    assert [d.message.uuid for d in (await manager.claim_holder("q", "r")).delivered] == [
        got[1].message.uuid,
        got[2].message.uuid,
    ]


async def test_claim_by_holder_checks_its_tag_and_queue(manager: QueueManager) -> None:
    await push(manager, 1)
    with pytest.raises(BadRequest, match="holder tag"):
        await manager.pull_many("q", 1, 0, holder="a b")
    assert len(await manager.pull_many("q", 1, 0)) == 1  # the refused pull took nothing
    with pytest.raises(BadRequest, match="holder tag"):
        await manager.claim_holder("q", "x" * 65)
    with pytest.raises(QueueNotFound):
        await manager.claim_holder("nope", "r")
    assert (await manager.claim_holder("q", "unknown")).delivered == []


async def test_deleting_the_queue_forgets_its_tags(manager: QueueManager) -> None:
    await push(manager, 1)
    await manager.pull_many("q", 1, 0, holder="r")
    await manager.delete("q")
    await push(manager, 1)
    assert (await manager.claim_holder("q", "r")).delivered == []


async def test_claim_by_holder_of_many_records_lets_other_clients_in_between(manager: QueueManager) -> None:
    # A claim by ids takes at most MAX_REPLY_IDS so that one request holds the loop for
    # milliseconds; a claim by holder may name up to 200,000 records (3.8 s in one go measured):
    # it must claim them in slices of that size and let other clients in between.
    n = 2 * MAX_REPLY_IDS + 5
    await manager.update_props("q", {"timeout": 300.0, "retry": 5})
    for i in range(0, n, MAX_REPLY_IDS):
        await manager.push_many("q", [make_item(b"%d" % j) for j in range(i, min(n, i + MAX_REPLY_IDS))])
    pulled: list[Delivery] = []
    while len(pulled) < n:
        pulled += await manager.pull_many("q", MAX_REPLY_IDS, 0, holder="r")
    async with LoopTurns() as turns:
        out = await manager.claim_holder("q", "r")
    assert [d.message.uuid for d in out.delivered] == [d.message.uuid for d in pulled]
    assert out.later == [] and out.not_found == []
    assert turns.count >= 2, f"the claim of {n} records let other clients in {turns.count} times"


async def test_claim_by_holder_stops_at_max_bytes_across_slices(manager: QueueManager) -> None:
    n = MAX_REPLY_IDS + 10
    await manager.update_props("q", {"timeout": 300.0, "retry": 5})
    for i in range(0, n, MAX_REPLY_IDS):
        await manager.push_many("q", [make_item(b"x" * 10) for _ in range(i, min(n, i + MAX_REPLY_IDS))])
    pulled: list[Delivery] = []
    while len(pulled) < n:
        pulled += await manager.pull_many("q", MAX_REPLY_IDS, 0, holder="r")
    budget = (MAX_REPLY_IDS + 3) * pulled[0].message.nbytes()
    out = await manager.claim_holder("q", "r", max_bytes=budget)
    assert len(out.delivered) == MAX_REPLY_IDS + 3
    assert out.later == [uuid_text(d.message.uuid) for d in pulled[MAX_REPLY_IDS + 3 :]]


async def test_a_tagged_pull_whose_client_left_before_the_answer_stays_claimable_by_the_tag(
    manager: QueueManager, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stream reader's driver killed while the node makes its pull-many durable: the node puts
    # the messages back, and a put-back message sorts at the time of the put-back, behind every
    # message pushed before. The restarted reader claims by its tag before pulling: the put-back
    # messages must be among what it gets back, first, not left to come after newer ones.
    for i in range(5):
        await manager.push("q", make_item(b"%d" % i))
        clock.advance(0.001)  # in push order
    in_barrier, durable = asyncio.Event(), asyncio.Event()

    async def slow_barrier() -> None:
        in_barrier.set()
        await durable.wait()

    monkeypatch.setattr(manager.store, "barrier", slow_barrier)
    pull = asyncio.create_task(manager.pull_many("q", 3, 0, holder="r"))
    async with asyncio.timeout(5):
        await in_barrier.wait()
    pull.cancel()  # the connection is lost: the HTTP server cancels the request's task
    durable.set()  # the put-backs' own barriers
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(5):
            await pull
    out = await manager.claim_holder("q", "r")
    assert [d.message.content[1] for d in out.delivered] == [b"0", b"1", b"2"]


async def test_an_answer_never_written_is_put_back_and_stays_claimable_by_its_tag(manager: QueueManager) -> None:
    # The API servers put back a pull-many answer still unsent when the client's connection is
    # lost (pylmq/api/_putback.py): the tag's holder never got those messages.
    await push(manager, 5)
    got = await manager.pull_many("q", 3, 0, holder="r")
    for d in got:
        await manager.put_back("q", d.message.uuid)
    assert [d.message.uuid for d in (await manager.claim_holder("q", "r")).delivered] == [d.message.uuid for d in got]


async def test_a_pull_that_ends_after_its_queue_was_deleted_leaves_no_tags_behind(
    manager: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A pull-many waits for its barrier (an fsync on a durable node) while a DELETE removes the
    # queue and its tags; recording then would leave a book for a queue that no longer exists,
    # which nothing drops until a queue of that name is deleted again: one create-pull-delete
    # per name, and the node's memory grows with every name.
    await push(manager, 3)
    in_barrier, durable = asyncio.Event(), asyncio.Event()
    barrier = manager.store.barrier

    async def slow_barrier() -> None:
        if not durable.is_set():
            in_barrier.set()
            await durable.wait()
        await barrier()

    monkeypatch.setattr(manager.store, "barrier", slow_barrier)
    pull = asyncio.create_task(manager.pull_many("q", 3, 0, holder="r"))
    async with asyncio.timeout(5):
        await in_barrier.wait()
    durable.set()
    await manager.delete("q")
    async with asyncio.timeout(5):
        await pull
    assert "q" not in manager._holders, "a book for a deleted queue"
