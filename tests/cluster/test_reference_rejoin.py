"""Write-back at rejoin with real Erlang LMQ nodes (the reference kit): the queues a pylmq node
puts back into a restarted cluster are served by every Erlang node, as if created there.

Its own cluster (two real LMQ nodes, one pylmq node), since the test stops the Erlang nodes.
Skipped with the reason where the kit or OTP 25 is missing (see lmq_reference.py).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import urllib.request
from pathlib import Path

import pytest

from pylmq.client import HttpClient
from pylmq.erlang import Atom, start_node
from pylmq.erlang.terms import Term
from tests.cluster.lmq_reference import RefCluster, reference_cluster, wait_for

pytestmark = [pytest.mark.erl, pytest.mark.slow]


def call_pylmq(cluster: RefCluster, function: str, *args: Term) -> Term:
    """lmq_console:function(args) on the pylmq node, from a hidden node of the test's own."""

    async def run() -> Term:
        node = await start_node(f"driver_{secrets.token_hex(4)}@127.0.0.1", cluster.cookie)
        try:
            return await node.rpc(cluster.py[0].name, "lmq_console", function, list(args), 60.0)
        finally:
            await node.stop()

    return asyncio.run(run())


def mode(cluster: RefCluster) -> str:
    status = dict(call_pylmq(cluster, "status"))
    value = status[Atom("mode")]
    assert isinstance(value, Atom)
    return value.name


def test_queues_written_back_at_rejoin_are_served_by_every_erlang_node(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=2, pylmq=1) as cluster:
        lmq1, lmq2 = cluster.erl
        py = HttpClient(cluster.py[0].url, request_timeout=30)
        kept = "rq_" + secrets.token_hex(4)
        py.push(kept, b"pushed in the cluster", "text/plain")
        # Killed, as in a crash (a graceful stop: test_reference_membership.py).
        for node in (lmq2, lmq1):
            node.kill()
        assert wait_for(lambda: mode(cluster), lambda m: m == "standalone", 30) == "standalone"
        alone = "rq_" + secrets.token_hex(4)
        py.push(alone, b"pushed alone", "text/plain")
        py.update_props(alone, {"retry": 6})

        lmq1.start()  # RAM-only Mnesia: the cluster comes back empty
        lmq2.start(join=lmq1.name)
        assert call_pylmq(cluster, "join", Atom(lmq1.name)) == Atom("ok")

        for node in cluster.erl:
            assert sorted(n for n in node.queue_processes() if n in (kept, alone)) == sorted([kept, alone]), (
                f"expected queue processes of both written-back queues on {node.name}"
            )
            with urllib.request.urlopen(node.url + "/stats", timeout=30) as resp:
                assert resp.status == 200
                assert {kept, alone} <= set(json.loads(resp.read())["queues"])
        written_back = [py.pull(q, 5) for q in (kept, alone)]
        assert [m.body if m else None for m in written_back] == [b"pushed in the cluster", b"pushed alone"]
        for node in cluster.erl:
            erl = HttpClient(node.url, request_timeout=30)
            probe = secrets.token_hex(4).encode()
            erl.push(alone, probe, "text/plain")
            got = erl.pull(alone, 5)
            assert got is not None and got.body == probe and got.retry == 6, f"{node.name} serves {alone} with {got}"
            erl.ack(alone, got.id)
