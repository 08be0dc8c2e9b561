"""The mnesia store's admission of one queue's transactions (pylmq.cluster.gate) and the batching
of table transactions into one rpc, against a scripted peer link: which rpcs are in flight at
the same time, and what each caller gets back. No Erlang node is needed; what Mnesia does with
concurrent transactions is explained in pylmq/cluster/gate.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import cast

import pytest

from pylmq.cluster.gate import QueueGate
from pylmq.cluster.mnesia_store import MnesiaStore
from pylmq.core.message import make_item
from pylmq.erlang.terms import Atom, Export, Term
from pylmq.errors import ClusterError, HandshakeError, NodeDown, PeerStalled
from pylmq.store.memory import MemoryStore
from tests.store.store_helpers import QuietLink

A = Atom
OK, EMPTY, NOT_FOUND = A("ok"), A("empty"), A("not_found")


@dataclass
class Sent:
    peer: str
    module: str
    function: str
    args: list[Term]
    timeout: float
    answer: asyncio.Future[Term] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class ScriptedLink(QuietLink):
    """A PeerLink whose rpcs wait until the test answers them; it records every rpc."""

    def __init__(self, peers: tuple[str, ...] = ("lmq1@h", "lmq2@h"), stalled: dict[str, float] | None = None) -> None:
        self._peers = list(peers)
        self._stalled = stalled or {}
        self.sent: list[Sent] = []
        self.in_flight: list[Sent] = []
        self.most_in_flight = 0

    def peers(self) -> list[str]:
        return list(self._peers)

    def stalled(self) -> dict[str, float]:
        return dict(self._stalled)

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        s = Sent(peer, module, function, args, timeout)
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


# ------------------------------------------------------------------ the gate


async def test_the_gate_admits_shared_holders_together_and_an_exclusive_one_alone() -> None:
    gate, log = QueueGate(), []
    release = asyncio.Event()

    async def hold(kind: str, i: int) -> None:
        async with gate.exclusive() if kind == "x" else gate.shared():
            log.append(f"+{kind}{i}")
            await release.wait()
            log.append(f"-{kind}{i}")

    tasks = [asyncio.create_task(hold(k, i)) for i, k in enumerate("ssxs")]
    await settle()
    assert log == ["+s0", "+s1"], f"expected the two first shared holders in together, got {log}"
    release.set()
    await asyncio.gather(*tasks)
    # The exclusive one came third: it runs alone, and the shared one after it waits for it.
    assert log[2:] == ["-s0", "-s1", "+x2", "-x2", "+s3", "-s3"], log


async def test_the_gate_lets_every_waiting_shared_holder_in_after_an_exclusive_one_before_the_next() -> None:
    gate, log = QueueGate(), []
    steps = {name: asyncio.Event() for name in ("x0", "x1", "s0", "s1", "x2")}

    async def hold(name: str) -> None:
        async with gate.exclusive() if name.startswith("x") else gate.shared():
            log.append(name)
            await steps[name].wait()

    tasks = []
    for name in ("x0", "x1", "s0", "x2", "s1"):
        tasks.append(asyncio.create_task(hold(name)))
        await settle()
    assert log == ["x0"]
    steps["x0"].set()
    await settle()
    assert log == ["x0", "s0", "s1"], f"expected both waiting shared holders in before x1, got {log}"
    steps["s0"].set()
    steps["s1"].set()
    await settle()
    assert log == ["x0", "s0", "s1", "x1"]
    steps["x1"].set()
    steps["x2"].set()
    await asyncio.gather(*tasks)
    assert log[-1] == "x2"


async def test_a_waiter_that_gives_up_does_not_keep_the_gate_shut() -> None:
    gate = QueueGate()
    release = asyncio.Event()

    async def hold() -> None:
        async with gate.exclusive():
            await release.wait()

    holder = asyncio.create_task(hold())
    await settle()
    quitter = asyncio.create_task(hold())
    await settle()
    quitter.cancel()
    await settle()
    release.set()
    await holder
    assert gate.idle, "expected the gate free once its holder left and its waiter gave up"
    async with asyncio.timeout(5):
        async with gate.exclusive():
            pass


# ------------------------------------------------------------------ the store


async def test_table_transactions_of_one_queue_never_run_at_once_and_waiting_ones_share_one_rpc(
    store: MnesiaStore,
) -> None:
    link = joined(store)
    first = asyncio.create_task(store.done("q", b"u1"))
    await settle()
    assert [(s.module, s.function) for s in link.sent] == [("lmq_lib", "done")]
    more = [
        asyncio.create_task(store.dequeue("q", 30)),
        asyncio.create_task(store.retain("q", b"u2", 60)),
        asyncio.create_task(store.done("q", b"u3")),
    ]
    await settle()
    assert len(link.sent) == 1, "expected the others to wait while a transaction on the queue runs"
    link.sent[0].answer.set_result(OK)
    await settle()
    assert await first is True
    batch = link.sent[1]
    q = A("q")
    assert (batch.module, batch.function) == ("lists", "zipwith3")
    assert batch.args == [
        Export(A("erlang"), A("apply"), 3),
        [A("lmq_lib")] * 3,
        [A("dequeue"), A("retain"), A("done")],
        [[q, 30], [q, b"u2", 60], [q, b"u3"]],
    ]
    batch.answer.set_result([EMPTY, OK, NOT_FOUND])
    got = await asyncio.gather(*more)
    assert got == [None, True, False], f"expected each caller its own result, got {got}"
    assert link.most_in_flight == 1


async def test_enqueues_run_together_but_never_beside_a_table_transaction_of_their_queue(
    store: MnesiaStore,
) -> None:
    link = joined(store)
    store.mirror.queue_props["q"] = {}
    item = make_item(b"body")
    pushes = [asyncio.create_task(store.enqueue("q", item, 2, 0.0)) for _ in range(3)]
    await settle()
    assert [s.function for s in link.sent] == ["enqueue"] * 3, "expected the enqueues sent together"
    ack = asyncio.create_task(store.done("q", b"u1"))
    await settle()
    late_push = asyncio.create_task(store.enqueue("q", item, 2, 0.0))
    await settle()
    assert len(link.sent) == 3, "expected the ack to wait for the enqueues, and a later enqueue for the ack"
    for s in link.sent:
        s.answer.set_result(OK)
    await settle()
    assert [s.function for s in link.sent[3:]] == ["done"]
    link.sent[3].answer.set_result(OK)
    await settle()
    assert [s.function for s in link.sent[4:]] == ["enqueue"]
    link.sent[4].answer.set_result(OK)
    assert await asyncio.gather(*pushes, late_push) == ["no"] * 4
    assert await ack is True


async def test_table_transactions_of_different_queues_run_side_by_side(store: MnesiaStore) -> None:
    link = joined(store)
    acks = [asyncio.create_task(store.done(q, b"u")) for q in ("q1", "q2", "q3")]
    await settle()
    assert len(link.in_flight) == 3
    for s in link.sent:
        s.answer.set_result(OK)
    assert await asyncio.gather(*acks) == [True] * 3
    assert not store._gates and not store._table_calls, "expected nothing kept for queues gone idle"


async def test_a_batch_whose_peer_goes_away_is_retried_on_another_peer_and_not_found_counts_as_done(
    store: MnesiaStore,
) -> None:
    link = joined(store)
    first = asyncio.create_task(store.done("q", b"u1"))
    await settle()
    waiting = [asyncio.create_task(store.done("q", b"u2")), asyncio.create_task(store.dequeue("q", 30))]
    await settle()
    link.sent[0].answer.set_result(OK)
    await settle()
    lost = link.sent[1]
    lost.answer.set_exception(NodeDown(f"{lost.peer} went down"))
    await settle()
    retry = link.sent[2]
    assert retry.peer != lost.peer and retry.args == lost.args, "expected the same batch on the other peer"
    retry.answer.set_result([NOT_FOUND, EMPTY])
    assert await first is True
    assert await asyncio.gather(*waiting) == [True, None]


async def test_a_batch_is_bounded_failed_over_and_refused_as_one_call_with_a_503_naming_its_calls() -> None:
    store = MnesiaStore(MemoryStore(), rpc_timeout=0.25)
    await store.open()
    link = joined(store, ScriptedLink(("lmq1@h", "lmq2@h", "lmq3@h"), stalled={"lmq4@h": 3.0}))
    first = asyncio.create_task(store.done("q", b"u1"))
    await settle()
    waiting = [asyncio.create_task(store.dequeue("q", 30)), asyncio.create_task(store.done("q", b"u2"))]
    await settle()
    link.sent[0].answer.set_result(OK)
    await settle()
    assert await first is True
    # Stalled before it went out: nothing happened there, the next peer gets the batch.
    link.sent[1].answer.set_exception(PeerStalled(f"node {link.sent[1].peer} is stalled", sent=False))
    await settle()
    link.sent[2].answer.set_exception(PeerStalled(f"node {link.sent[2].peer} is stalled"))
    await settle()
    link.sent[3].answer.set_exception(NodeDown(f"node {link.sent[3].peer} went down"))
    await settle()
    batches = link.sent[1:]
    assert [s.function for s in batches] == ["zipwith3"] * 3 and {s.timeout for s in link.sent} == {0.25}
    assert len({s.peer for s in batches}) == 3, "expected the batch tried once on each peer"
    results = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(r, ClusterError) for r in results), results
    detail = cast(ClusterError, results[0]).detail
    expected = "lmq_lib:dequeue, lmq_lib:done (2 calls in one rpc) failed on every Erlang LMQ peer"
    assert detail.startswith(expected), detail
    assert f"peer {batches[0].peer} stalled before the call was sent" in detail, detail
    assert f"peer {batches[1].peer} stalled" in detail and f"peer {batches[2].peer} went down" in detail, detail
    assert "lmq4@h (silent 3.0 s)" in detail, "expected the peers left out as stalled named too"


async def test_a_batch_failing_with_an_error_other_than_a_cluster_error_gives_it_to_its_callers(
    store: MnesiaStore,
) -> None:
    link = joined(store)
    first = asyncio.create_task(store.done("q", b"u1"))
    await settle()
    waiting = [asyncio.create_task(store.done("q", b"u2")), asyncio.create_task(store.dequeue("q", 30))]
    await settle()
    link.sent[0].answer.set_exception(HandshakeError("lmq1@h refused the handshake"))
    async with asyncio.timeout(5):  # the callers must not wait for ever
        alone = await asyncio.gather(first, return_exceptions=True)
        assert isinstance(alone[0], HandshakeError), f"expected the error, got {alone}"
        await settle()
        link.sent[1].answer.set_exception(HandshakeError("refused again"))
        batch = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(r, HandshakeError) for r in batch), f"expected the error, got {batch}"
    assert not store._table_runners and not store._table_calls


async def test_closing_the_store_cancels_the_calls_of_a_batch_in_flight_too(store: MnesiaStore) -> None:
    link = joined(store)
    first = asyncio.create_task(store.done("q", b"u1"))
    await settle()
    waiting = asyncio.create_task(store.done("q", b"u2"))
    await settle()
    assert len(link.in_flight) == 1
    await store.close()
    async with asyncio.timeout(5):
        results = await asyncio.gather(first, waiting, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results), results
