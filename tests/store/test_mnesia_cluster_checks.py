"""The Mnesia store in the cluster, without Erlang nodes (a recording PeerLink): props the Erlang
nodes cannot serve are refused before any call reaches a peer, and /stats takes the cluster's
node lists from the store. The same behaviour against real LMQ nodes is in
tests/cluster/test_reference_stats_props.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pylmq.api.http import stats_body, stats_document
from pylmq.cluster.mnesia_store import ERLANG_INT_MAX, MnesiaStore, erlang_props_problem
from pylmq.core.manager import QueueManager
from pylmq.erlang.terms import Atom, Term
from pylmq.errors import InvalidProps
from pylmq.store.memory import MemoryStore
from tests.store.store_helpers import QuietLink


class RecordingLink(QuietLink):
    """A PeerLink whose one Erlang peer answers every lmq_lib call as LMQ would for a new queue."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def peers(self) -> list[str]:
        return ["erl1@h"]

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        self.calls.append((module, function))
        return Atom("not_found") if function == "queue_info" else Atom("ok")

    def node_lists(self) -> tuple[list[str], list[str]]:
        return ["erl1@h", "erl2@h"], ["erl1@h"]


async def clustered() -> tuple[QueueManager, MnesiaStore, RecordingLink]:
    store = MnesiaStore(MemoryStore())
    manager = QueueManager(store)
    await manager.start()
    link = RecordingLink()
    store.become_cluster(link)
    return manager, store, link


@pytest.mark.parametrize(
    "props",
    [
        {"retry": ERLANG_INT_MAX, "timeout": float(2**62), "accum": ERLANG_INT_MAX // 1000 / 1000},
        {"retry": 0, "timeout": 0.25, "accum": 0.5},
        {},
    ],
)
def test_props_an_erlang_node_serves_pass(props: dict[str, Any]) -> None:
    assert erlang_props_problem(props) is None


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({"retry": None}, 'retry "infinity"'),
        ({"retry": ERLANG_INT_MAX + 1}, "retry"),
        ({"timeout": float(2**63)}, "timeout"),
        ({"accum": (ERLANG_INT_MAX + 1000) / 1000}, "accum"),
    ],
)
def test_props_an_erlang_node_cannot_serve_are_named(props: dict[str, Any], field: str) -> None:
    problem = erlang_props_problem(props)
    assert problem is not None and problem.startswith(field), problem


async def test_update_props_with_retry_infinity_in_the_cluster_calls_no_peer() -> None:
    manager, _, link = await clustered()
    with pytest.raises(InvalidProps, match='retry "infinity" cannot be served by the Erlang LMQ nodes'):
        await manager.update_props("q", {"retry": None})
    assert link.calls == [] and manager.queue_names() == []


async def test_default_props_with_retry_infinity_in_the_cluster_call_no_peer() -> None:
    manager, _, link = await clustered()
    with pytest.raises(InvalidProps, match=r"default props of '\^q'.*retry \"infinity\""):
        await manager.set_default_props([("^q", {"retry": 3}), ("^q", {"retry": None})])
    assert link.calls == []


async def test_retry_infinity_is_kept_while_the_store_serves_alone() -> None:
    store = MnesiaStore(MemoryStore())
    manager = QueueManager(store)
    await manager.start()
    props = await manager.update_props("q", {"retry": None})
    assert props.retry is None


async def test_stats_in_the_cluster_list_the_clusters_nodes() -> None:
    manager, _, _ = await clustered()
    await manager.update_props("q", {"retry": 3})
    doc = stats_document(manager, None, "pylmq@h")
    assert (doc["all_nodes"], doc["active_nodes"]) == (["erl1@h", "erl2@h"], ["erl1@h"]), doc
    assert doc["queues"]["q"]["nodes"] == ["erl1@h"], doc
    # The body GET /stats sends, built in steps, lists the same nodes.
    assert json.loads(await stats_body(manager, None, "pylmq@h")) == doc
