"""The durable store keeps every queue, property and message state across restarts.

A "crash" reopens a copy of the data directory taken after a barrier without closing the store
(see ``store_helpers.crash_copy``); a "restart" closes it first.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from pylmq.core.clock import ManualClock
from pylmq.core.message import State, StoredMessageType, make_item
from pylmq.errors import StoreError
from pylmq.store.durable import DurableStore
from pylmq.store.journal import MAGIC, Encoder
from tests.store.store_helpers import OpenStore, crash_copy, state_of


async def restart(open_store: OpenStore, s: DurableStore, **kw: object) -> DurableStore:
    await s.close()
    return await open_store(s.data_dir, **kw)


async def crash(open_store: OpenStore, s: DurableStore, tmp_path: Path, **kw: object) -> DurableStore:
    await s.barrier()
    dest = await crash_copy(s, tmp_path / f"crashed-{id(s)}")
    return await open_store(dest, **kw)


@pytest.mark.parametrize("how", ["restart", "crash"])
async def test_available_messages_come_back_available(open_store: OpenStore, tmp_path: Path, how: str) -> None:
    s = await open_store()
    for i in range(3):
        await s.enqueue("q", make_item(b"m%d" % i, "text/plain"), 2, 0)
    before = state_of(s)
    s2 = await restart(open_store, s) if how == "restart" else await crash(open_store, s, tmp_path)
    assert state_of(s2) == before
    assert {m.state for m in s2.messages("q")} == {State.AVAILABLE}


@pytest.mark.parametrize("how", ["restart", "crash"])
async def test_processing_message_is_redelivered_only_after_its_deadline(
    open_store: OpenStore, tmp_path: Path, clock: ManualClock, how: str
) -> None:
    s = await open_store()
    await s.enqueue("q", make_item(b"job"), 2, 0)
    got = await s.dequeue("q", 30)
    assert got is not None
    first, _ = got
    s2 = await restart(open_store, s) if how == "restart" else await crash(open_store, s, tmp_path)
    assert await s2.dequeue("q", 30) is None, "a message in processing must wait for its deadline"
    clock.advance(30.5)
    again = await s2.dequeue("q", 30)
    assert again is not None and first.retry is not None
    msg, _ = again
    assert (msg.content, msg.retry) == (((), b"job"), first.retry - 1)
    assert msg.uuid != first.uuid


@pytest.mark.parametrize("how", ["restart", "crash"])
async def test_acked_message_never_comes_back(
    open_store: OpenStore, tmp_path: Path, clock: ManualClock, how: str
) -> None:
    s = await open_store()
    await s.enqueue("q", make_item(b"a"), 2, 0)
    await s.enqueue("q", make_item(b"b"), 2, 0)
    while (got := await s.dequeue("q", 30)) is not None:
        assert await s.done("q", got[0].uuid)
    s2 = await restart(open_store, s) if how == "restart" else await crash(open_store, s, tmp_path)
    clock.advance(3600)
    assert s2.size("q") == 0
    assert await s2.dequeue("q", 30) is None


async def test_message_whose_retry_is_spent_stays_discarded(open_store: OpenStore, clock: ManualClock) -> None:
    s = await open_store()
    await s.enqueue("q", make_item(b"once"), 0, 0)
    assert await s.dequeue("q", 1) is not None
    clock.advance(2)
    assert await s.dequeue("q", 1) is None
    s2 = await restart(open_store, s)
    assert s2.size("q") == 0


@pytest.mark.parametrize("how", ["restart", "crash"])
async def test_nack_ext_and_put_back_are_recovered(
    open_store: OpenStore, tmp_path: Path, clock: ManualClock, how: str
) -> None:
    s = await open_store()
    for body in (b"nacked", b"extended", b"put-back"):
        await s.enqueue("q", make_item(body), 2, 0)
        clock.advance(1)
    taken = {}
    for _ in range(3):
        got = await s.dequeue("q", 10)
        assert got is not None
        taken[got[0].content[1]] = got[0].uuid
    assert await s.release("q", taken[b"nacked"])
    clock.advance(5)
    assert await s.retain("q", taken[b"extended"], 100)
    assert await s.put_back("q", taken[b"put-back"])
    before = state_of(s)
    s2 = await restart(open_store, s) if how == "restart" else await crash(open_store, s, tmp_path)
    assert state_of(s2) == before
    by_body = {m.content[1]: m for m in s2.messages("q")}
    assert (by_body[b"nacked"].state, by_body[b"nacked"].retry) == (State.AVAILABLE, 2)
    assert (by_body[b"extended"].state, by_body[b"extended"].ts) == (State.PROCESSING, clock.now() + 100)
    assert (by_body[b"put-back"].state, by_body[b"put-back"].retry) == (State.AVAILABLE, 3)


@pytest.mark.parametrize("how", ["restart", "crash"])
async def test_props_and_default_props_are_recovered(open_store: OpenStore, tmp_path: Path, how: str) -> None:
    s = await open_store()
    await s.create("plain")
    await s.create("q", {"accum": 0.25, "retry": None, "timeout": 7.5})
    await s.set_queue_props("q", {"retry": 4})
    await s.set_default_props([("^q", {"timeout": 1.0}), ("x", {"retry": None})])
    s2 = await restart(open_store, s) if how == "restart" else await crash(open_store, s, tmp_path)
    assert sorted(s2.queue_names()) == ["plain", "q"]
    assert s2.queue_props("plain") == {}
    assert s2.queue_props("q") == {"retry": 4}
    assert s2.default_props() == [("^q", {"timeout": 1.0}), ("x", {"retry": None})]


@pytest.mark.parametrize("how", ["restart", "crash"])
async def test_deleted_queue_stays_deleted_and_a_recreated_one_starts_empty(
    open_store: OpenStore, tmp_path: Path, how: str
) -> None:
    s = await open_store()
    await s.enqueue("gone", make_item(b"x"), 2, 0)
    await s.create("again", {"retry": 1})
    await s.enqueue("again", make_item(b"old"), 1, 0)
    assert await s.delete("gone")
    assert await s.delete("again")
    await s.enqueue("again", make_item(b"new"), 2, 0)
    s2 = await restart(open_store, s) if how == "restart" else await crash(open_store, s, tmp_path)
    assert s2.queue_names() == ["again"]
    assert s2.queue_props("again") == {}
    assert [m.content[1] for m in s2.messages("again")] == [b"new"]


@pytest.mark.parametrize("how", ["restart", "crash"])
async def test_accumulated_items_are_recovered_and_the_open_window_keeps_accumulating(
    open_store: OpenStore, tmp_path: Path, clock: ManualClock, how: str
) -> None:
    s = await open_store()
    assert await s.enqueue("acc", make_item(b"1"), 2, 10.0) == "new"
    assert await s.enqueue("acc", make_item(b"2", "text/plain"), 2, 10.0) == "yes"
    s2 = await restart(open_store, s) if how == "restart" else await crash(open_store, s, tmp_path)
    (m,) = s2.messages("acc")
    assert (m.state, m.type) == (State.ACCUM, StoredMessageType.COMPOUND)
    assert m.content == [make_item(b"1"), make_item(b"2", "text/plain")]
    assert await s2.enqueue("acc", make_item(b"3"), 2, 10.0) == "yes"
    clock.advance(10)
    got = await s2.dequeue("acc", 30)
    assert got is not None and [i[1] for i in got[0].items()] == [b"1", b"2", b"3"]


async def test_torn_tail_is_cut_and_everything_before_it_kept(open_store: OpenStore, tmp_path: Path) -> None:
    s = await open_store()
    await s.enqueue("q", make_item(b"kept"), 2, 0)
    await s.close()
    seg = next(s.data_dir.glob("journal-*.log"))
    torn = Encoder().put("q", s.messages("q")[0])[:-5]
    with open(seg, "ab") as f:
        f.write(torn)
    s2 = await open_store(s.data_dir)
    assert [m.content[1] for m in s2.messages("q")] == [b"kept"]
    assert s2.stats.torn_bytes == len(torn)
    (saved,) = seg.parent.glob(seg.name + ".torn-*")
    assert saved.read_bytes() == torn
    # Appends after the cut must be readable: they may not land behind the garbage.
    await s2.enqueue("q", make_item(b"after"), 2, 0)
    s3 = await restart(open_store, s2)
    assert sorted(m.content[1] for m in s3.messages("q")) == [b"after", b"kept"]


async def test_corrupt_last_record_is_dropped_and_earlier_ones_kept(open_store: OpenStore) -> None:
    s = await open_store()
    await s.enqueue("q", make_item(b"first"), 2, 0)
    await s.barrier()
    await s.enqueue("q", make_item(b"second"), 2, 0)
    await s.close()
    seg = next(s.data_dir.glob("journal-*.log"))
    data = bytearray(seg.read_bytes())
    data[-2] ^= 0x55
    seg.write_bytes(bytes(data))
    s2 = await open_store(s.data_dir)
    assert [m.content[1] for m in s2.messages("q")] == [b"first"]


@pytest.mark.parametrize("policy", ["always", "interval", "none"])
async def test_answered_push_survives_a_process_crash_under_every_policy(
    open_store: OpenStore, tmp_path: Path, policy: str
) -> None:
    s = await open_store(fsync=policy)
    await s.enqueue("q", make_item(b"m"), 2, 0)
    s2 = await crash(open_store, s, tmp_path, fsync=policy)
    assert [m.content[1] for m in s2.messages("q")] == [b"m"]


async def test_interval_policy_syncs_within_the_interval(open_store: OpenStore) -> None:
    s = await open_store(fsync="interval", fsync_interval=0.05)
    await s.enqueue("q", make_item(b"m"), 2, 0)
    await s.barrier()
    syncs = s.stats.syncs
    for _ in range(100):
        if s.stats.syncs > syncs:
            break
        await asyncio.sleep(0.01)
    assert s.stats.syncs == syncs + 1, f"expected one sync after the interval, saw {s.stats.syncs - syncs}"


async def test_concurrent_requests_share_one_group_commit(open_store: OpenStore) -> None:
    s = await open_store(fsync="always")
    groups = s.stats.groups

    async def push(i: int) -> None:
        await s.enqueue("q", make_item(b"%d" % i), 2, 0)
        await s.barrier()

    await asyncio.gather(*(push(i) for i in range(200)))
    assert s.stats.groups - groups <= 2, f"200 concurrent pushes took {s.stats.groups - groups} group commits"
    assert s.size("q") == 200


async def test_barrier_with_nothing_pending_returns_at_once(open_store: OpenStore) -> None:
    s = await open_store()
    groups = s.stats.groups
    await s.barrier()
    assert s.stats.groups == groups


async def test_a_cancelled_barrier_does_not_cancel_the_group(open_store: OpenStore) -> None:
    s = await open_store(fsync="always")  # the policy whose barriers wait for the group's sync
    await s.enqueue("q", make_item(b"a"), 2, 0)
    waiting = asyncio.create_task(s.barrier())
    other = asyncio.create_task(s.barrier())
    await asyncio.sleep(0)
    waiting.cancel()
    await other
    assert waiting.cancelled()


async def test_second_store_on_the_same_directory_is_refused(open_store: OpenStore) -> None:
    s = await open_store()
    with pytest.raises(StoreError, match="in use by another pylmq node"):
        await open_store(s.data_dir)


async def test_unknown_file_in_place_of_the_journal_is_refused_and_left_alone(
    open_store: OpenStore, tmp_path: Path
) -> None:
    d = tmp_path / "foreign"
    d.mkdir()
    (d / "journal-00000001.log").write_bytes(b"SQLite format 3\x00 whatever")
    with pytest.raises(StoreError, match="cannot recover"):
        await open_store(d)
    assert (d / "journal-00000001.log").read_bytes() == b"SQLite format 3\x00 whatever"


async def test_leftover_compaction_file_is_ignored_and_removed(open_store: OpenStore, tmp_path: Path) -> None:
    s = await open_store()
    await s.enqueue("q", make_item(b"real"), 2, 0)
    await s.close()
    (s.data_dir / "journal-00000002.log.tmp").write_bytes(MAGIC + b"half a snapsh")
    s2 = await open_store(s.data_dir)
    assert [m.content[1] for m in s2.messages("q")] == [b"real"]
    assert not list(s2.data_dir.glob("*.tmp"))


async def test_barrier_after_close_is_refused(open_store: OpenStore) -> None:
    s = await open_store()
    await s.close()
    with pytest.raises(StoreError):
        await s.barrier()


async def test_write_failure_fails_the_barrier_refuses_changes_and_keeps_what_was_durable(
    open_store: OpenStore,
) -> None:
    s = await open_store(retry_initial=60)  # no attempt to leave the failed state here
    await s.enqueue("q", make_item(b"durable"), 2, 0)
    await s.barrier()
    # The journal's descriptor now writes to /dev/full: every write fails with ENOSPC.
    full = os.open("/dev/full", os.O_WRONLY)
    os.dup2(full, s._fd)
    os.close(full)
    await s.enqueue("q", make_item(b"not durable"), 2, 0)
    with pytest.raises(StoreError, match="No space left"):
        await s.barrier()
    with pytest.raises(StoreError, match="No space left"):
        await s.enqueue("q", make_item(b"after the failure"), 2, 0)
    with pytest.raises(StoreError, match="No space left"):
        await s.barrier()
    assert sorted(m.content[1] for m in s.messages("q")) == [b"durable", b"not durable"], "a refused push got in"
    with pytest.raises(StoreError):
        await s.close()
    s2 = await open_store(s.data_dir)
    assert [m.content[1] for m in s2.messages("q")] == [b"durable"]


async def test_under_interval_a_barrier_writes_its_records_at_once(open_store: OpenStore) -> None:
    s = await open_store(fsync="interval")
    await s.enqueue("q", make_item(b"a"), 2, 0)
    before = s.stats.groups
    waiting = asyncio.create_task(s.barrier())
    await asyncio.sleep(0)  # one step: the barrier must not need the loop's next round
    assert waiting.done() and waiting.exception() is None
    assert s.stats.groups == before + 1, "the barrier itself wrote the group to the journal"
