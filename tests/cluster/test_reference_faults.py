"""Faults with real Erlang LMQ nodes (the reference kit): a suspended Erlang node (SIGSTOP), and
kill -9 of an Erlang node or of the pylmq node under load.

Each test has its own cluster (two real LMQ nodes, one pylmq node joined to the first), since it
breaks it. pylmq runs with a 1 s rpc timeout and a 1 s stall timeout so the bounds are short.
Skipped with the reason where the kit or OTP 25 is missing (see lmq_reference.py).
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from pylmq.client import HttpClient
from pylmq.erlang import start_node
from pylmq.erlang.terms import Term
from pylmq.errors import ClusterError, LMQError
from tests.cluster.lmq_reference import RefCluster, RefNode, reference_cluster, wait_for

pytestmark = [pytest.mark.erl, pytest.mark.slow]

RPC_TIMEOUT = 1.0
PY_ARGS = ("--rpc-timeout", str(RPC_TIMEOUT), "--stall-timeout", "1.0")
# What one request through pylmq may take while a peer is suspended: the rpc timeout, then the
# same call on the live node; the rest is slack for a loaded test machine.
BOUND = RPC_TIMEOUT + 1.5


def status(cluster: RefCluster) -> dict[str, Any]:
    """lmq_console:status() of the pylmq node, from a hidden node of the test's own."""

    async def run() -> Term:
        node = await start_node(f"driver_{secrets.token_hex(4)}@127.0.0.1", cluster.cookie)
        try:
            return await node.rpc(cluster.py[0].name, "lmq_console", "status", [], 30.0)
        finally:
            await node.stop()

    term = asyncio.run(run())
    assert isinstance(term, list)
    out: dict[str, Any] = {}
    for key, value in term:
        out[key.name] = value
    out["stalled"] = {n.name: s for n, s in out["stalled_nodes"]}
    out["active"] = {n.name for n in out["active_nodes"]}
    return out


def timed(what: str, fn: Callable[[], Any]) -> Any:
    began = time.monotonic()
    try:
        return fn()
    finally:
        took = time.monotonic() - began
        assert took < BOUND, f"expected {what} through pylmq to answer within {BOUND} s, it took {took:.1f} s"


def pylmq_log(cluster: RefCluster) -> str:
    return (cluster.base / "pylmq.log").read_text(errors="replace")


def try_timed(what: str, fn: Callable[[], Any]) -> Any:
    """fn's value, or the ClusterError (503) it raised, within BOUND either way."""
    try:
        return timed(what, fn)
    except ClusterError as e:
        return e


def test_a_suspended_erlang_node_costs_a_request_at_most_the_bound_and_shows_as_stalled(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=2, pylmq=1, py_args=PY_ARGS) as cluster:
        lmq1, lmq2 = cluster.erl  # lmq1: the node pylmq joined, whose table events its mirror follows
        py = HttpClient(cluster.py[0].url, request_timeout=30)
        q = "st_" + secrets.token_hex(4)
        py.update_props(q, {"timeout": 2, "retry": 1000})
        pushed = {f"before{i}".encode() for i in range(6)}
        for body in sorted(pushed):
            py.push(q, body, "text/plain")
        lmq1.signal(signal.SIGSTOP)
        try:
            # Mnesia on lmq2 cannot commit while its replica lmq1 is suspended (until the Erlang
            # nodes' own net_ticktime drops it): every request is answered within the bound,
            # served or refused with a 503 that names the peers and the operation.
            answers = []
            for i in range(3):
                got = try_timed("a pull", lambda: py.pull(q, 0))
                answers.append(got)
                if isinstance(got, ClusterError):
                    assert "lmq_lib:dequeue" in got.detail and lmq1.name in got.detail, got.detail
                body = f"during{i}".encode()
                done = try_timed("a push", partial(py.push, q, body, "text/plain"))
                if isinstance(done, ClusterError):
                    assert "lmq_lib:enqueue" in done.detail and "outcome is unknown" in done.detail, done.detail
                else:
                    pushed.add(body)
            st = wait_for(lambda: status(cluster), lambda s: lmq1.name in s["stalled"], 5)
            assert lmq1.name in st["stalled"] and lmq1.name not in st["active"] and lmq2.name in st["active"], st
            assert f"node {lmq1.name} is stalled" in pylmq_log(cluster)
            refused = try_timed("a push", lambda: py.push(q, b"refused", "text/plain"))
            assert isinstance(refused, ClusterError), "expected lmq2 unable to commit while its replica is suspended"
            assert lmq1.name not in refused.detail, f"a stalled node must not be called: {refused.detail}"
        finally:
            lmq1.signal(signal.SIGCONT)
        st = wait_for(lambda: status(cluster), lambda s: not s["stalled"] and lmq1.name in s["active"], 10)
        assert (st["stalled"], lmq1.name in st["active"]) == ({}, True), st
        assert f"node {lmq1.name} is heard from again" in pylmq_log(cluster)
        # Both Erlang nodes serve again; every push answered 200 is there (once its delivery
        # deadline passed, for pulls whose answer was lost).
        HttpClient(lmq1.url, request_timeout=30).push(q, b"from lmq1", "text/plain")
        pushed.add(b"from lmq1")
        seen = set()
        while (got := py.pull(q, 3)) is not None:
            seen.add(got.body)
            py.ack(q, got.id)
        assert sorted(pushed - seen) == [], "answered pushes lost"


