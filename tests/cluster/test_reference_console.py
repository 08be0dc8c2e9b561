"""The console's JSON of a pylmq node joined to real Erlang LMQ nodes (the reference kit): the
cluster view lists the Erlang nodes as such, a queue pushed on an Erlang node shows with its depth,
and a suspended (SIGSTOP) Erlang node shows as stalled while the console keeps answering.

Skipped with the reason where the kit or OTP 25 is missing (see lmq_reference.py).
"""

from __future__ import annotations

import json
import secrets
import signal
from pathlib import Path
from typing import Any

import pytest

from pylmq.client import HttpClient
from tests.cluster.lmq_reference import http, reference_cluster, wait_for

pytestmark = [pytest.mark.erl, pytest.mark.slow]

PY_ARGS = ("--rpc-timeout", "1.0", "--stall-timeout", "1.0")


def overview(url: str, **query: str) -> dict[str, Any]:
    q = "&".join(f"{k}={v}" for k, v in query.items())
    status, body = http("GET", f"{url}/console/api/overview?{q}")
    assert status == 200, body
    doc: dict[str, Any] = json.loads(body)
    return doc


def states(doc: dict[str, Any]) -> dict[str, tuple[str, str, float | None]]:
    return {n["name"]: (n["runtime"], n["state"], n["silent_for"]) for n in doc["cluster"]["nodes"]}


def test_console_of_a_node_in_a_mixed_cluster(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=2, pylmq=1, py_args=PY_ARGS) as cluster:
        lmq1, lmq2 = cluster.erl
        py = cluster.py[0]
        q = "con_" + secrets.token_hex(4)
        erl = HttpClient(lmq2.url, request_timeout=30)
        for i in range(3):
            erl.push(q, f"m{i}".encode(), "text/plain")
        doc = wait_for(lambda: overview(py.url, filter=q), lambda d: d["page"]["matched"] == 1)
        assert [(r["name"], r["size"]) for r in doc["page"]["queues"]] == [(q, 3)]
        c = doc["cluster"]
        assert (c["node"], c["runtime"], c["store"], c["mode"]) == (py.name, "python", "mnesia", "cluster")
        assert states(doc) == {
            lmq1.name: ("erlang", "active", None),
            lmq2.name: ("erlang", "active", None),
            py.name: ("python", "active", None),
        }
        assert [n["name"] for n in c["nodes"] if n["self"]] == [py.name]
        lmq1.signal(signal.SIGSTOP)
        try:
            doc = wait_for(lambda: overview(py.url), lambda d: states(d)[lmq1.name][1] == "stalled", 10)
            runtime, state, silent = states(doc)[lmq1.name]
            assert (runtime, state) == ("erlang", "stalled")
            assert silent is not None and silent >= 1.0
            assert states(doc)[lmq2.name][1] == "active"
        finally:
            lmq1.signal(signal.SIGCONT)
        doc = wait_for(lambda: overview(py.url), lambda d: states(d)[lmq1.name][1] == "active", 15)
        assert states(doc)[lmq1.name] == ("erlang", "active", None)
