"""QueueTable.counts: visible, in flight and delayed records, kept as records change.

Each count is checked against the records themselves after every step of random histories
(pushes with and without delays, compact records and records with an ext, accumulation,
deliveries, acks, exts, nacks, put-backs, claims, deadlines passing, recovery), and a count
is shown to look at no record (it runs on the event loop, for every GetQueueAttributes).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pylmq.cluster.mirror import MirrorTable
from pylmq.core.clock import ManualClock
from pylmq.core.message import PushOptions, State, StoredMessage, StoredMessageType, make_item, new_uuid
from pylmq.core.table import QueueCounts, QueueTable


def truth(records: list[StoredMessage], now: float) -> QueueCounts:
    in_flight = sum(1 for m in records if m.state is State.PROCESSING)
    delayed = sum(1 for m in records if m.state is not State.PROCESSING and m.ts > now)
    return QueueCounts(len(records) - in_flight - delayed, in_flight, delayed)


class CountingTable(QueueTable):
    """A table that counts the passes over its records (each goes through its available ones)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.scans = 0

    def _available_records(self) -> list[bytes]:
        self.scans += 1
        return super()._available_records()


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.sampled_from([0, 0, 3, 50]), st.booleans(), st.booleans()),
        st.tuples(st.just("accum"), st.sampled_from([2, 20])),
        st.tuples(st.just("take"), st.sampled_from([1, 5, 60])),
        st.tuples(st.sampled_from(["done", "ext", "nack", "put_back", "claim"]), st.integers(0, 30)),
        st.tuples(st.just("claim_any"), st.integers(0, 30)),
        st.tuples(st.just("advance"), st.sampled_from([0.5, 4, 30, 100])),
        st.tuples(st.just("recover")),
    ),
    max_size=60,
)


def run(ops: list[tuple[object, ...]], t: QueueTable, c: ManualClock) -> QueueTable:
    delivered: list[bytes] = []
    for op in ops:
        kind = op[0]
        if kind == "push":
            delay, ext, track = op[1], op[2], op[3]
            assert isinstance(delay, int)
            options = PushOptions(not_before=c.now() + delay if delay else None, priority=1 if ext else 0)
            t.push(make_item(b"m"), 3, c.now(), options, track=bool(track))
        elif kind == "accum":
            assert isinstance(op[1], int)
            t.enqueue(make_item(b"a"), 3, op[1], c.now())
        elif kind == "take":
            assert isinstance(op[1], int)
            got = t.dequeue(op[1], c.now())
            if got is not None:
                delivered.append(got[0].uuid)
        elif kind == "claim_any":
            # a record named by a uuid it was never delivered under (a peek shows them): even
            # a delayed one may be claimed, leaving the delayed ones before its time
            records = t.messages()
            if records:
                assert isinstance(op[1], int)
                t.claim([records[op[1] % len(records)].uuid], 10, c.now())
        elif kind in ("done", "ext", "nack", "put_back", "claim"):
            if delivered:
                assert isinstance(op[1], int)
                u = delivered[op[1] % len(delivered)]
                now = c.now()
                if kind == "done":
                    t.done(u, now)
                elif kind == "ext":
                    t.retain(u, 7, now)
                elif kind == "nack":
                    t.release(u, now)
                elif kind == "put_back":
                    t.put_back(u, now)
                else:
                    t.claim([u], 9, now)
        elif kind == "advance":
            assert isinstance(op[1], (int, float))
            c.advance(op[1])
        elif kind == "recover":
            fresh = QueueTable("q")
            for m in t.messages():
                fresh.restore(m)
            fresh.recovered()
            t = fresh
        assert t.counts(c.now()) == truth(t.messages(), c.now()), op
    return t


@settings(max_examples=300, deadline=None)
@given(OPS)
def test_counts_match_the_records_after_any_history(ops: list[tuple[object, ...]]) -> None:
    c = ManualClock()
    run(ops, QueueTable("q"), c)


@settings(max_examples=100, deadline=None)
@given(OPS, st.sampled_from([0.0, 1.0, 40.0, 200.0]))
def test_counts_asked_later_without_any_change_in_between(ops: list[tuple[object, ...]], later: float) -> None:
    c = ManualClock()
    t = run(ops, QueueTable("q"), c)
    c.advance(later)  # delays end and deadlines pass with no operation to tell the table
    assert t.counts(c.now()) == truth(t.messages(), c.now())


def test_a_count_looks_at_no_record_and_after_recovery_walks_the_queue_once() -> None:
    c = ManualClock()
    t = CountingTable("q")
    for i in range(1000):
        t.push(make_item(b"%d" % i), 2, c.now(), PushOptions(not_before=c.now() + (i % 4) * 10))
    for _ in range(100):
        assert t.dequeue(30, c.now()) is not None
    t.scans = 0
    assert t.counts(c.now()) == QueueCounts(150, 100, 750)
    c.advance(15)
    assert t.counts(c.now()) == QueueCounts(400, 100, 500)
    assert t.scans == 0, "a count looked through the records"
    r = CountingTable("q")
    for m in t.messages():
        r.restore(m)
    r.recovered()
    r.scans = 0
    assert r.counts(c.now()) == QueueCounts(400, 100, 500)
    c.advance(10)
    assert r.counts(c.now()) == QueueCounts(650, 100, 250)
    assert r.scans == 1


def test_the_delayed_kept_stay_few_once_their_time_has_passed() -> None:
    # Every delayed push keeps its time until the clock passes it, not longer: a queue that
    # is never counted holds no more than its records due later.
    c = ManualClock()
    t = QueueTable("q")
    for _ in range(5000):
        t.push(make_item(b"x"), 2, c.now(), PushOptions(not_before=c.now() + 1))
        c.advance(0.5)
    assert t._later.later is not None and len(t._later.later) <= 3


def test_the_mirror_of_a_cluster_table_counts_its_rows() -> None:
    c = ManualClock()
    m = MirrorTable(c.now)

    def row(ts: float, state: State) -> StoredMessage:
        return StoredMessage((ts, new_uuid()), state, StoredMessageType.NORMAL, 2, make_item(b"r"))

    rows = [row(c.now() - 1, State.AVAILABLE), row(c.now() + 5, State.AVAILABLE), row(c.now() + 30, State.PROCESSING)]
    for r in rows:
        m.put(r)
    assert m.counts() == QueueCounts(1, 1, 1)
    c.advance(10)
    assert m.counts() == QueueCounts(2, 1, 0)
    m.delete(rows[0].id)
    late = row(c.now() + 50, State.AVAILABLE)
    m.put(late)
    assert m.counts() == QueueCounts(1, 1, 1)
    m.delete(late.id)  # gone before its time
    assert m.counts() == QueueCounts(1, 1, 0)
    m.replace([row(c.now() + 5, State.AVAILABLE), row(c.now(), State.PROCESSING)])
    assert m.counts() == QueueCounts(0, 1, 1)
    c.advance(6)
    assert m.counts() == QueueCounts(1, 1, 0)
