"""The release as an operator drives it: make rel, bin/lmq start/ping/stop/restart/foreground/
console/pid, the HTTP API of the started node, and the lager-format log files it leaves."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from pylmq.cli.lmq import pid_alive
from tests.rel.rel_helpers import CRASH_HEADER, LAGER_LINE, Release, build_release

pytestmark = pytest.mark.slow


def push(rel: Release, queue: str, body: bytes) -> dict[str, object]:
    req = urllib.request.Request(f"{rel.url}/messages/{queue}", data=body, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        result: dict[str, object] = json.loads(resp.read())
        return result


def pull(rel: Release, queue: str) -> tuple[bytes, str]:
    with urllib.request.urlopen(f"{rel.url}/messages/{queue}?t=5", timeout=10) as resp:
        return resp.read(), resp.headers["x-lmq-message-id"]


def ack(rel: Release, queue: str, message_id: str) -> int:
    req = urllib.request.Request(f"{rel.url}/messages/{queue}/{message_id}?reply=ack", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return int(resp.status)


def assert_lager_files(log_dir: Path) -> None:
    for name in ("console.log", "error.log"):
        for n, line in enumerate((log_dir / name).read_text().splitlines(), 1):
            assert LAGER_LINE.match(line), f"{name}:{n} is not a lager line: {line!r}"
    # crash.log holds reports: each starts with lager_crash_log's header line
    for entry in filter(None, (log_dir / "crash.log").read_text().split("\n\n")):
        assert CRASH_HEADER.match(entry.strip("\n").splitlines()[0]), f"crash.log entry without a header: {entry!r}"


def test_start_ping_push_pull_status_stop_as_an_operator(release: Release) -> None:
    started = release.lmq("start")
    assert started.returncode == 0, f"start: expected exit 0, got {started.returncode}: {started.stderr}"
    expected = (
        f"lmq started: node {release.name}, HTTP 127.0.0.1:{release.http_port}, RPC 0.0.0.0:{release.rpc_port},"
        f" queue_server 127.0.0.1:{release.qs_port}, SQS 127.0.0.1:{release.sqs_port}\n"
    )
    assert started.stdout == expected, f"start: expected the success line {expected!r}, got {started.stdout!r}"

    ping = release.lmq("ping")
    assert (ping.returncode, ping.stdout) == (0, "pong\n"), f"ping: {ping.returncode} {ping.stdout!r} {ping.stderr!r}"

    assert push(release, "jobs", b"first") == {"accum": "no"}
    assert push(release, "jobs", b"second") == {"accum": "no"}
    body, message_id = pull(release, "jobs")
    assert body == b"first"
    assert ack(release, "jobs", message_id) == 204

    status = release.admin("status")
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0] == f"   All nodes: {release.name}"
    assert lines[1] == f"Active nodes: {release.name}"
    jobs = [ln for ln in lines if ln.startswith("jobs ")]
    assert len(jobs) == 1, f"expected one status line for jobs in {status.stdout!r}"
    assert jobs[0][:41] == "jobs".ljust(40) + " " and jobs[0][41:58] == f"{1:7d} messages ", jobs[0]
    assert jobs[0].endswith(" bytes") and len(jobs[0]) == 40 + 1 + 7 + 10 + 15 + 6, jobs[0]
    assert lines[lines.index(jobs[0]) + 1] == "  accum: 0.0, retry: 2, timeout: 30.0"

    pid = release.pid()
    assert pid is not None and pid_alive(pid)
    stopped = release.lmq("stop")
    assert (stopped.returncode, stopped.stdout) == (0, "ok\n"), f"stop: {stopped.returncode} {stopped.stderr!r}"
    assert not pid_alive(pid), "stop returned while the node's process still runs"
    assert not release.pid_file.exists(), "the node left its pid file behind"

    after = release.lmq("ping")
    assert (after.returncode, after.stdout) == (1, "pang\n")

    log_dir = release.root / "log"
    console = (log_dir / "console.log").read_text()
    assert "[info]" in console and "POST /messages/jobs 200" in console, console[-2000:]
    assert_lager_files(log_dir)


def test_messages_survive_stop_and_start(release: Release) -> None:
    assert release.lmq("start").returncode == 0
    push(release, "kept", b"durable")
    assert release.lmq("stop").returncode == 0
    assert release.lmq("start").returncode == 0
    assert pull(release, "kept")[0] == b"durable"


def test_second_start_says_running_and_changes_nothing(release: Release) -> None:
    assert release.lmq("start").returncode == 0
    pid = release.pid()
    again = release.lmq("start")
    assert again.returncode == 1 and "Node is already running!" in again.stderr, again
    assert release.pid() == pid and pid is not None and pid_alive(pid)
    assert release.lmq("ping").stdout == "pong\n"


def test_start_with_the_http_port_in_use_fails_with_the_reason(release: Release) -> None:
    with socket.socket() as busy:
        busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        busy.bind(("127.0.0.1", release.http_port))
        busy.listen()
        started = release.lmq("start")
    assert started.returncode == 1, f"expected exit 1, got {started.returncode}: {started.stdout}"
    assert "Node failed to start" in started.stderr, started.stderr
    assert f"cannot listen for HTTP on 127.0.0.1:{release.http_port}" in started.stderr, started.stderr
    assert "address already in use" in started.stderr.lower(), started.stderr
    assert release.lmq("ping").returncode == 1


def test_restart_replaces_the_process_and_keeps_answering(release: Release) -> None:
    assert release.lmq("start").returncode == 0
    before = release.pid()
    restarted = release.lmq("restart")
    assert restarted.returncode == 0, restarted.stderr
    after = release.pid()
    assert after is not None and after != before and pid_alive(after)
    assert before is not None and not pid_alive(before)
    assert release.lmq("ping").stdout == "pong\n"


def test_pid_prints_the_node_process_id(release: Release) -> None:
    assert release.lmq("start").returncode == 0
    printed = release.lmq("pid")
    assert (printed.returncode, printed.stdout) == (0, f"{release.pid()}\n")


def test_stop_when_not_running_fails(release: Release) -> None:
    stopped = release.lmq("stop")
    assert stopped.returncode == 1 and "not responding to pings" in stopped.stderr, stopped


def test_foreground_runs_until_stopped(release: Release) -> None:
    proc = subprocess.Popen(
        [str(release.root / "bin" / "lmq"), "foreground"],
        cwd=release.elsewhere,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready = proc.stdout.readline()
        assert ready.startswith(f"pylmq ready node={release.name}"), ready
        assert release.lmq("ping").stdout == "pong\n"
        assert release.lmq("stop").returncode == 0
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        # foreground also shows the log lines on stderr, in lager's layout
        assert any(LAGER_LINE.match(ln) for ln in err.splitlines()), err[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_console_answers_commands_on_stdin_and_stops_at_eof(release: Release) -> None:
    script = 'print("queues:", len(manager.queue_names()))\nprint("node:", dist.name)\n'
    done = release.run("lmq", "console", input=script, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "queues: 0" in done.stdout, done.stdout
    assert f"node: {release.name}" in done.stdout, done.stdout
    assert release.lmq("ping").returncode == 1, "the node should stop when the console ends"


def test_rebuild_keeps_the_operators_etc_files(release: Release) -> None:
    vm_args = (release.root / "etc" / "vm.args").read_text()
    app_config = (release.root / "etc" / "app.config").read_text()
    rebuilt = build_release(release.root)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert (release.root / "etc" / "vm.args").read_text() == vm_args
    assert (release.root / "etc" / "app.config").read_text() == app_config
    assert all((release.root / d).is_dir() for d in ("bin", "etc", "log", "data"))


def test_statsd_gauges_reach_the_configured_daemon(release: Release) -> None:
    assert release.lmq("start").returncode == 0
    push(release, "gauged", b"x")
    release.statsd.settimeout(1.0)
    seen: list[str] = []
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and "lmq.gauged.size:1|g" not in seen:
        with contextlib.suppress(TimeoutError):
            seen.extend(release.statsd.recv(65536).decode().split("\n"))
    assert "lmq.gauged.size:1|g" in seen, f"expected a size gauge of 1 for gauged, got {seen[-20:]}"


def test_start_with_a_broken_app_config_fails_with_file_and_line(release: Release) -> None:
    app = release.root / "etc" / "app.config"
    app.write_text(app.read_text().replace("{stats_interval, 500}", "{stats_interval, 500"))
    started = release.lmq("start")
    assert started.returncode == 1, started
    assert "Node failed to start (exit status 2)" in started.stderr, started.stderr
    assert f"{app}:" in started.stderr, f"expected the file name in the reason, got {started.stderr!r}"
    assert not release.pid_file.exists()
