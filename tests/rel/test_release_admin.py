"""lmq-admin against a started release, and a real OTP node pinging and calling it."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import urllib.request

import pytest

from tests.rel.rel_helpers import Release

pytestmark = pytest.mark.slow

RATE = r"1min \d+\.\d\d, 5min \d+\.\d\d, 15min \d+\.\d\d, 1day \d+\.\d\d"
RETENTION = r"  retention time: min \d+\.\d{3}, max \d+\.\d{3}, mean \d+\.\d{3}, median \d+\.\d{3}"


def test_stats_lists_rates_and_retention_per_queue(running: Release) -> None:
    req = urllib.request.Request(f"{running.url}/messages/metered", data=b"m", method="POST")
    urllib.request.urlopen(req, timeout=10).close()
    with urllib.request.urlopen(f"{running.url}/messages/metered?t=5", timeout=10) as resp:
        assert resp.status == 200
    done = running.admin("stats")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    at = lines.index("metered")
    assert re.fullmatch(f"  push rate: {RATE}", lines[at + 1]), lines[at + 1]
    assert re.fullmatch(f"  pull rate: {RATE}", lines[at + 2]), lines[at + 2]
    assert re.fullmatch(RETENTION, lines[at + 3]), lines[at + 3]


@pytest.mark.parametrize(
    ("args", "reason"),
    [(("join", f"nosuch_{secrets.token_hex(4)}@127.0.0.1"), "is not reachable"), (("leave",), "not in a cluster")],
    ids=["join-unreachable", "leave-alone"],
)
def test_join_and_leave_fail_with_the_reason(running: Release, args: tuple[str, ...], reason: str) -> None:
    done = running.admin(*args)
    assert done.returncode == 1, done
    assert "cluster_error" in done.stderr and reason in done.stderr, done.stderr


def test_admin_without_a_running_node_says_so(release: Release) -> None:
    done = release.admin("status")
    assert (done.returncode, done.stdout) == (1, "Node is not running!\n"), done


def test_admin_with_the_wrong_cookie_cannot_reach_the_node(running: Release) -> None:
    vm_args = running.root / "etc" / "vm.args"
    good = vm_args.read_text()
    try:
        vm_args.write_text(good.replace(f"-setcookie {running.cookie}", "-setcookie wrong"))
        done = running.admin("status")
    finally:
        vm_args.write_text(good)
    assert (done.returncode, done.stdout) == (1, "Node is not running!\n"), done


@pytest.mark.erl
def test_erlang_node_pings_the_release_and_calls_lmq_console(running: Release) -> None:
    erl = shutil.which("erl")
    assert erl is not None, "erl is not on PATH"
    target = f"'{running.name}'"
    code = (
        f'io:format("~p~n", [net_adm:ping({target})]), '
        f'io:format("~p~n", [rpc:call({target}, lmq_console, status, [])]), halt().'
    )
    done = subprocess.run(
        [
            erl,
            "-name",
            f"probe{secrets.token_hex(4)}@127.0.0.1",
            "-setcookie",
            running.cookie,
            "-noshell",
            "-eval",
            code,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = done.stdout.splitlines()
    assert lines[:1] == ["pong"], f"expected pong from net_adm:ping, got {done.stdout!r} {done.stderr!r}"
    assert f"[{{all_nodes,[{target}]}}," in lines[1], done.stdout


def test_http_stats_names_the_node_by_its_erlang_name(running: Release) -> None:
    with urllib.request.urlopen(f"{running.url}/stats", timeout=10) as resp:
        stats = json.loads(resp.read())
    assert (stats["all_nodes"], stats["active_nodes"]) == ([running.name], [running.name])
