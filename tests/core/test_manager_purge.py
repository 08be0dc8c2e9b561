"""QueueManager.purge (every message goes, the queue and its own props stay) and
names_version (moves exactly when the set of queue names does)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from pylmq.core import ManualClock, QueueManager, make_item
from pylmq.core.props import RawProps
from pylmq.errors import BadRequest, QueueNotFound
from pylmq.store import MemoryStore


@pytest.fixture
async def manager() -> AsyncIterator[QueueManager]:
    clock = ManualClock()
    m = QueueManager(MemoryStore(clock), clock, virtual={"v": ["a", "b"]})
    await m.start()
    yield m
    await m.close()


async def test_purge_counts_and_drops_every_record_and_keeps_own_props(manager: QueueManager) -> None:
    await manager.update_props("q", {"retry": 5})
    for i in range(4):
        await manager.push("q", make_item(b"%d" % i))
    delivered = await manager.pull("q", 0)
    assert delivered is not None
    assert await manager.purge("q") == 4
    assert manager.store.size("q") == 0
    assert manager.raw_props("q") == {"retry": 5}
    assert (await manager.get_props("q")).retry == 5
    assert await manager.pull("q", 0) is None
    assert "q" in manager.queue_names()


async def test_purge_of_a_queue_without_own_props_leaves_it_without(manager: QueueManager) -> None:
    await manager.push("plain", make_item(b"x"))
    assert await manager.purge("plain") == 1
    assert "plain" in manager.queue_names()
    assert not manager.raw_props("plain")


async def test_purge_ends_waiting_pulls_empty(manager: QueueManager) -> None:
    await manager.ensure("w")
    waiting = asyncio.create_task(manager.pull("w", None))
    for _ in range(100):
        await asyncio.sleep(0)
    assert await manager.purge("w") == 0
    assert await asyncio.wait_for(waiting, 5) is None


async def test_purge_refuses_unknown_and_virtual_names_and_creates_nothing(manager: QueueManager) -> None:
    with pytest.raises(QueueNotFound):
        await manager.purge("never")
    with pytest.raises(BadRequest, match="a, b"):
        await manager.purge("v")
    assert manager.queue_names() == []
    assert manager.store.queue_names() == []


async def test_names_version_moves_when_queues_come_and_go_only(manager: QueueManager) -> None:
    v0 = manager.names_version
    await manager.push("n", make_item(b"x"))
    v1 = manager.names_version
    assert v1 > v0
    await manager.push("n", make_item(b"y"))
    await manager.update_props("n", {"retry": 1})
    assert manager.names_version == v1, "pushes and props change no name"
    await manager.delete("n")
    v2 = manager.names_version
    assert v2 > v1
    manager.on_remote_queue_created("r")
    v3 = manager.names_version
    assert v3 > v2
    await manager.on_remote_queue_deleted("r")
    assert manager.names_version > v3
    v4 = manager.names_version
    await manager.on_remote_queue_deleted("r")  # already gone
    assert manager.names_version == v4


class RoundTripStore(MemoryStore):
    """A memory store whose queue deletions and creations take turns of the loop, as those of
    a cluster's or a PostgreSQL store do (a round trip each)."""

    async def delete(self, name: str) -> bool:
        await asyncio.sleep(0)
        return await super().delete(name)

    async def create(self, name: str, props: RawProps | None = None) -> bool:
        await asyncio.sleep(0)
        return await super().create(name, props)


async def test_purges_of_one_queue_at_once_each_succeed_and_count_each_record_once() -> None:
    clock = ManualClock()
    manager = QueueManager(RoundTripStore(clock), clock)
    await manager.start()
    try:
        await manager.update_props("twice", {"retry": 2})
        for i in range(5):
            await manager.push("twice", make_item(b"%d" % i))
        counts = await asyncio.gather(*(manager.purge("twice") for _ in range(3)))
        assert sorted(counts) == [0, 0, 5]
        assert manager.raw_props("twice") == {"retry": 2}
        await manager.purge("twice")
        assert manager._purging == {}, "no lock is left behind"
    finally:
        await manager.close()
