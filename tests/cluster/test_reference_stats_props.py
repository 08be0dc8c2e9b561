"""pylmq's /stats and its refusal of props the Erlang nodes cannot serve, with real LMQ nodes
(the reference kit).

- pylmq's ``GET /stats`` in the cluster lists the nodes an Erlang node's own /stats lists: the
  Mnesia db nodes (all), the running ones (active, and per queue), and follows a node that stops.
- In the cluster, props an Erlang node cannot serve (retry "infinity", integers jsonx cannot
  encode) are refused over HTTP and MessagePack-RPC with 400 / ``invalid_props`` naming the
  field, and nothing of them reaches Mnesia: the Erlang nodes keep answering pulls with 200.
- A join that would write such props is refused, writing nothing; messages pushed with retry
  infinity go in with the largest retry an Erlang node can serve.

Skipped with the reason where the kit or OTP 25 is missing (see lmq_reference.py).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pylmq.client import HttpClient, RpcClient
from pylmq.erlang import Atom, start_node
from pylmq.erlang.terms import Term
from pylmq.errors import InvalidProps
from tests.cluster.cluster_helpers import PyNode
from tests.cluster.lmq_reference import RefCluster, RefNode, http, reference_cluster, wait_for

pytestmark = [pytest.mark.erl, pytest.mark.slow]

INT64_MAX = 2**63 - 1


@pytest.fixture
def queue() -> str:
    return "sq_" + secrets.token_hex(4)


def stats(url: str) -> dict[str, Any]:
    status, body = http("GET", url + "/stats")
    assert status == 200, f"GET {url}/stats: expected 200, got {status} {body[:300]!r}"
    doc: dict[str, Any] = json.loads(body)
    return doc


def node_lists(doc: dict[str, Any], queue: str) -> tuple[list[str], list[str], list[str]]:
    """active_nodes, all_nodes and the queue's nodes; the latter sorted, as Erlang nodes list a
    table's writers in an order of their own (their own name first)."""
    return doc["active_nodes"], doc["all_nodes"], sorted(doc["queues"][queue]["nodes"])


def call_pylmq(cookie: str, py: PyNode, function: str, *args: Term) -> Term:
    """lmq_console:function(args) on the pylmq node, from a hidden node of the test's own."""

    async def run() -> Term:
        node = await start_node(f"driver_{secrets.token_hex(4)}@127.0.0.1", cookie)
        try:
            return await node.rpc(py.name, "lmq_console", function, list(args), 60.0)
        finally:
            await node.stop()

    return asyncio.run(run())


def assert_erlang_serves_pulls(ref: RefCluster, queue: str) -> None:
    """A push through pylmq is pulled with 200 on every Erlang node (no retry infinity stored)."""
    py = HttpClient(ref.py[0].url, request_timeout=30)
    for node in ref.erl:
        py.push(queue, b"probe", "text/plain")
        status, body = http("GET", f"{node.url}/messages/{queue}?t=5")
        assert status == 200 and body == b"probe", f"pull on {node.name}: expected 200 probe, got {status} {body!r}"


def assert_not_in_mnesia(node: RefNode, queue: str) -> None:
    assert node.eval(f"lmq_lib:queue_info('{queue}')") == "not_found", f"{queue} reached Mnesia"


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


# -- props the Erlang nodes cannot serve -------------------------------------------------------------


