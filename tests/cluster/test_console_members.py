"""The console's cluster view of a node in a mixed cluster, over real HTTP, with a fake
distribution node: who is Erlang or Python, who is stalled (and for how long), the mode."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, cast

import aiohttp
import pytest

from pylmq.cluster import Cluster
from pylmq.cluster.mnesia_store import CLUSTER, MnesiaStore
from pylmq.erlang import Node
from pylmq.node import LMQNode, NodeOptions
from pylmq.store.memory import MemoryStore
from tests.api.api_helpers import Api, base_url

ME = "py1@127.0.0.1"


@dataclass
class FakeDist:
    """What a Cluster asks of its distribution node, and nothing connects anywhere."""

    name: str = ME
    silent: dict[str, float] = field(default_factory=dict)  # stalled peers -> seconds

    def spawn(self, name: str, handler: Callable[..., Any]) -> object:
        return object()

    def register_function(self, module: str, function: str, fn: Callable[..., Any]) -> None:
        pass

    def monitor_node(self, node: str, callback: Callable[..., Any]) -> Callable[[], None]:
        return lambda: None

    def monitor_stalls(self, callback: Callable[[str, bool], None]) -> Callable[[], None]:
        return lambda: None

    def stalled_nodes(self) -> dict[str, float]:
        return dict(self.silent)


@dataclass
class Joined:
    node: LMQNode
    cluster: Cluster
    dist: FakeDist
    api: Api


@pytest.fixture
async def joined() -> AsyncIterator[Joined]:
    store = MnesiaStore(MemoryStore())
    node = LMQNode(NodeOptions(http=("127.0.0.1", 0), rpc=None, node_name=ME), store=store)
    await node.start()
    dist = FakeDist()
    cluster = Cluster(cast(Node, dist), store, node.manager)
    node.show_cluster(cluster)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
            yield Joined(node, cluster, dist, Api(session, base_url(node)))
    finally:
        await cluster.close()
        await node.stop()


async def cluster_doc(api: Api) -> dict[str, Any]:
    r = await api.request("GET", "/console/api/overview")
    assert r.status == 200, r
    doc: dict[str, Any] = r.json()["cluster"]
    return doc


async def test_a_named_node_not_joined_is_alone_in_local_mode(joined: Joined) -> None:
    assert await cluster_doc(joined.api) == {
        "node": ME, "runtime": "python", "store": "memory", "mode": "local", "mode_detail": None,
        "nodes": [{"name": ME, "runtime": "python", "self": True, "state": "active", "silent_for": None}],
    }  # fmt: skip


async def test_a_mixed_cluster_with_a_stalled_peer(joined: Joined) -> None:
    c = joined.cluster
    c.store.mode = CLUSTER
    c.store.kind = "mnesia"
    c.db_nodes = {"lmq1@127.0.0.1", "lmq2@127.0.0.1", "lmq3@127.0.0.1"}
    c.running = ["lmq1@127.0.0.1", "lmq2@127.0.0.1"]  # lmq3 is down
    c.python_nodes = {"py2@127.0.0.1": True}
    joined.dist.silent = {"lmq2@127.0.0.1": 4.237, "elsewhere@x": 9.0}  # not a member: not listed
    doc = await cluster_doc(joined.api)
    assert (doc["node"], doc["store"], doc["mode"], doc["mode_detail"]) == (ME, "mnesia", "cluster", None)
    assert doc["nodes"] == [
        {"name": "lmq1@127.0.0.1", "runtime": "erlang", "self": False, "state": "active", "silent_for": None},
        {"name": "lmq2@127.0.0.1", "runtime": "erlang", "self": False, "state": "stalled", "silent_for": 4.2},
        {"name": "lmq3@127.0.0.1", "runtime": "erlang", "self": False, "state": "inactive", "silent_for": None},
        {"name": ME, "runtime": "python", "self": True, "state": "active", "silent_for": None},
        {"name": "py2@127.0.0.1", "runtime": "python", "self": False, "state": "active", "silent_for": None},
    ]
    # The page hides what a node serving Mnesia's tables refuses.
    r = await joined.api.request("GET", "/console/api/session")
    assert r.json()["features"] == {"dead_letters": False, "push_options": False, "purge": True}
    # The stalled node speaks again: active once more.
    joined.dist.silent = {}
    states = {n["name"]: n["state"] for n in (await cluster_doc(joined.api))["nodes"]}
    assert states["lmq2@127.0.0.1"] == "active"


async def test_a_python_peer_not_connected_is_inactive_and_the_mode_detail_shows(joined: Joined) -> None:
    c = joined.cluster
    c.python_nodes = {"py2@127.0.0.1": False}
    c.mode_detail = "chosen by the operator while the cluster of lmq1@127.0.0.1 was unreachable"
    c.store.mode = "standalone"
    doc = await cluster_doc(joined.api)
    assert (doc["mode"], doc["mode_detail"]) == ("standalone", c.mode_detail)
    assert [(n["name"], n["runtime"], n["state"]) for n in doc["nodes"]] == [
        (ME, "python", "active"),
        ("py2@127.0.0.1", "python", "inactive"),
    ]


async def test_without_the_cluster_the_node_is_alone_again(joined: Joined) -> None:
    joined.node.show_cluster(None)
    doc = await cluster_doc(joined.api)
    assert (doc["mode"], [n["name"] for n in doc["nodes"]]) == (None, [ME])
