"""Concurrent load from both sides: every message delivered once within its timeout, none lost."""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from typing import Any

import pytest

from tests.cluster.cluster_helpers import Mixed

pytestmark = [pytest.mark.erl, pytest.mark.slow]

PER_SIDE = 10000  # bounded: 20k messages, pushed and pulled from both sides at once
# The Erlang side's pushes in flight at once, as from that many clients. Not all 10,000 at once:
# the peers then take about 5.5 s to answer them all, every transaction on the queue waits
# behind them in Mnesia's lock and transaction managers, and pylmq's calls, bounded by its
# rpc timeout (5 s), may answer 503 as designed; that overload is not what this test is about.
ERLANG_CLIENTS = 64
DEADLINE = 240.0


def test_concurrent_pushes_and_pulls_from_both_sides_deliver_every_message_exactly_once(
    mixed: Mixed, queue: str
) -> None:
    mixed.p1.client().update_props(queue, {"timeout": 60})
    received: Counter[bytes] = Counter()
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[Any] = []

    def python_pusher(node: Any, prefix: str, n: int) -> None:
        client = node.client()
        for i in range(n):
            client.push(queue, f"{prefix}{i}".encode())

    def python_puller(node: Any) -> None:
        client = node.client()
        while not stop.is_set():
            msg = client.pull(queue, 0.2)
            if msg is None:
                continue
            with lock:
                received[msg.body] += 1
            client.ack(queue, msg.id)

    def erlang_pusher(n: int) -> None:
        driver, peers = mixed.erl.driver, [mixed.erl.a, mixed.erl.b]
        in_flight: deque[int] = deque()

        def answered(rid: int) -> None:
            if driver.result(rid, 60) != "ok":
                errors.append(rid)

        for i in range(n):
            if len(in_flight) == ERLANG_CLIENTS:
                answered(in_flight.popleft())
            in_flight.append(driver.send(peers[i % 2].name, "lmq_peer", "push", [queue, f"e{i}".encode()]))
        for rid in in_flight:
            answered(rid)

    def erlang_puller(peer: Any) -> None:
        while not stop.is_set():
            got = peer.pull(queue, 0.2)
            if got == "empty":
                continue
            with lock:
                received[got.body] += 1
            assert peer.call("ack", queue, got.uuid) == "ok"

    threads = [
        threading.Thread(target=python_pusher, args=(mixed.p1, "p1-", PER_SIDE // 2)),
        threading.Thread(target=python_pusher, args=(mixed.p2, "p2-", PER_SIDE - PER_SIDE // 2)),
        threading.Thread(target=erlang_pusher, args=(PER_SIDE,)),
    ]
    pullers = [threading.Thread(target=python_puller, args=(p,)) for p in (mixed.p1, mixed.p2, mixed.p1, mixed.p2)]
    pullers += [threading.Thread(target=erlang_puller, args=(p,)) for p in (mixed.erl.a, mixed.erl.b)]
    for t in threads + pullers:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    deadline = time.monotonic() + DEADLINE
    while sum(received.values()) < 2 * PER_SIDE and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    for t in pullers:
        t.join(10)
    expected = {f"p1-{i}".encode() for i in range(PER_SIDE // 2)}
    expected |= {f"p2-{i}".encode() for i in range(PER_SIDE - PER_SIDE // 2)}
    expected |= {f"e{i}".encode() for i in range(PER_SIDE)}
    twice = [b for b, n in received.items() if n > 1]
    lost = expected - set(received)
    assert (errors, twice, sorted(lost)[:10], len(lost)) == ([], [], [], 0)
    assert set(received) == expected
