"""LocalStore's peek: the same page inline and, for a deep queue, in a worker thread."""

from __future__ import annotations

import pytest

import pylmq.store.local as local_mod
from pylmq.core.clock import ManualClock
from pylmq.core.message import PushOptions, make_item
from pylmq.errors import MessageNotFound
from pylmq.store.local import LocalStore


@pytest.mark.parametrize("inline", [10_000, 5])
async def test_peek_pages_the_same_inline_and_in_a_thread(inline: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local_mod, "PEEK_INLINE", inline)
    clock = ManualClock()
    store = LocalStore(clock)
    for i in range(20):
        await store.push("q", make_item(b"%d" % i), 2, PushOptions(priority=i % 2))
        clock.advance(0.01)
    assert await store.dequeue("q", 30) is not None
    everything = store.messages("q")
    pages = [await store.peek("q", None, 7)]
    while pages[-1]:
        pages.append(await store.peek("q", pages[-1][-1].uuid, 7))
    assert [m for p in pages for m in p] == everything
    assert await store.peek("q", everything[3].id, 2) == everything[4:6]
    assert await store.peek("missing", None, 5) == []
    with pytest.raises(MessageNotFound):
        await store.peek("q", b"\0" * 16, 5)
