"""The mnesia store's transactions on a queue: each goes to the queue's runner (PeerLink.run) on
the peers in the link's order for that queue, and is failed over by the store's rules when the
runner or its peer is lost. Against a scripted peer link, no Erlang node needed; the runners
themselves run against real LMQ nodes in tests/cluster/test_reference_runners.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from pylmq.cluster.mnesia_store import RUNNER_HELD, MnesiaStore
from pylmq.core.message import PushOptions, make_item
from pylmq.erlang.terms import Atom, Term
from pylmq.errors import ClusterError, NodeDown, NotRun, PeerStalled, RunnerLost
from pylmq.store.memory import MemoryStore
from tests.store.store_helpers import QuietLink

A = Atom
OK, EMPTY, NOT_FOUND = A("ok"), A("empty"), A("not_found")


@dataclass
class Sent:
    queue: str | None  # None: a plain rpc, else run by that queue's runner
    peer: str
    module: str
    function: str
    args: list[Term]
    timeout: float
    answer: asyncio.Future[Term] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class ScriptedLink(QuietLink):
    """A PeerLink whose rpcs and runner calls wait until the test answers them; it records them all."""

    def __init__(self, peers: tuple[str, ...] = ("lmq1@h", "lmq2@h"), stalled: dict[str, float] | None = None) -> None:
        self._peers = list(peers)
        self._stalled = stalled or {}
        self.sent: list[Sent] = []
        self.in_flight: list[Sent] = []
        self.most_in_flight = 0
        self.runner_waited = 0.0  # what runner_wait answers

    def runner_wait(self, queue: str) -> float:
        return self.runner_waited

    def peers(self) -> list[str]:
        return list(self._peers)

    def stalled(self) -> dict[str, float]:
        return dict(self._stalled)

    def queue_peers(self, queue: str) -> list[str]:
        return list(reversed(self._peers))  # not peers(): the store must take this order

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        return await self._sent(None, peer, module, function, args, timeout)

    async def run(self, queue: str, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        return await self._sent(queue, peer, module, function, args, timeout)

    async def _sent(
        self, queue: str | None, peer: str, module: str, function: str, args: list[Term], timeout: float
    ) -> Term:
        s = Sent(queue, peer, module, function, args, timeout)
        self.sent.append(s)
        self.in_flight.append(s)
        self.most_in_flight = max(self.most_in_flight, len(self.in_flight))
        try:
            return await s.answer
        finally:
            self.in_flight.remove(s)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.fixture
async def store() -> MnesiaStore:
    s = MnesiaStore(MemoryStore())
    await s.open()
    return s


def joined(store: MnesiaStore, link: ScriptedLink | None = None) -> ScriptedLink:
    link = link or ScriptedLink()
    store.become_cluster(link)
    return link


async def answered(link: ScriptedLink, task: asyncio.Task[object], answer: Term) -> object:
    await settle()
    link.in_flight[-1].answer.set_result(answer)
    return await task


async def test_a_queues_transactions_and_delayed_writes_go_to_its_runner(
    store: MnesiaStore,
) -> None:
    link = joined(store)
    store.mirror.queue_props["q"] = {}
    item = make_item(b"body")
    loop = asyncio.get_running_loop()
    await answered(link, loop.create_task(store.enqueue("q", item, 2, 0.0)), OK)
    await answered(link, loop.create_task(store.push("q", item, 2, PushOptions(not_before=1e12))), (A("atomic"), OK))
    await answered(link, loop.create_task(store.dequeue("q", 30)), EMPTY)
    for op in (store.done("q", b"u"), store.retain("q", b"u", 5), store.release("q", b"u"), store.put_back("q", b"u")):
        assert await answered(link, loop.create_task(op), OK) is True
    got = [(s.queue, s.module, s.function) for s in link.sent]
    # The delayed write too: an rpc's write would count as another node's (its coordinator is a
    # process this node does not know).
    assert got[:2] == [("q", "lmq_lib", "enqueue"), ("q", "mnesia", "transaction")]
    table = ["dequeue", "done", "retain", "release", "put_back"]
    assert got[2:] == [("q", "lmq_lib", f) for f in table]
    assert {s.peer for s in link.sent} == {"lmq2@h"}, "expected the first peer of the link's order for q"
    await answered(link, loop.create_task(store.create("other")), [])  # queue_info: it exists
    assert link.sent[-1].queue is None, "expected a call on no queue's table to be a plain rpc"


async def test_many_calls_on_one_queue_are_all_in_flight_to_its_runner_at_once(store: MnesiaStore) -> None:
    link = joined(store)
    acks = [asyncio.create_task(store.done("q", f"u{i}".encode())) for i in range(20)]
    await settle()
    assert len(link.in_flight) == 20, "expected the store not to hold a queue's calls back (the runner orders them)"
    assert [s.args[1] for s in link.sent] == [f"u{i}".encode() for i in range(20)], "expected them sent in order"
    for s in link.sent:
        s.answer.set_result(OK)
    assert await asyncio.gather(*acks) == [True] * 20


async def test_a_settle_whose_runner_was_lost_is_retried_on_another_peer_and_not_found_counts_as_done(
    store: MnesiaStore,
) -> None:
    link = joined(store)
    ack = asyncio.create_task(store.done("q", b"u1"))
    await settle()
    lost = link.sent[0]
    lost.answer.set_exception(RunnerLost(f"the queue runner of q on {lost.peer} exited: killed"))
    await settle()
    retry = link.sent[1]
    assert retry.peer != lost.peer and retry.args == lost.args and retry.queue == "q"
    retry.answer.set_result(NOT_FOUND)
    assert await ack is True, "expected not_found after a lost attempt to count as done"


async def test_a_queue_call_is_bounded_failed_over_and_its_503_names_the_operation_and_every_peer() -> None:
    store = MnesiaStore(MemoryStore(), rpc_timeout=0.25)
    await store.open()
    link = joined(store, ScriptedLink(("lmq1@h", "lmq2@h", "lmq3@h"), stalled={"lmq4@h": 3.0}))
    pull = asyncio.create_task(store.dequeue("q", 30))
    await settle()
    # Stalled before it went out: nothing happened there, the next peer gets the call.
    link.sent[0].answer.set_exception(PeerStalled(f"node {link.sent[0].peer} is stalled", sent=False))
    await settle()
    link.sent[1].answer.set_exception(PeerStalled(f"node {link.sent[1].peer} is stalled"))
    await settle()
    link.sent[2].answer.set_exception(NodeDown(f"node {link.sent[2].peer} went down"))
    with pytest.raises(ClusterError) as e:
        await pull
    sent = link.sent
    assert [s.peer for s in sent] == ["lmq3@h", "lmq2@h", "lmq1@h"] and {s.timeout for s in sent} == {0.25}
    detail = e.value.detail
    assert detail.startswith("lmq_lib:dequeue failed on every Erlang LMQ peer"), detail
    assert "peer lmq3@h stalled before the call was sent" in detail, detail
    assert "peer lmq2@h stalled" in detail and "peer lmq1@h went down" in detail, detail
    assert "lmq4@h (silent 3.0 s)" in detail, "expected the peers left out as stalled named too"


async def test_an_enqueue_or_a_push_with_options_does_not_queue_behind_a_held_up_runner(store: MnesiaStore) -> None:
    link = joined(store)
    store.mirror.queue_props["q"] = {}
    loop = asyncio.get_running_loop()
    link.runner_waited = RUNNER_HELD - 0.01
    await answered(link, loop.create_task(store.enqueue("q", make_item(b"a"), 2, 0.0)), OK)
    link.runner_waited = RUNNER_HELD  # its oldest call waits: Mnesia is restarting it
    await answered(link, loop.create_task(store.enqueue("q", make_item(b"b"), 2, 0.0)), OK)
    assert [s.queue for s in link.sent] == ["q", None], "expected the second enqueue sent as an rpc of its own"
    # A push with options takes the same lane.
    delayed = PushOptions(not_before=1e12)
    await answered(link, loop.create_task(store.push("q", make_item(b"c"), 2, delayed)), (A("atomic"), OK))
    link.runner_waited = RUNNER_HELD - 0.01
    await answered(link, loop.create_task(store.push("q", make_item(b"d"), 2, delayed)), (A("atomic"), OK))
    assert [s.queue for s in link.sent[2:]] == [None, "q"], "expected a push with options in the enqueue's lane"


async def test_a_call_its_runner_never_reached_is_sent_again_as_an_rpc_even_an_enqueue(store: MnesiaStore) -> None:
    link = joined(store)
    store.mirror.queue_props["q"] = {}
    push = asyncio.create_task(store.enqueue("q", make_item(b"a"), 2, 0.0))
    await settle()
    first = link.sent[0]
    first.answer.set_exception(NotRun(f"not run: the queue runner of q on {first.peer} ended before it"))
    await settle()
    again = link.sent[1]
    assert (again.queue, again.peer, again.function, again.args) == (None, first.peer, "enqueue", first.args)
    again.answer.set_result(OK)
    assert await push == "no", "expected the push answered: nothing was written the first time"
