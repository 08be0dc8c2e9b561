"""docs/lmq-contract.md#message-states-and-redelivery on one queue table, with an injected clock (no sleeping)."""

from __future__ import annotations

from pylmq.core.clock import ManualClock
from pylmq.core.message import PushOptions, State, StoredMessage, StoredMessageType, make_item
from pylmq.core.table import QueueTable
from pylmq.wire.items import Item


def item(body: bytes = b"x") -> Item:
    return make_item(body, "text/plain")


def test_push_creates_available_record_with_retry_plus_one() -> None:
    t, c = QueueTable("q"), ManualClock()
    assert t.enqueue(item(), retry=2, accum=0, now=c.now()) == "no"
    (m,) = t.messages()
    assert (m.state, m.type, m.retry, m.ts) == (State.AVAILABLE, StoredMessageType.NORMAL, 3, c.now())


def test_pull_gives_new_id_with_deadline_and_spends_one_retry() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(), 2, 0, c.now())
    before = t.messages()[0].uuid
    got = t.dequeue(timeout=30, now=c.now())
    assert got is not None
    m, retention = got
    assert m.uuid != before
    assert m.ts == c.now() + 30
    assert (m.state, m.retry, retention) == (State.PROCESSING, 2, 0.0)


def test_processing_message_is_redelivered_after_deadline_with_another_id() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(), 2, 0, c.now())
    first, _ = t.dequeue(5, c.now()) or (None, 0)
    assert first is not None
    assert t.dequeue(5, c.now()) is None, "nothing deliverable before the deadline"
    c.advance(5.001)
    second, _ = t.dequeue(5, c.now()) or (None, 0)
    assert second is not None and second.uuid != first.uuid and second.retry == 1
    assert not t.done(first.uuid, c.now()), "the old id of a redelivered message is gone"


def test_retry_exhaustion_discards_after_retry_plus_one_deliveries() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(), 1, 0, c.now())
    deliveries = 0
    for _ in range(5):
        if t.dequeue(1, c.now()) is not None:
            deliveries += 1
        c.advance(1.5)
    assert deliveries == 2
    assert len(t) == 0


def test_infinite_retry_never_discards() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(), None, 0, c.now())
    for _ in range(10):
        got = t.dequeue(1, c.now())
        assert got is not None and got[0].retry is None
        c.advance(2)


def test_ack_deletes_only_processing_before_deadline() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(), 2, 0, c.now())
    available = t.messages()[0]
    assert not t.done(available.uuid, c.now()), "an available message cannot be acked"
    m, _ = t.dequeue(10, c.now()) or (None, 0)
    assert m is not None
    c.advance(10.5)
    assert not t.done(m.uuid, c.now()), "expired id"
    t2 = QueueTable("q2")
    t2.enqueue(item(), 2, 0, c.now())
    m2, _ = t2.dequeue(10, c.now()) or (None, 0)
    assert m2 is not None and t2.done(m2.uuid, c.now()) and len(t2) == 0


def test_nack_makes_available_now_behind_waiting_messages_and_keeps_retry_spent() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(b"a"), 2, 0, c.now())
    m, _ = t.dequeue(30, c.now()) or (None, 0)
    assert m is not None
    c.advance(1)
    t.enqueue(item(b"b"), 2, 0, c.now())
    c.advance(1)
    assert t.release(m.uuid, c.now())
    nxt, _ = t.dequeue(30, c.now()) or (None, 0)
    assert nxt is not None and nxt.content == item(b"b"), "the nacked message queues behind b"
    again, _ = t.dequeue(30, c.now()) or (None, 0)
    assert again is not None and again.content == item(b"a") and again.retry == 1


def test_ext_moves_deadline_keeps_id() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(), 2, 0, c.now())
    m, _ = t.dequeue(10, c.now()) or (None, 0)
    assert m is not None
    c.advance(8)
    assert t.retain(m.uuid, 10, c.now())
    c.advance(8)
    assert t.dequeue(10, c.now()) is None, "extended: not redelivered at the old deadline"
    assert t.done(m.uuid, c.now())


def test_put_back_restores_the_spent_retry() -> None:
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(), 2, 0, c.now())
    m, _ = t.dequeue(10, c.now()) or (None, 0)
    assert m is not None and m.retry == 2
    assert t.put_back(m.uuid, c.now())
    m2, _ = t.dequeue(10, c.now()) or (None, 0)
    assert m2 is not None and m2.retry == 2


def test_accumulation_window_packs_pushes_into_one_compound_message() -> None:
    t, c = QueueTable("q"), ManualClock()
    assert t.enqueue(item(b"1"), 2, 0.5, c.now()) == "new"
    c.advance(0.2)
    assert t.enqueue(item(b"2"), 2, 0.5, c.now()) == "yes"
    assert t.dequeue(10, c.now()) is None, "not deliverable while the window is open"
    c.advance(0.31)
    assert t.enqueue(item(b"3"), 2, 0.5, c.now()) == "new", "window closed: a new one opens"
    m, _ = t.dequeue(10, c.now()) or (None, 0)
    assert m is not None and m.type is StoredMessageType.COMPOUND
    assert m.content == [item(b"1"), item(b"2")]


def test_waittime_follows_first_record() -> None:
    t, c = QueueTable("q"), ManualClock()
    assert t.waittime(c.now()) is None
    t.enqueue(item(), 2, 0, c.now())
    assert t.waittime(c.now()) == 0
    t.dequeue(3, c.now())
    assert t.waittime(c.now()) == 3


def test_ack_cost_does_not_depend_on_position() -> None:
    """Acks use the uuid index: acking the last of many leaves the rest in order."""
    t, c = QueueTable("q"), ManualClock()
    for i in range(1000):
        t.enqueue(item(b"%d" % i), 2, 0, c.now())
        c.advance(0.001)
    got = [t.dequeue(60, c.now()) for _ in range(1000)]
    assert all(g is not None for g in got)
    for g in reversed(got):
        assert g is not None and t.done(g[0].uuid, c.now())
    assert len(t) == 0 and t.first() is None


def test_hold_delivers_a_record_out_of_retries_instead_of_dropping_or_dead_lettering_it() -> None:
    # The queue's dead-letter queue is missing (SQS's rule): a compact record and one with an
    # ext, both out of retries, are delivered again, retry left at 0, and nothing goes to dead.
    t, c = QueueTable("q"), ManualClock()
    t.enqueue(item(b"compact"), 0, 0, c.now())
    t.push(item(b"tracked"), 0, c.now(), PushOptions(track=True))
    for _ in range(2):
        got = t.dequeue(timeout=0.5, now=c.now())
        assert got is not None and got[0].retry == 0
    c.advance(1)
    dead: list[StoredMessage] = []
    for _ in range(3):
        bodies = set()
        for _ in range(2):
            got = t.dequeue(0.5, c.now(), dead, hold=True)
            assert got is not None and got[0].retry == 0, got
            assert isinstance(got[0].content, tuple)
            bodies.add(got[0].content[1])
        assert bodies == {b"compact", b"tracked"}
        c.advance(1)
    assert dead == []
    assert len(t) == 2
    # Without hold, both are exhausted.
    assert t.dequeue(0.5, c.now(), dead) is None
    assert len(dead) == 2 and len(t) == 0