def test_past_the_erlang_net_ticktime_the_other_node_serves_while_one_stays_suspended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Erlang nodes (and pylmq) drop a silent node after 4 s instead of a minute.
    monkeypatch.setenv("ERL_FLAGS", "-kernel net_ticktime 4")
    with reference_cluster(tmp_path, erlang=2, pylmq=1, py_args=(*PY_ARGS, "--net-ticktime", "4")) as cluster:
        lmq1, lmq2 = cluster.erl
        py = HttpClient(cluster.py[0].url, request_timeout=30)
        q = "tk_" + secrets.token_hex(4)
        py.update_props(q, {"timeout": 2, "retry": 1000})
        pushed, acked = {b"before"}, set()
        py.push(q, b"before", "text/plain")
        lmq1.signal(signal.SIGSTOP)
        try:
            served, deadline, i = 0, time.monotonic() + 20, 0
            while served < 5 and time.monotonic() < deadline:
                body = f"during{i}".encode()
                i += 1
                done = try_timed("a push", partial(py.push, q, body, "text/plain"))
                if isinstance(done, ClusterError):
                    assert "lmq_lib:enqueue" in done.detail and "outcome is unknown" in done.detail, done.detail
                    served = 0
                    continue
                pushed.add(body)
                got = try_timed("a pull", lambda: py.pull(q, 0))
                if isinstance(got, ClusterError) or got is None:
                    served = 0
                    continue
                timed("an ack", partial(py.ack, q, got.id))
                acked.add(got.body)
                served += 1
            assert served == 5, "expected lmq2 to serve pylmq once the Erlang nodes dropped the suspended lmq1"
            st = status(cluster)
            assert lmq1.name not in st["active"] and lmq2.name in st["active"], st
        finally:
            lmq1.signal(signal.SIGCONT)
        assert sorted(pushed - acked - drain(py, q, acked, 3)) == [], "answered pushes lost"


def test_a_node_the_others_dropped_while_it_was_suspended_is_not_served_through_when_it_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Erlang nodes drop a silent node after 4 s; pylmq keeps its connection (a minute), so
    # lmq1 resumes on a connection pylmq never dropped, into a partition Mnesia does not heal.
    monkeypatch.setenv("ERL_FLAGS", "-kernel net_ticktime 4")
    with reference_cluster(tmp_path, erlang=2, pylmq=1, py_args=PY_ARGS) as cluster:
        lmq1, lmq2 = cluster.erl
        py = HttpClient(cluster.py[0].url, request_timeout=30)
        q = "pt_" + secrets.token_hex(4)
        py.update_props(q, {"timeout": 2, "retry": 1000})
        py.push(q, b"before", "text/plain")
        lmq1.signal(signal.SIGSTOP)
        try:
            # lmq2 commits alone once it dropped lmq1: then 'before' is pulled and acked there.
            deadline = time.monotonic() + 20
            while True:
                assert time.monotonic() < deadline, "expected lmq2 to serve once it dropped lmq1"
                got = try_timed("a pull", lambda: py.pull(q, 0))
                if isinstance(got, ClusterError) or got is None:
                    continue
                assert got.body == b"before"
                try_timed("an ack", partial(py.ack, q, got.id))
                break
        finally:
            # At once: pylmq has not yet learnt that lmq2 dropped lmq1 (its refresh runs each second).
            lmq1.signal(signal.SIGCONT)
        assert f"node {lmq1.name} is stalled" in pylmq_log(cluster)
        wait_for(lambda: pylmq_log(cluster), lambda log: f"node {lmq1.name} is heard from again" in log, 10)
        after = {f"after{i}".encode() for i in range(20)}
        for body in sorted(after):
            py.push(q, body, "text/plain")
        # Pulls go round robin over the serving peers: lmq1's stale copy would answer some. A
        # pull abandoned at the rpc timeout during the stall may still take one message when
        # Mnesia resumes it; that one comes back after its timeout, hence the 3 s waits.
        seen = drain(py, q, {b"before"}, 3)
        assert sorted(after - seen) == [], "answered pushes lost"
        st = status(cluster)
        assert lmq1.name not in st["active"] and lmq2.name in st["active"], st


