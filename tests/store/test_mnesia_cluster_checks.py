"""The Mnesia store in the cluster, without Erlang nodes (a recording PeerLink): /stats takes the
cluster's node lists from the store. The same behaviour against real LMQ nodes is in
tests/cluster/test_reference_stats_props.py."""

from __future__ import annotations

import pylmq.cluster  # noqa: F401  (first, as the package itself loads the Mnesia store)
from pylmq.api.http import stats_document
from pylmq.core.manager import QueueManager
from pylmq.dist.terms import Atom, Term
from pylmq.store.memory import MemoryStore
from pylmq.store.mnesia import MnesiaStore


class RecordingLink:
    """A PeerLink whose one Erlang peer answers every lmq_lib call as LMQ would for a new queue."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def peers(self) -> list[str]:
        return ["erl1@h"]

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        self.calls.append((module, function))
        return Atom("not_found") if function == "queue_info" else Atom("ok")

    def pushed(self, name: str) -> None:
        return None

    async def queue_created(self, name: str, props: Term | None) -> None:
        return None

    async def queue_deleted(self, name: str) -> None:
        return None

    async def defaults_changed(self) -> None:
        return None

    def node_lists(self) -> tuple[list[str], list[str]]:
        return ["erl1@h", "erl2@h"], ["erl1@h"]


async def clustered() -> tuple[QueueManager, MnesiaStore, RecordingLink]:
    store = MnesiaStore(MemoryStore())
    manager = QueueManager(store)
    await manager.start()
    link = RecordingLink()
    store.become_cluster(link)
    return manager, store, link


async def test_stats_in_the_cluster_list_the_clusters_nodes() -> None:
    manager, _, _ = await clustered()
    await manager.update_props("q", {"retry": 3})
    doc = stats_document(manager, None, "pylmq@h")
    assert (doc["all_nodes"], doc["active_nodes"]) == (["erl1@h", "erl2@h"], ["erl1@h"]), doc
    assert doc["queues"]["q"]["nodes"] == ["erl1@h"], doc
