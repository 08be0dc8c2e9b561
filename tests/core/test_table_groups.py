"""Message groups on one queue table (SQS FIFO's MessageGroupId, docs/message-options.md#message-groups):
the records of a group are delivered in push order, one in processing at a time; other groups
and records without a group are not held up. Time is a ManualClock's: nothing sleeps."""

from __future__ import annotations

import random

import pytest

import pylmq.core.table as table_mod
from pylmq.core.clock import ManualClock
from pylmq.core.message import PushOptions, State, StoredMessage, make_item
from pylmq.core.options import check_options
from pylmq.core.table import QueueTable
from pylmq.errors import InvalidOptions
from tests.core.test_table_options import CountingHeapq


def push(t: QueueTable, c: ManualClock, body: bytes, group: str | None, **kw: object) -> bytes:
    c.advance(0.001)  # records pushed at one time are in uuid order: these are in push order
    return t.push(make_item(body), None, c.now(), PushOptions(group=group, track=True, **kw))  # type: ignore[arg-type]


def body(m: StoredMessage) -> bytes:
    assert isinstance(m.content, tuple)
    return m.content[1]


def drain(t: QueueTable, c: ManualClock, timeout: float = 30) -> list[StoredMessage]:
    """Every record a consumer gets now, without acking any."""
    out = []
    while (got := t.dequeue(timeout, c.now())) is not None:
        out.append(got[0])
    return out


def test_one_record_of_a_group_in_processing_at_a_time_in_push_order() -> None:
    t, c = QueueTable("q"), ManualClock()
    for i in range(3):
        push(t, c, b"a%d" % i, "a")
        push(t, c, b"b%d" % i, "b")
    push(t, c, b"free", None)
    got = drain(t, c)
    assert [body(m) for m in got] == [b"a0", b"b0", b"free"]  # one per group, the rest wait
    assert t.done(got[0].uuid, c.now())
    assert [body(m) for m in drain(t, c)] == [b"a1"]  # acking a0 frees group a's next
    assert t.done(got[1].uuid, c.now())
    assert [body(m) for m in drain(t, c)] == [b"b1"]
    assert len(t) == 5  # waiting records are still the table's (size, peek, snapshot)


def test_after_a_visibility_timeout_the_groups_head_comes_back_first() -> None:
    t, c = QueueTable("q"), ManualClock()
    for i in range(3):
        push(t, c, b"a%d" % i, "a")
    first = drain(t, c, timeout=10)
    assert [body(m) for m in first] == [b"a0"]
    c.advance(10)
    again = drain(t, c, timeout=10)
    assert [body(m) for m in again] == [b"a0"]  # redelivered, not a1
    assert again[0].ext is not None and again[0].ext.attempts == 2
    assert t.done(again[0].uuid, c.now())
    assert [body(m) for m in drain(t, c)] == [b"a1"]


def test_a_record_made_visible_again_keeps_its_place_before_the_groups_next() -> None:
    t, c = QueueTable("q"), ManualClock()
    for i in range(3):
        push(t, c, b"a%d" % i, "a")
    (m,) = drain(t, c)
    c.advance(1)
    assert t.release(m.uuid, c.now())  # a nack: available again with a later id
    assert [body(x) for x in drain(t, c)] == [b"a0"]


def test_groups_survive_a_restore_in_any_order() -> None:
    """Recovery restores records in whatever order the journal holds them: the group's record in
    processing, and otherwise its first by push order, is the head again."""
    t, c = QueueTable("q"), ManualClock()
    for i in range(4):
        push(t, c, b"a%d" % i, "a")
        push(t, c, b"b%d" % i, "b")
    (_a0, b0) = drain(t, c, timeout=10)
    assert t.release(b0.uuid, c.now())  # b0 available again, a0 in processing
    records = t.messages()
    for seed in range(5):
        r = QueueTable("q")
        shuffled = list(records)
        random.Random(seed).shuffle(shuffled)
        for m in shuffled:
            r.restore(m)
        r.recovered()
        assert [body(m) for m in drain(r, c, timeout=10)] == [b"b0"], seed  # a0 is still held
        c.advance(10)
        assert sorted(body(m) for m in drain(r, c, timeout=10)) == [b"a0", b"b0"]
        c.advance(-10)
    # New pushes come after the restored ones in their group.
    r = QueueTable("q")
    for m in records:
        r.restore(m)
    push(r, c, b"a-new", "a")
    waiting = sorted((m.ext.seq, body(m)) for m in r.messages() if m.ext is not None and m.ext.group == "a")
    assert [b for _, b in waiting] == [b"a0", b"a1", b"a2", b"a3", b"a-new"]


