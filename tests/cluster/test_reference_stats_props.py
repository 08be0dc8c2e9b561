"""pylmq's /stats with real LMQ nodes (the reference kit).

pylmq's ``GET /stats`` in the cluster lists the nodes an Erlang node's own /stats lists: the
Mnesia db nodes (all), the running ones (active, and per queue), and follows a node that stops.

Skipped with the reason where the kit or OTP 25 is missing (see lmq_reference.py).
"""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lmq_reference import RefCluster, reference_cluster, wait_for

from pylmq.client import HttpClient

pytestmark = [pytest.mark.erl, pytest.mark.slow]


@pytest.fixture(scope="module")
def ref(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RefCluster]:
    with reference_cluster(tmp_path_factory.mktemp("reference"), erlang=2, pylmq=1) as cluster:
        yield cluster


@pytest.fixture
def queue() -> str:
    return "sq_" + secrets.token_hex(4)


def http(method: str, url: str, body: bytes | None = None, ctype: str = "application/json") -> tuple[int, bytes]:
    headers = {"content-type": ctype} if body is not None else {}
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def stats(url: str) -> dict[str, Any]:
    status, body = http("GET", url + "/stats")
    assert status == 200, f"GET {url}/stats: expected 200, got {status} {body[:300]!r}"
    doc: dict[str, Any] = json.loads(body)
    return doc


def node_lists(doc: dict[str, Any], queue: str) -> tuple[list[str], list[str], list[str]]:
    """active_nodes, all_nodes and the queue's nodes; the latter sorted, as Erlang nodes list a
    table's writers in an order of their own (their own name first)."""
    return doc["active_nodes"], doc["all_nodes"], sorted(doc["queues"][queue]["nodes"])


# -- /stats ----------------------------------------------------------------------------------------


def test_pylmq_stats_list_the_nodes_the_erlang_nodes_stats_list(ref: RefCluster, queue: str) -> None:
    HttpClient(ref.py[0].url, request_timeout=30).push(queue, b"x", "text/plain")
    erlang = sorted(n.name for n in ref.erl)
    mine = node_lists(stats(ref.py[0].url), queue)
    for node in ref.erl:
        theirs = node_lists(stats(node.url), queue)
        assert mine == theirs, f"pylmq's /stats lists {mine}, {node.name}'s lists {theirs}"
    assert mine == (erlang, erlang, erlang), mine


def test_pylmq_stats_drop_a_stopped_erlang_node_within_seconds(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=2, pylmq=1) as cluster:
        lmq1, lmq2 = cluster.erl
        name = "sq_" + secrets.token_hex(4)
        HttpClient(cluster.py[0].url, request_timeout=30).push(name, b"x", "text/plain")
        lmq2.stop()
        expected = node_lists(stats(lmq1.url), name)
        assert expected == ([lmq1.name], sorted([lmq1.name, lmq2.name]), [lmq1.name]), expected
        got = wait_for(lambda: node_lists(stats(cluster.py[0].url), name), lambda x: x == expected, 5)
        assert got == expected, f"5 s after {lmq2.name} stopped, pylmq's /stats still lists {got}"