def patch(url: str, queue: str, props: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, body = http("PATCH", f"{url}/properties/{queue}", json.dumps(props).encode(), "application/json")
    return status, json.loads(body) if body else {}


def test_patch_of_retry_infinity_on_a_new_queue_is_refused_and_creates_nothing(ref: RefCluster, queue: str) -> None:
    status, doc = patch(ref.py[0].url, queue, {"retry": "infinity"})
    assert (status, doc.get("error")) == (400, "invalid_props"), (status, doc)
    assert 'retry "infinity"' in doc["detail"] and "Erlang" in doc["detail"], doc
    for node in ref.erl:
        assert_not_in_mnesia(node, queue)
    assert queue not in stats(ref.py[0].url)["queues"]


def test_patch_of_retry_infinity_on_a_queue_leaves_its_props_and_the_erlang_pulls_work(
    ref: RefCluster, queue: str
) -> None:
    py = ref.py[0]
    assert patch(py.url, queue, {"retry": 3})[0] == 204
    status, doc = patch(py.url, queue, {"retry": "infinity", "timeout": 5})
    assert (status, doc.get("error")) == (400, "invalid_props"), (status, doc)
    for node in ref.erl:
        assert node.eval(f"lmq_lib:queue_info('{queue}')") == "[{retry,3}]"
    assert_erlang_serves_pulls(ref, queue)


@pytest.mark.parametrize(
    ("props", "field"),
    [({"retry": INT64_MAX + 1}, "retry"), ({"timeout": 1e19}, "timeout"), ({"accum": 1e16}, "accum")],
)
def test_integers_jsonx_cannot_encode_are_refused(
    ref: RefCluster, queue: str, props: dict[str, Any], field: str
) -> None:
    status, doc = patch(ref.py[0].url, queue, props)
    assert (status, doc.get("error")) == (400, "invalid_props"), (status, doc)
    assert field in doc["detail"], doc
    assert_not_in_mnesia(ref.erl[0], queue)


def test_default_props_with_retry_infinity_are_refused_and_the_erlang_pulls_work(ref: RefCluster, queue: str) -> None:
    body = json.dumps([["^sq_", {"retry": "infinity"}]]).encode()
    status, raw = http("PUT", ref.py[0].url + "/properties", body, "application/json")
    doc = json.loads(raw)
    assert (status, doc.get("error")) == (400, "invalid_props"), (status, doc)
    assert "^sq_" in doc["detail"] and 'retry "infinity"' in doc["detail"], doc
    for node in ref.erl:
        assert http("GET", node.url + "/properties") == (200, b"[]"), node.name
    assert_erlang_serves_pulls(ref, queue)


def test_rpc_update_props_and_set_default_props_refuse_retry_infinity(ref: RefCluster, queue: str) -> None:
    with RpcClient("127.0.0.1", ref.py[0].rpc_port, request_timeout=30) as rpc:
        with pytest.raises(InvalidProps, match='retry "infinity"'):
            rpc.update_props(queue, {"retry": "infinity"})
        with pytest.raises(InvalidProps, match='retry "infinity"'):
            rpc.set_default_props([("^sq_", {"retry": "infinity"})])
    for node in ref.erl:
        assert_not_in_mnesia(node, queue)
        assert http("GET", node.url + "/properties") == (200, b"[]"), node.name


# -- join write-back -----------------------------------------------------------------------------------


def test_a_join_that_would_write_retry_infinity_is_refused_and_messages_keep_their_retries(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=1, pylmq=0) as cluster, open(tmp_path / "alone.log", "ab") as log:
        lmq1 = cluster.erl[0]
        py = PyNode("pylmq_alone", cluster.cookie, tmp_path / "alone", log, None)
        try:
            py.wait_ready()
            name = "sq_" + secrets.token_hex(4)
            client = HttpClient(py.url, request_timeout=30)
            client.update_props(name, {"retry": "infinity"})  # served alone: allowed
            client.push(name, b"forever", "text/plain")

            answer = call_pylmq(cluster.cookie, py, "join", Atom(lmq1.name))
            assert isinstance(answer, tuple) and answer[0] == Atom("error"), answer
            detail = answer[1].decode() if isinstance(answer[1], bytes) else str(answer[1])
            assert name in detail and 'retry "infinity"' in detail, detail
            assert_not_in_mnesia(lmq1, name)

            client.update_props(name, {"retry": 4})
            assert call_pylmq(cluster.cookie, py, "join", Atom(lmq1.name)) == Atom("ok")
            req = urllib.request.Request(f"{lmq1.url}/messages/{name}?t=5")
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert (resp.status, resp.read()) == (200, b"forever")
                assert resp.headers["x-lmq-retry-remaining"] == str(INT64_MAX - 1)
            assert lmq1.eval(f"lmq_lib:queue_info('{name}')") == "[{retry,4}]"
        finally:
            py.stop()
