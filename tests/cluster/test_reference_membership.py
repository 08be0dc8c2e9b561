"""Membership of a pylmq release in a cluster of real Erlang LMQ nodes (the reference kit), as an
operator lives it: ``bin/lmq start|stop``, ``lmq-admin join|status|standalone``, restarts.

One module-scoped setup: two real LMQ nodes (lmq1, lmq2: one Mnesia cluster, RAM tables, so a
restarted Erlang cluster comes back empty) and one pylmq release built with ``make rel``, joined
to lmq1 with ``lmq-admin join``. Each test starts from that state (:func:`joined`) and leaves it
so. Skipped with the reason where the kit or OTP 25 is missing (see lmq_reference.py).
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from pylmq.client import HttpClient, RpcClient
from pylmq.errors import LMQError
from tests.cluster.cluster_helpers import PyNode
from tests.cluster.lmq_reference import RefNode, http, kit_or_skip, wait_for
from tests.rel.rel_helpers import Release, make_release

pytestmark = [pytest.mark.erl, pytest.mark.slow]

TRUTH_WITHIN = 10.0  # seconds for lmq-admin status to tell a change of the cluster


@dataclass
class Env:
    lmq1: RefNode
    lmq2: RefNode
    rel: Release
    base: Path

    @property
    def membership(self) -> Path:
        return self.rel.root / "data" / "cluster.json"


def status(env: Env) -> str:
    done = env.rel.admin("status")
    assert done.returncode == 0, f"lmq-admin status failed: {done.stdout}{done.stderr}"
    return done.stdout


def mode_line(text: str) -> str:
    """The line under "Active nodes" that says how the node serves ('' when in the cluster)."""
    return text.splitlines()[2]


def start_erlang(env: Env) -> None:
    env.lmq1.start()
    env.lmq2.start(join=env.lmq1.name)


def stop_erlang(env: Env) -> None:
    """Gracefully (``lmq-ref stop``: init:stop), the way an operator stops an Erlang node."""
    env.lmq2.stop()
    env.lmq1.stop()


def joined(env: Env) -> None:
    """The module's state: both Erlang nodes up, the release running and in their cluster."""
    if not env.lmq1.started:
        start_erlang(env)
    if env.rel.lmq("ping").returncode != 0:
        started = env.rel.lmq("start")
        assert started.returncode == 0, f"bin/lmq start: {started.stdout}{started.stderr}"
    text = status(env)
    if env.lmq1.name not in text.splitlines()[1]:
        done = env.rel.admin("join", env.lmq1.name)
        assert done.returncode == 0, f"lmq-admin join {env.lmq1.name}: {done.stdout}{done.stderr}"
    text = wait_for(lambda: status(env), lambda t: env.lmq2.name in t.splitlines()[1], TRUTH_WITHIN)
    assert {env.lmq1.name, env.lmq2.name} <= set(text.splitlines()[1].split(": ")[1].split(", ")), text


def visible_on_erlang(env: Env, queue: str, body: bytes) -> None:
    got = HttpClient(env.lmq1.url, request_timeout=30).pull(queue, 5)
    assert got is not None and got.body == body, f"expected {body!r} pushed on pylmq to be pulled on lmq1; got {got}"


def start_refusing_pushes(env: Env, queue: str) -> None:
    """``bin/lmq start`` while the cluster is down: it starts, and a push answers 503
    cluster_unavailable naming the cluster's node."""
    started = env.rel.lmq("start")
    assert started.returncode == 0, f"bin/lmq start: {started.stdout}{started.stderr}"
    code, body = http("POST", f"{env.rel.url}/messages/{queue}", b"would split the cluster")
    assert code == 503, (code, body)
    error = json.loads(body)
    assert error["error"] == "cluster_unavailable" and env.lmq1.name in error["detail"], error


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    kit_or_skip()
    base = tmp_path_factory.mktemp("membership")
    rel = make_release(base)
    lmq1, lmq2 = RefNode("lmq1", rel.cookie, base), RefNode("lmq2", rel.cookie, base)
    e = Env(lmq1, lmq2, rel, base)
    try:
        joined(e)
        yield e
    finally:
        rel.kill()
        rel.statsd.close()
        lmq2.stop()
        lmq1.stop()


@pytest.fixture
def queue() -> str:
    return "mq_" + secrets.token_hex(4)


def test_join_records_the_cluster_in_the_data_dir(env: Env) -> None:
    joined(env)
    record = json.loads(env.membership.read_text())
    assert record["standalone"] is False
    assert record["nodes"][0] == env.lmq1.name and env.lmq2.name in record["nodes"], record


