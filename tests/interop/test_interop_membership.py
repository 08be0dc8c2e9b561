"""Peers join and leave an LMQ Mnesia cluster as `lmq-admin join` / `leave` do."""

from __future__ import annotations

import secrets

import pytest

from tests.interop.erlpeer import Cluster

pytestmark = pytest.mark.erl


def test_join_to_an_unreachable_node_is_not_reachable_and_changes_nothing(cluster: Cluster) -> None:
    nobody = f"nobody_{secrets.token_hex(4)}@127.0.0.1"
    assert cluster.b.call("join", nobody) == ("error", "not_reachable")
    assert dict(cluster.b.call("status"))["all_nodes"] == sorted([cluster.a.name, cluster.b.name])


def test_a_joining_peer_gets_the_queues_and_their_messages(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"before c")
    c = cluster.start_peer("pc")
    try:
        assert c.call("join", cluster.a.name) == "ok"
        assert c.pull_message(queue).body == b"before c"
    finally:
        c.call("leave")


def test_a_leaving_peer_is_dropped_from_the_cluster_and_starts_over_alone(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"stays")
    c = cluster.start_peer("pd")
    assert c.call("join", cluster.b.name) == "ok"
    assert c.call("leave") == "ok"
    remaining = dict(cluster.a.call("status"))["all_nodes"]
    alone = dict(c.call("status"))
    assert remaining == sorted([cluster.a.name, cluster.b.name])
    assert (alone["all_nodes"], alone["queues"]) == ([c.name], [])
    assert cluster.b.pull_message(queue).body == b"stays"
