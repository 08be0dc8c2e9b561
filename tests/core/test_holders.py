"""Holder tags: the book's bounds, and QueueManager.claim_holder over a memory store."""

from __future__ import annotations

import pytest

from pylmq.core import QueueManager, make_item
from pylmq.core.clock import ManualClock
from pylmq.core.holders import MAX_HOLDER_LENGTH, HolderBook, check_holder
from pylmq.errors import BadRequest, QueueNotFound
from pylmq.store import MemoryStore


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
async def manager(clock: ManualClock):
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
    # Both deadlines are the same instant: which one comes first is LMQ's tie-break by uuid.
    assert taken is not None
    (left,) = [d for d in got if d.message.content != taken.message.content]
    out = await manager.claim_holder("q", "r")
    assert [d.message.uuid for d in out.delivered] == [left.message.uuid]
    retry = left.message.retry
    assert retry is not None and out.delivered[0].message.retry == retry - 1
    assert (await manager.claim_holder("q", "r")).delivered[0].message.uuid == left.message.uuid


async def test_reply_many_and_put_back_forget_the_tag(manager: QueueManager) -> None:
    await push(manager, 3)
    got = await manager.pull_many("q", 3, 0, holder="r")
    await manager.reply_many("q", "ack", [got[0].message.uuid.hex()])
    await manager.put_back("q", got[1].message.uuid)
    await manager.reply_many("q", "ext", [got[2].message.uuid.hex()])  # still held: kept
    assert [d.message.uuid for d in (await manager.claim_holder("q", "r")).delivered] == [got[2].message.uuid]


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
