"""Crash safety of a real node: SIGKILL under concurrent push/pull/ack load, then restart.

The last test does the same to a process that drives a DurableStore directly
(``tests/store/crash_driver.py``) with format-2 records: pushes with options, dead-letter
transfers, requeues and virtual queue changes.

The node runs as a separate process (``python -m pylmq --store durable --fsync POLICY``, both
the default ``interval`` and ``always``: a SIGKILL leaves the page cache, so both must pass). Client
threads push bodies carrying unique sequence numbers, pull, and ack (some nack) over HTTP while
the node is killed at a random moment, several times on the same data directory. After a last
restart the queue is drained. Every push answered 200 must then be either drained or acked, no
acked message may come back, and none may come back twice.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pylmq.core.message import StoredMessage
from pylmq.store.durable import DurableStore
from tests.store.crash_driver import DEAD as CRASH_DEAD
from tests.store.crash_driver import Q as CRASH_Q

pytestmark = pytest.mark.slow

Q = "crash"
ROUNDS = 3
MAX_PUSHES_PER_ROUND = 20_000
PUSHERS, PULLERS = 3, 3
READY = re.compile(r"pylmq ready .*\bhttp=\('([\d.]+)', (\d+)\)")


@dataclass
class Ledger:
    lock: threading.Lock = field(default_factory=threading.Lock)
    answered: set[int] = field(default_factory=set)  # push answered 200
    acked: set[int] = field(default_factory=set)  # ack answered 204
    # Requests cut off by the kill: the node may or may not have done them.
    push_unanswered: set[int] = field(default_factory=set)
    ack_unanswered: set[int] = field(default_factory=set)
    next_seq: int = 0

    def take_seq(self) -> int | None:
        with self.lock:
            if self.next_seq >= self.limit:
                return None
            self.next_seq += 1
            return self.next_seq

    limit: int = 0


class Node:
    def __init__(self, data_dir: Path, fsync: str) -> None:
        cmd = [
            sys.executable, "-m", "pylmq",
            "--http", "127.0.0.1:0", "--rpc", "127.0.0.1:0", "--qs", "off", "--sqs", "off",
            "--store", "durable", "--data-dir", str(data_dir), "--fsync", fsync,
            "--log-level", "warning", "--statsd", "off",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Read output in a thread (never blocking the test on a silent node), and keep
        # draining it so the node never blocks on a full pipe.
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + 30
        seen = []
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            seen.append(line)
            if m := READY.search(line):
                self.host, self.port = m.group(1), int(m.group(2))
                return
        self.kill()
        raise AssertionError(f"node did not start within 30 s; its output: {''.join(seen)}")

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=10)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


def request(
    c: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, dict[str, str], bytes]:
    headers = {"content-type": "application/json"} if method == "PATCH" else {}
    c.request(method, path, body=body, headers=headers)
    r = c.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()


def pusher(node: Node, ledger: Ledger, stop: threading.Event) -> None:
    c = node.conn()
    try:
        while not stop.is_set() and (seq := ledger.take_seq()) is not None:
            try:
                status, _, _ = request(c, "POST", f"/messages/{Q}", b"seq-%d" % seq)
            except (OSError, http.client.HTTPException):
                with ledger.lock:
                    ledger.push_unanswered.add(seq)  # no answer, so it promises nothing
                return
            assert status == 200, f"push answered {status}"
            with ledger.lock:
                ledger.answered.add(seq)
    finally:
        c.close()


def puller(node: Node, ledger: Ledger, stop: threading.Event, rng: random.Random) -> None:
    c = node.conn()
    try:
        while not stop.is_set():
            status, headers, body = request(c, "GET", f"/messages/{Q}?t=0")
            if status == 204:
                time.sleep(0.002)
                continue
            assert status == 200, f"pull answered {status}"
            seq, mid = int(body.split(b"-")[1]), headers["x-lmq-message-id"]
            reply = "nack" if rng.random() < 0.1 else "ack"
            try:
                status, _, _ = request(c, "POST", f"/messages/{Q}/{mid}?reply={reply}")
            except (OSError, http.client.HTTPException):
                if reply == "ack":
                    with ledger.lock:
                        ledger.ack_unanswered.add(seq)
                raise
            if reply == "ack" and status == 204:
                with ledger.lock:
                    ledger.acked.add(seq)
    except (OSError, http.client.HTTPException):
        pass
    finally:
        c.close()


def load_then_kill(node: Node, ledger: Ledger, rng: random.Random) -> None:
    stop = threading.Event()
    threads = [threading.Thread(target=pusher, args=(node, ledger, stop)) for _ in range(PUSHERS)]
    threads += [
        threading.Thread(target=puller, args=(node, ledger, stop, random.Random(rng.random()))) for _ in range(PULLERS)
    ]
    for t in threads:
        t.start()
    time.sleep(rng.uniform(0.2, 1.0))
    node.kill()
    stop.set()
    for t in threads:
        t.join(timeout=15)
        assert not t.is_alive(), "a client thread did not end after the kill"


def drain(node: Node, threads: int = 4) -> list[int]:
    """Pull (without ack) until the queue stays empty for 2 s. Pulled messages get a 60 s
    deadline first, so none comes back during the drain; the ones in processing when the node
    was killed (1 s deadline) do come back."""
    props = json.dumps({"timeout": 60}).encode()
    status, _, body = request(node.conn(), "PATCH", f"/properties/{Q}", props)
    assert status in (200, 204), body
    got: list[int] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 60

    def puller() -> None:
        c = node.conn()
        try:
            while time.monotonic() < deadline:
                status, _, body = request(c, "GET", f"/messages/{Q}?t=2")
                if status == 204:
                    return
                assert status == 200, f"pull answered {status}"
                with lock:
                    got.append(int(body.split(b"-")[1]))
        finally:
            c.close()

    workers = [threading.Thread(target=puller) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(timeout=70)
    assert time.monotonic() < deadline, "queue did not drain within 60 s"
    return got


@pytest.mark.parametrize(("fsync", "seed"), [("interval", 1), ("interval", 2), ("always", 3)])
def test_answered_pushes_survive_sigkill_and_acked_messages_never_return(tmp_path: Path, fsync: str, seed: int) -> None:
    rng = random.Random(seed)
    data = tmp_path / "data"
    ledger = Ledger()
    node = Node(data, fsync)
    try:
        # Redeliver quickly after the restart, and never discard a message for its retries.
        props = json.dumps({"retry": "infinity", "timeout": 1}).encode()
        status, _, body = request(node.conn(), "PATCH", f"/properties/{Q}", props)
        assert status in (200, 204), body
        for _ in range(ROUNDS):
            ledger.limit += MAX_PUSHES_PER_ROUND
            load_then_kill(node, ledger, rng)
            node = Node(data, fsync)
        remaining = drain(node)
    finally:
        node.stop()
    assert ledger.answered, "no push was answered before the kills"
    assert len(remaining) == len(set(remaining)), "a message came back twice"
    back = set(remaining) & ledger.acked
    assert not back, f"{len(back)} acked messages came back, e.g. {sorted(back)[:5]}"
    # An ack cut off by the kill may have been done: only those may be missing.
    assert len(ledger.ack_unanswered) <= PULLERS * ROUNDS
    lost = ledger.answered - set(remaining) - ledger.acked - ledger.ack_unanswered
    assert not lost, f"{len(lost)} answered pushes were lost, e.g. {sorted(lost)[:5]}"
    phantoms = set(remaining) - ledger.answered - ledger.push_unanswered
    assert not phantoms, f"messages never pushed came back: {sorted(phantoms)[:5]}"


# -- format-2 records: options (ext), dead-letter transfers, requeues, virtual queues --------------


@dataclass
class ExtLedger:
    pushed: set[int] = field(default_factory=set)
    push_asked: set[int] = field(default_factory=set)
    acked: set[int] = field(default_factory=set)
    ack_asked: set[int] = field(default_factory=set)
    # Per virtual queue: the last answered binding, and bindings asked for since.
    virtual: dict[str, str] = field(default_factory=dict)
    virtual_asked: dict[str, list[str]] = field(default_factory=dict)

    def read(self, line: str) -> None:
        words = line.split()
        if words[0] == "ask":
            kind, arg = words[1], words[2]
            if kind == "push":
                self.push_asked.add(int(arg))
            elif kind == "ack":
                self.ack_asked.add(int(arg))
            else:
                self.virtual_asked.setdefault(arg, []).append(words[3] if len(words) > 3 else "")
        elif words[0] == "push":
            self.pushed.add(int(words[1]))
        elif words[0] == "ack":
            self.acked.add(int(words[1]))
        elif words[0] == "virtual":
            self.virtual[words[1]] = words[2] if len(words) > 2 else ""
            self.virtual_asked[words[1]] = []


def run_driver_then_kill(data: Path, seed: int, first: int, rng: random.Random, ledger: ExtLedger) -> None:
    repo = Path(__file__).resolve().parents[2]
    cmd = [sys.executable, "-m", "tests.store.crash_driver", str(data), str(seed), str(first)]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=repo, env=env)
    assert proc.stdout is not None
    try:
        ready = proc.stdout.readline()
        assert ready == "ready\n", f"driver did not start: {ready!r} {proc.stderr.read() if proc.stderr else ''}"
        timer = threading.Timer(rng.uniform(0.3, 1.0), lambda: os.kill(proc.pid, signal.SIGKILL))
        timer.start()
        for line in proc.stdout:  # every line written before the kill, then EOF
            ledger.read(line)
        timer.join()
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL, f"driver ended by itself: {proc.stderr.read() if proc.stderr else ''}"


async def recovered(data: Path) -> tuple[list[StoredMessage], list[StoredMessage], dict[str, list[str]]]:
    s = DurableStore(data)
    await s.open()
    try:
        return s.messages(CRASH_Q), s.messages(CRASH_DEAD), s.virtual_queues()
    finally:
        await s.close()


@pytest.mark.parametrize("seed", [11, 12])
def test_ext_records_dead_letter_transfers_and_virtual_queues_survive_sigkill(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    data = tmp_path / "data"
    ledger = ExtLedger()
    for round_ in range(ROUNDS):
        run_driver_then_kill(data, rng.randrange(1 << 30), round_ * 10_000_000, rng, ledger)
    queued, dead, virtual = asyncio.run(recovered(data))
    assert ledger.pushed and dead, "the load pushed nothing, or made no dead letter, before the kills"
    seqs = [int(m.items()[0][1].split(b"-")[1]) for m in queued + dead]
    assert len(seqs) == len(set(seqs)), "a message is in both queues, or twice in one: a transfer half done"
    back = set(seqs) & ledger.acked
    assert not back, f"acked messages came back: {sorted(back)[:5]}"
    lost = ledger.pushed - set(seqs) - ledger.acked - ledger.ack_asked
    assert not lost, f"{len(lost)} answered pushes were lost, e.g. {sorted(lost)[:5]}"
    assert set(seqs) <= ledger.pushed | ledger.push_asked, "messages never pushed came back"
    for m in queued + dead:
        seq = int(m.items()[0][1].split(b"-")[1])
        assert m.ext is not None and m.ext.priority == seq % 4 and m.ext.sent_at is not None, m
    for m in dead:
        assert m.ext is not None and m.ext.dead is not None, m
        assert (m.ext.dead.origin, m.ext.dead.reason) == (CRASH_Q, "retries") and m.ext.dead.failures >= 1
    for name in ("v0", "v1"):
        possible = [ledger.virtual.get(name, ""), *ledger.virtual_asked.get(name, [])]
        got = ",".join(virtual.get(name, []))
        assert got in possible, f"virtual queue {name} is {got!r}, answered {possible[0]!r}, asked {possible[1:]}"
