"""QueueTable.claim: found through indexes, never by looking through the queue (it runs on the
event loop: every other client waits meanwhile); the retry a redelivery spends; the size bound."""

from __future__ import annotations

from pylmq.core.clock import ManualClock
from pylmq.core.message import State, StoredMessage, StoredMessageType, make_item, new_uuid
from pylmq.core.table import QueueTable


class CountingTable(QueueTable):
    """A table that counts the passes over its available records."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.scans = 0

    def _available_records(self) -> list[bytes]:
        self.scans += 1
        return super()._available_records()


def deep(n: int, clock: ManualClock, retry: int = 2) -> CountingTable:
    t = CountingTable("q")
    for i in range(n):
        clock.advance(0.001)  # in push order
        t.enqueue(make_item(b"%d" % i, "text/plain"), retry, 0, clock.now())
    return t


def take(t: QueueTable, clock: ManualClock, timeout: float = 10) -> StoredMessage:
    got = t.dequeue(timeout, clock.now())
    assert got is not None
    return got[0]


def test_claim_in_a_deep_queue_finds_nacked_and_expired_messages_without_a_pass_over_the_queue() -> None:
    c = ManualClock()
    t = deep(5000, c)
    nacked, expired, acked = take(t, c), take(t, c, timeout=1), take(t, c)
    assert t.release(nacked.uuid, c.now()) and t.done(acked.uuid, c.now())
    c.advance(2)  # expired's deadline passes; nobody pulls it
    scans = t.scans
    got = t.claim([nacked.uuid, expired.uuid, acked.uuid, new_uuid()], 10, c.now())
    assert [m.content[1] if m else None for m in got] == [b"0", b"1", None, None]
    assert t.scans == scans, "a claim looked through the available records"
    assert all(m.state is State.PROCESSING and m.ts == c.now() + 10 for m in got if m)


def test_a_nack_replayed_by_recovery_is_claimed_without_a_pass_over_the_queue() -> None:
    c = ManualClock()
    t = CountingTable("q")
    u = new_uuid()
    t.restore(StoredMessage((c.now() + 5, u), State.PROCESSING, StoredMessageType.NORMAL, 1, make_item(b"n")))
    for i in range(100):
        t.restore(
            StoredMessage(
                (c.now() + 100 + i, new_uuid()), State.PROCESSING, StoredMessageType.NORMAL, 1, make_item(b"p")
            )
        )
    t.restore_move(u, StoredMessage((c.now(), u), State.AVAILABLE, StoredMessageType.NORMAL, 1, make_item(b"ignored")))
    t.recovered()
    scans = t.scans  # recovery's own lookup of available records
    (m,) = t.claim([u], 10, c.now())
    assert m is not None and m.content[1] == b"n" and t.scans == scans


def test_a_nacked_record_restored_as_it_was_is_still_claimed_then_claims_stop_looking() -> None:
    # Recovery cannot tell a nacked available record from a fresh one: while one restored that
    # way may remain, an id found nowhere else is looked for among them; once they are gone, never.
    c = ManualClock()
    src = deep(3, c)
    nacked = take(src, c)
    assert src.release(nacked.uuid, c.now())
    t = CountingTable("q")
    for stored in src.messages():
        t.restore(stored)
    t.recovered()
    scans = t.scans  # recovery's own lookup of available records
    (m,) = t.claim([nacked.uuid], 10, c.now())
    assert m is not None and m.content[1] == b"0" and t.scans == scans + 1
    take(t, c), take(t, c)  # the other restored records leave the available ones
    c.advance(1)
    t.enqueue(make_item(b"new"), 2, 0, c.now())
    assert t.claim([new_uuid()], 10, c.now()) == [None]
    assert t.scans == scans + 1, "claims still look through the queue once the restored records are gone"


def test_a_claim_of_an_unheld_message_spends_a_retry_a_held_one_keeps_it() -> None:
    c = ManualClock()
    t = deep(3, c, retry=2)  # 3 deliveries
    held, expired, nacked = take(t, c), take(t, c, timeout=1), take(t, c)
    assert t.release(nacked.uuid, c.now())
    c.advance(2)
    got = t.claim([held.uuid, expired.uuid, nacked.uuid], 10, c.now())
    assert [m.retry if m else None for m in got] == [2, 1, 1]


def test_a_claim_discards_an_unheld_message_with_no_retry_left() -> None:
    c = ManualClock()
    t = deep(2, c, retry=0)  # one delivery each
    expired, nacked = take(t, c, timeout=1), take(t, c)
    assert t.release(nacked.uuid, c.now())
    c.advance(2)
    assert t.claim([expired.uuid, nacked.uuid], 10, c.now()) == [None, None]
    assert len(t) == 0 and t.dequeue(10, c.now()) is None


def test_a_claim_of_an_expired_message_with_infinite_retry_keeps_it_infinite() -> None:
    c = ManualClock()
    t = QueueTable("q")
    t.enqueue(make_item(b"x"), None, 0, c.now())
    m = take(t, c, timeout=1)
    c.advance(2)
    (got,) = t.claim([m.uuid], 10, c.now())
    assert got is not None and got.retry is None


def test_a_claim_stops_at_max_bytes_of_payload_and_leaves_the_rest_untouched() -> None:
    c = ManualClock()
    t = QueueTable("q")
    for _ in range(5):
        t.enqueue(make_item(b"x" * 100), 2, 0, c.now())
    ms = [take(t, c, timeout=1) for _ in range(5)]
    c.advance(2)
    got = t.claim([m.uuid for m in ms], 10, c.now(), max_bytes=250)
    assert len(got) == 3 and all(got)  # 100, 200, then 300 >= 250: stop
    assert t.claim([ms[0].uuid], 10, c.now(), max_bytes=1) != [], "at least one is claimed"
    # The two left alone are still expired processing records, retry untouched.
    rest = {m.uuid: m for m in t.messages()}
    assert [(rest[m.uuid].retry, rest[m.uuid].ts) for m in ms[3:]] == [(2, ms[3].ts), (2, ms[4].ts)]