def run_load(
    clients: dict[str, HttpClient], q: str, rounds: int, fault: Callable[[], None], at: int
) -> tuple[set[bytes], set[bytes], set[bytes], list[tuple[str, str]]]:
    """Each client pushes, pulls and acks ``rounds`` times in its thread; ``fault`` runs once the
    first client is at round ``at``. Returns the pushes answered, the bodies delivered (pulled)
    and those whose ack was answered, and the errors seen. An ack whose answer was lost may
    still have committed, so only answered acks must never come back."""
    pushed: set[bytes] = set()
    delivered: set[bytes] = set()
    acked: set[bytes] = set()
    errors: list[tuple[str, str]] = []
    lock = threading.Lock()
    reached = threading.Event()

    def loop(label: str, client: HttpClient) -> None:
        for i in range(rounds):
            if i == at:
                reached.set()
            body = f"{label}-{i}".encode()
            try:
                client.push(q, body, "text/plain")
                with lock:
                    pushed.add(body)
                got = client.pull(q, 0.5)
                if got is not None:
                    with lock:
                        assert got.body not in acked, f"acked message {got.body!r} was delivered again"
                        delivered.add(got.body)
                    client.ack(q, got.id)
                    with lock:
                        acked.add(got.body)
            except (LMQError, OSError) as e:
                with lock:
                    errors.append((label, f"{type(e).__name__}: {e}"))

    failures: list[BaseException] = []

    def guarded(label: str, client: HttpClient) -> None:
        try:
            loop(label, client)
        except AssertionError as e:
            failures.append(e)

    threads = [threading.Thread(target=guarded, args=item) for item in clients.items()]
    for t in threads:
        t.start()
    reached.wait(60)
    fault()
    for t in threads:
        t.join(120)
    assert failures == []
    kinds = Counter(f"{who}: {e.split(':')[0]}" for who, e in errors)
    print(f"load: {len(pushed)} pushes answered, {len(delivered)} delivered, {len(acked)} acked, errors: {dict(kinds)}")
    return pushed, delivered, acked, errors


def drain(client: HttpClient, q: str, acked: set[bytes], wait: float) -> set[bytes]:
    """Pull and ack until nothing comes for ``wait`` s; an acked message coming back fails."""
    got_back: set[bytes] = set()
    while (got := client.pull(q, wait)) is not None:
        assert got.body not in acked, f"acked message {got.body!r} was delivered again"
        got_back.add(got.body)
        client.ack(q, got.id)
    return got_back


def fresh_queue(client: HttpClient) -> str:
    q = "ld_" + secrets.token_hex(4)
    # Deliveries whose answer died with a node come back soon; never dropped for retries.
    client.update_props(q, {"timeout": 2, "retry": 1000})
    return q


def load_through_a_kill(py: HttpClient, q: str, killed: RefNode, survivor: RefNode) -> None:
    """Push, pull and ack cycles through pylmq and through ``survivor`` while ``killed`` is
    killed -9: no answered push is lost, the survivor's clients see no error, and at most the
    calls in flight at the kill fail."""
    erl = HttpClient(survivor.url, request_timeout=30)
    pushed, delivered, acked, errors = run_load({"py": py, "erl": erl}, q, 150, killed.kill, 50)
    rest = drain(py, q, acked, 4)
    print(f"drained after the kill: {len(rest)}")
    lost = pushed - delivered - rest
    assert sorted(lost) == [], f"answered pushes lost after kill -9 of {killed.name}"
    erl_errors = [e for who, e in errors if who == "erl"]
    assert erl_errors == [], "clients of the surviving Erlang node should see no error"
    assert len(errors) <= 3, f"expected at most the calls in flight at the kill to fail: {errors}"


def test_kill_9_of_an_erlang_node_under_load_loses_no_answered_push(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=2, pylmq=1, py_args=PY_ARGS) as cluster:
        lmq1, lmq2 = cluster.erl
        py = HttpClient(cluster.py[0].url, request_timeout=30)
        q = fresh_queue(py)
        load_through_a_kill(py, q, lmq1, lmq2)
        st = status(cluster)
        assert (st["mode"].name, lmq1.name in st["active"]) == ("cluster", False), st


def test_kill_9_of_the_pylmq_node_under_load_loses_no_push_it_answered(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=2, pylmq=1, py_args=PY_ARGS) as cluster:
        lmq1, lmq2 = cluster.erl
        py = HttpClient(cluster.py[0].url, request_timeout=30)
        erl1, erl2 = (HttpClient(n.url, request_timeout=30) for n in (lmq1, lmq2))
        q = fresh_queue(py)
        clients = {"py": py, "erl1": erl1, "erl2": erl2}
        pushed, delivered, acked, errors = run_load(clients, q, 150, cluster.py[0].kill, 50)
        assert [e for who, e in errors if who != "py"] == [], "clients of the Erlang nodes should see no error"
        rest = drain(erl2, q, acked, 4)
        print(f"drained after the kill: {len(rest)}")
        lost = pushed - delivered - rest
        assert sorted(lost) == [], "pushes answered before the kill -9 of the pylmq node were lost"
        answered_by_py = {b for b in pushed if b.startswith(b"py-")}
        assert answered_by_py, "expected pylmq to have answered pushes before it was killed"
