"""The Mnesia store's counts (SQS's ApproximateNumberOf*): from its mirror of the cluster's
tables while it serves the cluster, on the store's clock, with no call to an Erlang node; from
its local store otherwise."""

from __future__ import annotations

from pylmq.cluster.mnesia_store import MnesiaStore
from pylmq.cluster.records import message_to_term, name_to_atom
from pylmq.core.clock import ManualClock
from pylmq.core.message import PushOptions, State, StoredMessage, StoredMessageType, make_item, new_uuid
from pylmq.core.table import QueueCounts
from pylmq.store.memory import MemoryStore
from tests.store.test_mnesia_options import NOW, ScriptedLink


def row(ts: float, state: State) -> StoredMessage:
    return StoredMessage((ts, new_uuid()), state, StoredMessageType.NORMAL, 2, make_item(b"r"))


async def test_counts_come_from_the_mirror_in_the_cluster_and_from_the_local_store_alone() -> None:
    clock = ManualClock(NOW)
    store = MnesiaStore(MemoryStore(clock), clock)
    await store.local.push("q", make_item(b"x"), 2, PushOptions(not_before=NOW + 5))
    assert store.counts("q") == QueueCounts(0, 0, 1)
    link = ScriptedLink()
    store.become_cluster(link)
    table = name_to_atom("q")
    store.mirror.begin(table)
    rows = [row(NOW - 1, State.AVAILABLE), row(NOW + 30, State.AVAILABLE), row(NOW + 60, State.PROCESSING)]
    store.mirror.load(table, [message_to_term(m) for m in rows])
    assert store.counts("q") == QueueCounts(1, 1, 1)
    clock.advance(31)  # the store's clock: the delayed row is due
    assert store.counts("q") == QueueCounts(2, 1, 0)
    assert store.counts("missing") == QueueCounts(0, 0, 0)
    assert link.calls == [], "a count called an Erlang node"
