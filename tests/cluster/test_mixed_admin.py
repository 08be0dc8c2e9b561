"""``bin/lmq-admin`` of a released pylmq node in a mixed cluster: join, status, leave."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.cluster_helpers import PyNode, eventually
from tests.interop import erlpeer
from tests.rel import rel_helpers

pytestmark = [pytest.mark.erl, pytest.mark.slow]

# The four fixture: the Erlang peers, the released node, the joined pylmq node.
Four = tuple[erlpeer.Cluster, rel_helpers.Release, PyNode]


@pytest.fixture
def four(tmp_path: Path) -> Iterator[Four]:
    """2 Erlang peers, a pylmq node joined to them, and a released pylmq node (not joined yet)."""
    with erlpeer.running_cluster(tmp_path) as erl:
        py = PyNode("py", erl.cookie, tmp_path / "py", erl.log, erl.a.name)
        rel = rel_helpers.make_release(tmp_path / "rel")
        try:
            rel.cookie = erl.cookie
            rel.configure()
            started = rel.lmq("start")
            assert started.returncode == 0, started
            py.wait_ready()
            yield erl, rel, py
        finally:
            py.stop()
            rel.kill()
            rel.statsd.close()


def test_lmq_admin_join_then_status_shows_all_four_nodes_and_the_queue_sizes(four: Four) -> None:
    erl, rel, py = four
    joined = rel.admin("join", erl.b.name)
    assert (joined.returncode, joined.stdout) == (0, "ok\n"), joined
    for i in range(3):
        erl.a.push("admin_q", f"{i}".encode())
    nodes = ", ".join(sorted([erl.a.name, erl.b.name, py.name, rel.name]))

    def status() -> str:
        return str(rel.admin("status").stdout)

    out = eventually(status, lambda s: f"Active nodes: {nodes}\n" in s and " 3 messages" in s, timeout=15)
    assert f"   All nodes: {nodes}\n" in out and f"Active nodes: {nodes}\n" in out, out
    assert re.search(r"(?m)^admin_q +3 messages +\d+ bytes$", out), out
    left = rel.admin("leave")
    assert (left.returncode, left.stdout) == (0, "ok\n"), left
    assert "admin_q" not in rel.admin("status").stdout
