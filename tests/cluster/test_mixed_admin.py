"""``bin/lmq-admin`` of a released pylmq node in a mixed cluster: join, status, leave."""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import erlpeer
import pytest
from cluster_helpers import ROOT, PyNode, eventually

pytestmark = [pytest.mark.erl, pytest.mark.slow]


def _release_helpers() -> Any:
    # tests/rel/rel_helpers.py builds and configures releases. tests/rel is on sys.path only when
    # pytest collects it too; imported by its own name, the module is the one tests/rel uses.
    rel_dir = str(ROOT / "tests" / "rel")
    if rel_dir not in sys.path:
        sys.path.append(rel_dir)
    return importlib.import_module("rel_helpers")


@pytest.fixture
def four(tmp_path: Path) -> Iterator[tuple[Any, Any, PyNode]]:
    """2 Erlang peers, a pylmq node joined to them, and a released pylmq node (not joined yet)."""
    rel_helpers = _release_helpers()
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


def test_lmq_admin_join_then_status_shows_all_four_nodes_and_the_queue_sizes(four: tuple[Any, Any, PyNode]) -> None:
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
