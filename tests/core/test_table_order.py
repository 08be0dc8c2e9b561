"""The order a queue table keeps its compact records in (pylmq.core.table._Order): whatever
comes in, in order or not, across its chunk boundaries, comes out smallest first."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from pylmq.core.clock import ManualClock
from pylmq.core.message import make_item
from pylmq.core.table import _CHUNK, QueueTable, _Order

# ("push", key) or ("pop", None); keys mostly rising, as ids do, sometimes not.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(-3, 40)),
        st.tuples(st.just("pop"), st.none()),
    ),
    max_size=3 * _CHUNK,
)


@settings(max_examples=300, deadline=None)
@given(steps, st.lists(st.integers(0, 1000), max_size=20), st.sampled_from([1, 2, 3, 5, _CHUNK]))
def test_order_gives_entries_back_smallest_first(
    ops: list[tuple[str, int | None]], initial: list[int], chunk: int
) -> None:
    def key(n: int) -> bytes:
        return n.to_bytes(4, "big")

    order = _Order([key(n) for n in initial], chunk)
    model = [key(n) for n in initial]
    heapq.heapify(model)
    rising = 0
    for op, delta in ops:
        if op == "push":
            assert delta is not None
            rising += delta  # a negative step: an entry out of order
            entry = key(max(rising, 0))
            order.push(entry)
            heapq.heappush(model, entry)
        elif model:
            assert order.first() == model[0]
            order.pop_first()
            heapq.heappop(model)
        assert len(order) == len(model)
        assert order.first() == (model[0] if model else None)
    drained: list[bytes] = []
    while (e := order.first()) is not None:
        drained.append(e)
        order.pop_first()
    assert drained == sorted(model)


def test_pushes_while_the_clock_goes_back_come_out_in_id_order() -> None:
    t, c = QueueTable("q"), ManualClock()
    pushed = []
    for i in range(3 * _CHUNK):
        c.advance(-0.33 if i % 7 == 3 else 0.25)  # no two pushes at the same time
        t.enqueue(make_item(b"%d" % i), 2, 0, c.now())
        pushed.append((c.now(), b"%d" % i))
    c.advance(100)
    got: list[bytes] = []
    while (d := t.dequeue(30, c.now())) is not None:
        (pulled,) = d[0].items()
        got.append(pulled[1])
    assert got == [body for _, body in sorted(pushed)]