def test_a_restarted_release_rejoins_and_serves_the_cluster_queues(env: Env, queue: str) -> None:
    joined(env)
    py = HttpClient(env.rel.url, request_timeout=30)
    py.push(queue, b"before the restart", "text/plain")
    restarted = env.rel.lmq("restart")
    assert restarted.returncode == 0, f"bin/lmq restart: {restarted.stdout}{restarted.stderr}"
    text = wait_for(lambda: status(env), lambda t: env.lmq1.name in t.splitlines()[1], TRUTH_WITHIN)
    assert mode_line(text) == "" and env.lmq1.name in text.splitlines()[1], f"expected it back in the cluster: {text}"
    got = py.pull(queue, 5)
    assert got is not None and got.body == b"before the restart", f"expected the cluster's message, got {got}"
    py.ack(queue, got.id)
    py.push(queue, b"after the restart", "text/plain")
    visible_on_erlang(env, queue, b"after the restart")


def test_restarted_while_the_cluster_is_down_refuses_queue_operations_then_rejoins(env: Env, queue: str) -> None:
    joined(env)
    assert env.rel.lmq("stop").returncode == 0
    stop_erlang(env)
    start_refusing_pushes(env, queue)
    for request in (("GET", f"/messages/{queue}?t=0"), ("GET", "/stats"), ("POST", f"/messages/{queue}/x?reply=ack")):
        assert http(request[0], env.rel.url + request[1])[0] == 503, request
    with RpcClient("127.0.0.1", env.rel.rpc_port, request_timeout=30) as rpc, pytest.raises(LMQError) as refused:
        rpc.push(queue, "would split the cluster")
    assert refused.value.reason == "cluster_unavailable", refused.value
    text = wait_for(lambda: status(env), lambda t: "not registered in epmd" in t, TRUTH_WITHIN)
    expected = f"Rejoining: node {env.lmq1.name} is not reachable: node {env.lmq1.name} is not registered in epmd"
    assert mode_line(text).startswith(expected), text
    # An operator's join to a node that fails leaves the node rejoining, still refusing.
    bad = env.rel.admin("join", f"nosuch_{secrets.token_hex(4)}@127.0.0.1")
    assert bad.returncode == 1 and "not registered in epmd" in bad.stderr, bad
    assert mode_line(status(env)).startswith("Rejoining: "), status(env)
    assert http("POST", f"{env.rel.url}/messages/{queue}", b"still refused")[0] == 503

    start_erlang(env)
    text = wait_for(lambda: status(env), lambda t: mode_line(t) == "", 30)
    assert mode_line(text) == "", f"expected the node to rejoin once the Erlang nodes were back: {text}"
    assert HttpClient(env.rel.url, request_timeout=30).push(queue, b"rejoined", "text/plain") == "no"
    visible_on_erlang(env, queue, b"rejoined")


def test_standalone_chosen_by_the_operator_serves_alone_across_restarts_until_join(env: Env, queue: str) -> None:
    joined(env)
    assert env.rel.lmq("stop").returncode == 0
    stop_erlang(env)
    assert env.rel.lmq("start").returncode == 0
    assert http("POST", f"{env.rel.url}/messages/{queue}", b"refused")[0] == 503

    chosen = env.rel.admin("standalone")
    assert (chosen.returncode, chosen.stdout) == (0, "ok\n"), chosen
    assert http("POST", f"{env.rel.url}/messages/{queue}", b"pushed alone") == (200, b'{"accum":"no"}')
    assert mode_line(status(env)).startswith("Standalone: chosen by the operator"), status(env)
    assert json.loads(env.membership.read_text())["standalone"] is True

    assert env.rel.lmq("restart").returncode == 0
    assert mode_line(status(env)).startswith("Standalone: chosen by the operator"), status(env)
    assert http("GET", f"{env.rel.url}/stats")[0] == 200, "a standalone choice must survive the restart"

    start_erlang(env)
    done = env.rel.admin("join", env.lmq1.name)
    assert done.returncode == 0, f"lmq-admin join: {done.stdout}{done.stderr}"
    assert json.loads(env.membership.read_text())["standalone"] is False
    visible_on_erlang(env, queue, b"pushed alone")  # written back into the cluster at the join


