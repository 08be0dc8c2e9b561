"""The queue table keeps most messages as compact records and the rest as StoredMessage objects
(pylmq.core.table's docstring); LMQ's rules must hold whichever form a record takes and across
both. These tests push records into each form through the public API and check what comes out."""

from __future__ import annotations

import threading
from uuid import RFC_4122, UUID

from pylmq.core.clock import ManualClock
from pylmq.core.message import Item, State, StoredMessage, StoredMessageType, make_item, new_uuid
from pylmq.core.table import COMPACT_MAX, RECORD_OVERHEAD, QueueTable


def item(body: bytes = b"x", ct: str = "text/plain") -> Item:
    return make_item(body, ct)


def uuid_with_key(head: int, key: int = 0x0123456789ABCDE) -> bytes:
    """A v4-shaped uuid; uuids with the same ``key`` share the table's index key."""
    return head.to_bytes(8, "big") + (0x80 << 56 | key).to_bytes(8, "big")


def drain(t: QueueTable, now: float) -> list[StoredMessage]:
    out = []
    while (got := t.dequeue(30, now)) is not None:
        out.append(got[0])
    return out


def test_messages_that_do_not_fit_a_compact_record_keep_their_place_in_id_order() -> None:
    t, c = QueueTable("q"), ManualClock()
    bodies = [b"small-1", b"B" * (COMPACT_MAX + 1), b"small-2", b"tiny"]
    t.enqueue(item(bodies[0]), 2, 0, c.now())
    c.advance(0.001)
    t.enqueue(item(bodies[1]), 2, 0, c.now())
    c.advance(0.001)
    t.enqueue(item(bodies[2]), 300, 0, c.now())  # retry beyond a byte
    c.advance(0.001)
    t.enqueue(item(bodies[3], "application/x-odd"), 2, 0, c.now())
    got = drain(t, c.now())
    assert [m.content for m in got] == [
        item(bodies[0]),
        item(bodies[1]),
        item(bodies[2]),
        item(bodies[3], "application/x-odd"),
    ]
    assert [m.retry for m in got] == [2, 2, 300, 2]


def test_records_pushed_at_the_same_instant_come_out_in_uuid_order() -> None:
    t, c = QueueTable("q"), ManualClock()
    for i in range(50):
        t.enqueue(item(b"%d" % i), 2, 0, c.now())
    before = [m.uuid for m in t.messages()]
    assert before == sorted(before), "messages() is in id order"
    got = drain(t, c.now())
    assert len(got) == 50
    by_uuid = {m.uuid: m.content for m in t.messages()}
    assert len(by_uuid) == 50


def test_put_back_past_the_largest_compact_retry_stays_a_number() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(), 254, 0, c.now())  # 255 deliveries
    m, _ = t.dequeue(10, c.now()) or (None, 0)
    assert m is not None and m.retry == 254
    assert t.put_back(m.uuid, c.now())
    (back,) = t.messages()
    assert back.retry == 255, f"expected retry 255 after put_back, got {back.retry!r}"
    m2, _ = t.dequeue(10, c.now()) or (None, 0)
    assert m2 is not None and m2.retry == 254


def test_infinite_retry_survives_nack_and_put_back() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(), None, 0, c.now())
    for op in (t.release, t.put_back, t.release):
        m, _ = t.dequeue(10, c.now()) or (None, 0)
        assert m is not None and m.retry is None
        assert op(m.uuid, c.now())
    (m,) = t.messages()
    assert (m.state, m.retry) == (State.AVAILABLE, None)


def test_restored_uuids_sharing_an_index_key_are_each_found_acked_and_ordered() -> None:
    t, c = QueueTable("q"), ManualClock()
    now = c.now()
    a, b, d = uuid_with_key(1), uuid_with_key(2), uuid_with_key(3)
    for i, u in enumerate((b, a, d)):
        t.restore(StoredMessage((now + 10 + i, u), State.PROCESSING, StoredMessageType.NORMAL, 1, item(b"%d" % i)))
    assert len(t) == 3
    assert [m.uuid for m in t.messages()] == [b, a, d]
    for u in (a, b, d):
        stored = t.get(u)
        assert stored is not None and stored.uuid == u
    assert t.retain(a, 30, now), "ext of the second record under the shared key"
    assert t.done(d, now) and t.get(d) is None
    assert t.release(b, now)
    first = t.first()
    assert first is not None and first.uuid == b and first.state is State.AVAILABLE
    assert t.done(a, now) and len(t) == 1
    got = drain(t, now)
    assert [m.content for m in got] == [item(b"0")]


