"""QueueManager.reply_many and claim: many ids in one call, one group commit."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from pylmq.core import QueueManager, make_item
from pylmq.core.clock import ManualClock
from pylmq.core.manager import MAX_REPLY_IDS
from pylmq.core.message import uuid_text
from pylmq.errors import BadRequest, QueueNotFound
from pylmq.store import MemoryStore


class CountingStore(MemoryStore):
    """A memory store that counts the barriers asked of it."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.barriers = 0

    async def barrier(self) -> None:
        self.barriers += 1


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def store(clock: ManualClock) -> CountingStore:
    return CountingStore(clock)


@pytest.fixture
async def manager(store: CountingStore, clock: ManualClock) -> AsyncIterator[QueueManager]:
    m = QueueManager(store, clock=clock)
    await m.start()
    yield m
    await m.close()


async def pulled_ids(manager: QueueManager, queue: str, n: int) -> list[str]:
    for i in range(n):
        await manager.push(queue, make_item(b"%d" % i))
    ids = []
    for _ in range(n):
        d = await manager.pull(queue, 0)
        assert d is not None
        ids.append(uuid_text(d.message.uuid))
    return ids


async def test_ack_many_answers_every_id_with_one_barrier(manager: QueueManager, store: CountingStore) -> None:
    ids = await pulled_ids(manager, "q", 1200)  # more than one chunk of the loop
    store.barriers = 0
    out = await manager.reply_many("q", "ack", ids)
    assert (out.ok, out.not_found) == (ids, [])
    assert store.barriers == 1
    assert store.size("q") == 0


async def test_unknown_malformed_and_repeated_ids_are_not_found_in_order(manager: QueueManager) -> None:
    a, b = await pulled_ids(manager, "q", 2)
    unknown = str(uuid.uuid4())
    out = await manager.reply_many("q", "ack", [a, "not-an-id", unknown, a, b])
    assert out.ok == [a, b]
    assert out.not_found == ["not-an-id", unknown, a]


async def test_nothing_found_asks_no_barrier(manager: QueueManager, store: CountingStore) -> None:
    store.barriers = 0
    await manager.ensure("q")
    out = await manager.reply_many("q", "ext", [str(uuid.uuid4())])
    assert out.ok == [] and store.barriers == 0


async def test_ext_many_moves_every_deadline_by_the_queue_timeout(manager: QueueManager, clock: ManualClock) -> None:
    await manager.update_props("q", {"timeout": 10})
    ids = await pulled_ids(manager, "q", 3)
    clock.advance(8)
    assert (await manager.reply_many("q", "ext", ids)).ok == ids
    clock.advance(8)  # 16 s after the pull: past the first deadline, not the extended one
    assert await manager.pull("q", 0) is None
    assert (await manager.reply_many("q", "ack", ids)).ok == ids


async def test_expired_ids_are_not_found(manager: QueueManager, clock: ManualClock) -> None:
    await manager.update_props("q", {"timeout": 10})
    ids = await pulled_ids(manager, "q", 2)
    clock.advance(11)
    out = await manager.reply_many("q", "ext", ids)
    assert (out.ok, out.not_found) == ([], ids)


async def test_nack_many_makes_the_messages_available_at_once(manager: QueueManager) -> None:
    ids = await pulled_ids(manager, "q", 3)
    assert (await manager.reply_many("q", "nack", ids)).ok == ids
    again = [await manager.pull("q", 0) for _ in range(3)]
    assert sorted(d.message.content[1] for d in again if d is not None) == [b"0", b"1", b"2"]


async def test_bad_reply_too_many_ids_and_missing_queue_are_refused(manager: QueueManager) -> None:
    await manager.ensure("q")
    with pytest.raises(BadRequest, match="ack, nack or ext"):
        await manager.reply_many("q", "done", [])
    with pytest.raises(BadRequest, match="at most"):
        await manager.reply_many("q", "ack", ["x"] * (MAX_REPLY_IDS + 1))
    with pytest.raises(QueueNotFound):
        await manager.reply_many("nope", "ack", [])


# -- claim: taking messages back by the id of their delivery ---------------------------------------


async def test_claim_takes_back_processing_expired_and_nacked_messages_with_their_ids(
    manager: QueueManager, clock: ManualClock, store: CountingStore
) -> None:
    await manager.update_props("q", {"timeout": 10})
    live, expired, nacked = await pulled_ids(manager, "q", 3)
    await manager.nack("q", nacked)
    clock.advance(5)
    await manager.ext("q", live)  # live until +15, expired's deadline (+10) passes below
    clock.advance(6)
    store.barriers = 0
    out = await manager.claim("q", [live, expired, nacked])
    assert out.not_found == [] and store.barriers == 1
    assert [uuid_text(d.message.uuid) for d in out.delivered] == [live, expired, nacked]
    assert sorted(d.message.content[1] for d in out.delivered) == [b"0", b"1", b"2"]
    # Same delivery continued, a new deadline. The live one keeps the retry the pull left it
    # (2 of 3); the expired and the nacked one would have been redelivered: they spend one.
    assert [d.message.retry for d in out.delivered] == [2, 1, 1]
    assert {d.message.id[0] for d in out.delivered} == {clock.now() + 10}
    assert await manager.pull("q", 0) is None  # nothing left to deliver to anyone else
    assert (await manager.reply_many("q", "ack", [live, expired, nacked])).ok == [live, expired, nacked]


async def test_claim_finds_nothing_once_a_message_was_redelivered_or_acked(
    manager: QueueManager, clock: ManualClock
) -> None:
    await manager.update_props("q", {"timeout": 10})
    redelivered, acked = await pulled_ids(manager, "q", 2)
    await manager.ack("q", acked)
    clock.advance(11)
    again = await manager.pull("q", 0)
    assert again is not None and uuid_text(again.message.uuid) != redelivered
    unknown = str(uuid.uuid4())
    out = await manager.claim("q", [redelivered, acked, unknown, "junk"])
    assert (out.delivered, out.not_found) == ([], [redelivered, acked, unknown, "junk"])


async def test_claim_answers_a_repeated_id_once(manager: QueueManager) -> None:
    (a,) = await pulled_ids(manager, "q", 1)
    out = await manager.claim("q", [a, a])
    assert len(out.delivered) == 1 and out.not_found == [a]
    assert len((await manager.claim("q", [a])).delivered) == 1  # claiming again is harmless


async def test_claim_takes_back_a_compound_message(manager: QueueManager, clock: ManualClock) -> None:
    await manager.update_props("c", {"accum": 1})
    await manager.push("c", make_item(b"x"))
    await manager.push("c", make_item(b"y"))
    clock.advance(2)
    d = await manager.pull("c", 0)
    assert d is not None
    await manager.nack("c", d.message.uuid)
    out = await manager.claim("c", [uuid_text(d.message.uuid)])
    assert [i[1] for i in out.delivered[0].message.items()] == [b"x", b"y"]


async def test_claim_refuses_too_many_ids_and_a_missing_queue(manager: QueueManager) -> None:
    await manager.ensure("q")
    with pytest.raises(BadRequest, match="at most"):
        await manager.claim("q", ["x"] * (MAX_REPLY_IDS + 1))
    with pytest.raises(QueueNotFound):
        await manager.claim("nope", [])