def test_a_hard_expired_head_lets_the_group_go_on() -> None:
    t, c = QueueTable("q"), ManualClock()
    push(t, c, b"old", "a", expires=c.now() + 60, hard=True)
    c.advance(30)
    push(t, c, b"new", "a", expires=c.now() + 60, hard=True)
    (m,) = drain(t, c, timeout=40)
    assert body(m) == b"old"
    c.advance(40)  # its visibility ended after its retention: gone, and the next one comes
    assert [body(x) for x in drain(t, c)] == [b"new"]


def test_group_is_checked_and_excludes_priority() -> None:
    c = ManualClock()
    for bad in ["", "x" * 129, 3]:
        with pytest.raises(InvalidOptions, match="'group'"):
            check_options(PushOptions(group=bad), c.now())  # type: ignore[arg-type]
    with pytest.raises(InvalidOptions, match="excludes 'priority'"):
        check_options(PushOptions(group="g", priority=1), c.now())
    assert check_options(PushOptions(group="g"), c.now()).group == "g"


@pytest.mark.parametrize("n", [1000, 8000])
def test_groups_touch_a_bounded_number_of_heap_entries_per_message(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each record is pushed, delivered (half of them twice, after a visibility timeout) and
    acked, across 50 groups and consumers taking all they can: a constant number of heap entries
    per message whatever n, so no operation scans the queue or a group."""
    counter = CountingHeapq()
    monkeypatch.setattr(table_mod, "heapq", counter)
    t, c = QueueTable("q"), ManualClock()
    for i in range(n):
        push(t, c, b"%d" % i, f"g{i % 50}")
    seen: dict[str, list[int]] = {}
    redelivered = set()
    while len(t):
        got = drain(t, c, timeout=10)
        assert len({m.ext.group for m in got if m.ext is not None}) == len(got)  # one per group
        for m in got:
            assert m.ext is not None and m.ext.group is not None
            k = int(body(m))
            if k % 2 and k not in redelivered:
                redelivered.add(k)  # left to time out: comes back before its group's next
                continue
            seen.setdefault(m.ext.group, []).append(k)
            assert t.done(m.uuid, c.now())
        c.advance(10)
    assert all(ks == sorted(ks) for ks in seen.values())
    assert sum(len(ks) for ks in seen.values()) == n
    assert counter.ops <= 16 * n, f"{counter.ops} heap entries touched for {n} messages"
    assert all(m.state is not State.PROCESSING for m in t.messages())


def test_dequeue_in_group_takes_the_groups_next_records_after_its_head_in_order() -> None:
    t, c = QueueTable("q"), ManualClock()
    for i in range(3):
        push(t, c, b"g%d" % i, "g")
    push(t, c, b"h0", "h")
    got = t.dequeue(30, c.now())
    assert got is not None and body(got[0]) == b"g0"
    taken = [t.dequeue_in_group("g", 30, c.now()) for _ in range(3)]
    assert [None if x is None else body(x[0]) for x in taken] == [b"g1", b"g2", None]
    assert [body(m) for m in drain(t, c)] == [b"h0"]  # group g is all in processing
    # g1 acked before g0: g2, in processing, stays behind g0, the group's head.
    t.done(taken[0][0].uuid, c.now())  # type: ignore[index]
    c.advance(31)
    assert sorted(body(m) for m in drain(t, c)) == [b"g0", b"h0"]  # not g2


def test_dequeue_in_group_leaves_records_out_of_retries_to_dequeue() -> None:
    t, c = QueueTable("q"), ManualClock()
    c.advance(0.001)
    t.push(make_item(b"g0"), 0, c.now(), PushOptions(group="g", track=True))
    c.advance(0.001)
    t.push(make_item(b"g1"), 0, c.now(), PushOptions(group="g", track=True))
    got = t.dequeue(30, c.now())
    assert got is not None and body(got[0]) == b"g0"
    g1 = t.dequeue_in_group("g", 30, c.now())
    assert g1 is not None and body(g1[0]) == b"g1"
    c.advance(31)
    # Both out of retries now: neither is taken by dequeue_in_group, and dequeue drops them in order.
    assert t.dequeue_in_group("g", 30, c.now()) is None
    dead: list[StoredMessage] = []
    assert t.dequeue(30, c.now(), dead) is None
    assert [body(m) for m in dead] == [b"g0", b"g1"]