def test_records_restored_with_a_ts_of_zero_or_less_keep_their_order() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(b"now"), 2, 0, c.now())
    for i, (ts, body) in enumerate(((-0.0, b"minus zero"), (-5.0, b"negative"), (1.0, b"one"))):
        t.restore(StoredMessage((ts, uuid_with_key(i, 7)), State.AVAILABLE, StoredMessageType.NORMAL, 2, item(body)))
    got = [m.content[1] for m in drain(t, c.now())]
    assert got == [b"negative", b"minus zero", b"one", b"now"]


def test_a_queue_with_more_distinct_metadata_than_a_byte_gives_every_item_back() -> None:
    t, c = QueueTable("q"), ManualClock()
    pushed = [item(b"%d" % i, f"type/n{i}") for i in range(300)]
    for it in pushed:
        t.enqueue(it, 2, 0, c.now())
        c.advance(0.001)
    assert [m.content for m in drain(t, c.now())] == pushed


def test_bytes_count_bodies_metadata_and_overhead_and_return_to_zero() -> None:
    t, c = QueueTable("q"), ManualClock()
    items = [item(b"a" * 10), item(b"b" * (COMPACT_MAX + 10), "x/y"), make_item(b"c" * 5)]
    for it in items:
        t.enqueue(it, 2, 0, c.now())
    t.enqueue(item(b"d"), 2, 1.0, c.now())
    want = sum(len(b) + sum(len(k) + len(v) for k, v in md) + RECORD_OVERHEAD for md, b in items)
    want += 1 + len(b"content-type") + len(b"text/plain") + RECORD_OVERHEAD
    assert t.bytes == want
    c.advance(2)
    while (got := t.dequeue(30, c.now())) is not None:
        assert t.done(got[0].uuid, c.now())
    assert (len(t), t.bytes) == (0, 0)


def test_snapshot_keeps_the_state_it_was_taken_in() -> None:
    t, c = QueueTable("q"), ManualClock()
    for i in range(20):
        t.enqueue(item(b"%d" % i), 2, 0, c.now())
    t.enqueue(item(b"acc"), 2, 5.0, c.now())
    before = sorted((m.id, m.state, m.retry, repr(m.content)) for m in t.messages())
    snap = t.snapshot()
    for _ in range(5):
        m, _ = t.dequeue(30, c.now()) or (None, 0)
        assert m is not None and t.done(m.uuid, c.now())
    assert t.enqueue(item(b"acc2"), 2, 5.0, c.now()) == "yes"
    seen: list[list[StoredMessage]] = []
    reader = threading.Thread(target=lambda: seen.append(list(snap)))
    reader.start()
    reader.join()
    assert len(snap) == 21
    assert sorted((m.id, m.state, m.retry, repr(m.content)) for m in seen[0]) == before


def test_many_ext_and_nack_cycles_keep_one_record_and_its_content() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(b"only"), None, 0, c.now())
    for i in range(5000):
        m, _ = t.dequeue(1, c.now()) or (None, 0)
        assert m is not None, f"cycle {i}: nothing to pull"
        assert t.retain(m.uuid, 1, c.now())
        assert t.release(m.uuid, c.now())
        c.advance(0.0001)
    (m,) = t.messages()
    assert (m.state, m.content, len(t)) == (State.AVAILABLE, item(b"only"), 1)


def test_new_uuids_are_distinct_random_v4() -> None:
    got = [new_uuid() for _ in range(5000)]
    assert len(set(got)) == len(got), "uuids repeat"
    bad = [u for u in got if (UUID(bytes=u).version, UUID(bytes=u).variant) != (4, RFC_4122)]
    assert not bad, f"not v4 uuids: {[UUID(bytes=u) for u in bad[:3]]}"


def test_recovery_removes_and_moves_available_records_from_the_middle() -> None:
    t, c = QueueTable("q"), ManualClock()
    now = c.now()
    ids = [uuid_with_key(i, 100 + i) for i in range(6)]
    for i, u in enumerate(ids):
        t.restore(StoredMessage((now + i, u), State.AVAILABLE, StoredMessageType.NORMAL, 2, item(b"%d" % i)))
    t.restore_delete(ids[2])
    t.restore_move(
        ids[4], StoredMessage((now + 60, ids[4]), State.PROCESSING, StoredMessageType.NORMAL, 1, item(b"ignored"))
    )
    t.restore(StoredMessage((now + 0.5, ids[0]), State.AVAILABLE, StoredMessageType.NORMAL, 2, item(b"0 again")))
    t.recovered()
    assert len(t) == 5
    moved = t.get(ids[4])
    assert moved is not None and (moved.state, moved.retry, moved.content) == (State.PROCESSING, 1, item(b"4"))
    c.advance(10)
    got = drain(t, c.now())
    assert [m.content[1] for m in got] == [b"0 again", b"1", b"3", b"5"]
    assert t.done(ids[4], c.now()) and t.bytes == sum(len(m.content[1]) for m in got) + 4 * (
        len(b"content-type") + len(b"text/plain") + RECORD_OVERHEAD
    )
