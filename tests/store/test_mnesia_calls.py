"""The mnesia store's calls to Erlang peers: bounded, routed away from stalled peers, and a 503
that says which peer, which operation, after how long and whether the outcome is unknown.

The peers are a fake PeerLink: ``answers`` (returns ok/empty), ``silent`` (never answers; the
link enforces the timeout the store passes, as the dist node does), ``stalling`` (dropped as
stalled, as the dist node does when it finds the peer stalled), ``frozen`` (stalled before
the call: refused unsent, as the dist node does for a peer already stalled).
"""

from __future__ import annotations

import asyncio

import pytest

from pylmq.cluster.mnesia_store import SUSPECT_FOR, MnesiaStore
from pylmq.core.clock import ManualClock
from pylmq.core.message import make_item
from pylmq.erlang.terms import Atom, Term
from pylmq.errors import ClusterError, PeerStalled
from pylmq.store.memory import MemoryStore
from tests.store.store_helpers import QuietLink

A = Atom
TIMEOUT = 0.2


class FakeLink(QuietLink):
    def __init__(self, peers: list[str], stalled: dict[str, float] | None = None) -> None:
        self._peers = peers
        self._stalled = stalled or {}
        self.calls: list[tuple[str, str, float]] = []

    def peers(self) -> list[str]:
        return list(self._peers)

    def stalled(self) -> dict[str, float]:
        return dict(self._stalled)

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        self.calls.append((peer, function, timeout))
        if peer.startswith("silent"):
            async with asyncio.timeout(timeout):
                await asyncio.Event().wait()
        if peer.startswith("stalling"):
            raise PeerStalled(f"node {peer} is stalled")
        if peer.startswith("frozen"):
            raise PeerStalled(f"node {peer} is stalled", sent=False)
        return A("empty") if function == "dequeue" else A("ok")


def store_on(link: FakeLink, clock: ManualClock | None = None) -> MnesiaStore:
    store = MnesiaStore(MemoryStore(), clock, rpc_timeout=TIMEOUT)
    store.become_cluster(link)
    return store


async def test_a_silent_peer_costs_a_dequeue_the_rpc_timeout_then_a_live_peer_serves_it() -> None:
    link = FakeLink(["silent@h", "answers@h"])
    loop = asyncio.get_running_loop()
    began = loop.time()
    assert await store_on(link).dequeue("q", 30) is None
    assert loop.time() - began < TIMEOUT + 1.0
    assert [(p, f) for p, f, _ in link.calls] == [("silent@h", "dequeue"), ("answers@h", "dequeue")]
    assert {t for _, _, t in link.calls} == {TIMEOUT}


async def test_an_enqueue_left_unanswered_is_not_retried_and_its_503_says_the_outcome_is_unknown() -> None:
    link = FakeLink(["silent@h", "answers@h"])
    with pytest.raises(ClusterError) as info:
        await store_on(link).enqueue("q", make_item(b"x"), 2, 0.0)
    detail = info.value.detail
    assert "lmq_lib:enqueue" in detail and "silent@h" in detail and "rpc timeout" in detail, detail
    assert "outcome is unknown" in detail and "not retried" in detail, detail
    assert [p for p, _, _ in link.calls] == ["silent@h"]


async def test_a_settle_dropped_by_a_stall_is_retried_and_the_503_names_every_peer() -> None:
    link = FakeLink(["stalling@h", "silent@h"], stalled={"frozen@h": 2.5})
    with pytest.raises(ClusterError) as info:
        await store_on(link).done("q", b"u" * 16)
    detail = info.value.detail
    assert "lmq_lib:done failed on every Erlang LMQ peer" in detail, detail
    assert "stalling@h stalled" in detail and "silent@h did not answer" in detail, detail
    assert "frozen@h (silent 2.5 s)" in detail, "the peers left out as stalled are named too"


async def test_with_every_peer_stalled_nothing_is_called_and_the_503_names_them() -> None:
    link = FakeLink([], stalled={"frozen@h": 4.0})
    with pytest.raises(ClusterError) as info:
        await store_on(link).enqueue("q", make_item(b"x"), 2, 0.0)
    assert link.calls == []
    assert "not run" in info.value.detail and "frozen@h (silent 4.0 s)" in info.value.detail


async def test_an_enqueue_refused_unsent_by_a_peer_that_just_stalled_goes_to_the_next_peer() -> None:
    link = FakeLink(["frozen@h", "answers@h"])
    assert await store_on(link).enqueue("q", make_item(b"x"), 2, 0.0) == "no"
    assert [p for p, _, _ in link.calls] == ["frozen@h", "answers@h"]


async def test_a_peer_that_let_a_call_time_out_is_tried_last_for_a_while() -> None:
    link = FakeLink(["silent@h", "answers@h"])
    clock = ManualClock(1000.0)
    store = store_on(link, clock)
    for _ in range(3):  # the link's order for the queue starts with silent@h every time
        assert await store.dequeue("q", 30) is None
    assert [p for p, _, _ in link.calls] == ["silent@h", "answers@h", "answers@h", "answers@h"]
    clock.advance(SUSPECT_FOR + 1)
    link.calls.clear()
    assert await store.dequeue("q", 30) is None
    assert next(p for p, _, _ in link.calls) == "silent@h", "no longer suspect: first in the link's order again"