def test_graceful_stop_of_every_erlang_node_makes_pylmq_standalone_within_seconds(env: Env, queue: str) -> None:
    joined(env)
    # lmq1 first: the node pylmq joined and follows (its Mnesia stops, the node still answers).
    env.lmq1.stop()
    text = wait_for(lambda: status(env), lambda t: env.lmq1.name not in t.splitlines()[1], TRUTH_WITHIN)
    assert text.splitlines()[1] == f"Active nodes: {env.lmq2.name}, {env.rel.name}", text
    assert mode_line(text) == "", text
    HttpClient(env.rel.url, request_timeout=30).push(queue, b"served by lmq2", "text/plain")
    got = HttpClient(env.lmq2.url, request_timeout=30).pull(queue, 5)
    assert got is not None and got.body == b"served by lmq2", f"expected lmq2 to serve pylmq's push, got {got}"
    env.lmq2.stop()
    text = wait_for(lambda: status(env), lambda t: mode_line(t).startswith("Standalone"), TRUTH_WITHIN)
    assert mode_line(text).startswith("Standalone: every Erlang node of the cluster is gone"), text
    assert text.splitlines()[1] == f"Active nodes: {env.rel.name}", text
    assert http("POST", f"{env.rel.url}/messages/{queue}", b"alone") == (200, b'{"accum":"no"}')

    # Gone standalone by itself, not by the operator's choice: a restart rejoins (503 meanwhile)
    # and writes back what was pushed while alone.
    assert env.rel.lmq("restart").returncode == 0
    assert http("POST", f"{env.rel.url}/messages/{queue}", b"refused")[0] == 503
    start_erlang(env)
    text = wait_for(lambda: status(env), lambda t: env.lmq1.name in t.splitlines()[1], 30)
    assert mode_line(text) == "", f"expected the node to rejoin once the Erlang nodes were back: {text}"
    visible_on_erlang(env, queue, b"alone")


def _other_cookie_node(name: str) -> subprocess.Popen[bytes]:
    erl = shutil.which("erl")
    assert erl is not None
    args = [erl, "-name", name, "-setcookie", "not_" + secrets.token_hex(4), "-hidden", "-noshell", "-noinput"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_join_failures_print_the_reason_and_exit_non_zero(env: Env) -> None:
    joined(env)
    assert env.rel.admin("leave").returncode == 0
    assert not env.membership.exists(), "leave must forget the membership"
    alive = f"other_{secrets.token_hex(4)}"
    other = _other_cookie_node(f"{alive}@127.0.0.1")
    pylmq = PyNode("alone", env.rel.cookie, env.base / "alone", (env.base / "alone.log").open("ab"), None)
    try:
        pylmq.wait_ready()
        epmd_names = ["epmd", "-names"]
        wait_for(lambda: subprocess.run(epmd_names, capture_output=True, text=True).stdout, lambda o: alive in o, 30)
        cases = {
            f"nosuch_{secrets.token_hex(4)}@127.0.0.1": r"is not registered in epmd on 127\.0\.0\.1",
            "no_at_sign": r"bad node name 'no_at_sign'",
            f"x@no-such-host-{secrets.token_hex(4)}.invalid": r"epmd at no-such-host-\w+\.invalid:4369 unreachable",
            f"{alive}@127.0.0.1": r"does not accept our cookie",
            pylmq.name: r"is a pylmq node, not an Erlang LMQ node: join an Erlang node of its cluster",
        }
        for node, reason in cases.items():
            done = env.rel.admin("join", node)
            assert done.returncode == 1, (node, done)
            assert re.search(rf"^join failed: cluster_error: node {re.escape(node)} .*{reason}", done.stderr), (
                f"joining {node}: expected the reason /{reason}/, got {done.stderr!r}"
            )
    finally:
        other.kill()
        other.wait(10)
        pylmq.stop()
    joined(env)


def test_join_from_app_config_waits_for_an_unreachable_cluster_instead_of_serving_alone(env: Env, queue: str) -> None:
    """A node that was never joined and is told ``{join, Node}`` in app.config is a member to
    be: while the cluster is down it refuses queue operations (no queues of its own to split
    from the cluster), and it joins by itself once the cluster answers."""
    joined(env)
    assert env.rel.lmq("stop").returncode == 0
    env.membership.unlink()  # as on a node's first start: nothing recorded
    stop_erlang(env)
    app = env.rel.root / "etc" / "app.config"
    original = app.read_text()
    asked = original.replace("%% , {join, 'lmq@10.0.0.2'}", f", {{join, '{env.lmq1.name}'}}")
    assert asked != original, "the release's app.config no longer has the commented join line"
    app.write_text(asked)
    try:
        start_refusing_pushes(env, queue)
        text = wait_for(lambda: status(env), lambda t: mode_line(t).startswith("Rejoining: "), TRUTH_WITHIN)
        assert env.lmq1.name in mode_line(text), text
        start_erlang(env)
        text = wait_for(lambda: status(env), lambda t: env.lmq1.name in t.splitlines()[1], 3 * TRUTH_WITHIN)
        assert mode_line(text) == "", f"expected it in the cluster: {text}"
        HttpClient(env.rel.url, request_timeout=30).push(queue, b"after the join", "text/plain")
        visible_on_erlang(env, queue, b"after the join")
        assert json.loads(env.membership.read_text())["nodes"][0] == env.lmq1.name
    finally:
        app.write_text(original)
