"""StatsD line protocol, queue-name escaping, and the UDP emitter against a real socket."""

from __future__ import annotations

import asyncio
import random
import socket
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pylmq.metrics import (
    PeriodicGauges,
    QueueMetrics,
    StatsdEmitter,
    counter_line,
    escape_queue,
    gauge_line,
    metric_name,
    timing_line,
    unescape_queue,
)


class ScriptedRandom(random.Random):
    """random() returns the given values in turn: decides exactly which events are sampled."""

    def __init__(self, values: list[float]) -> None:
        super().__init__(0)
        self._values = values
        self._i = 0

    def random(self) -> float:
        v = self._values[self._i % len(self._values)]
        self._i += 1
        return v


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(5)
    yield sock
    sock.close()


def received(sock: socket.socket, lines: int) -> list[bytes]:
    out: list[bytes] = []
    while len(out) < lines:
        out.extend(sock.recv(65536).split(b"\n"))
    return out


def test_lines_are_exactly_what_statsd_reads() -> None:
    assert counter_line("lmq.q.push", 1, 0.5) == b"lmq.q.push:1|c|@0.500"
    assert counter_line("lmq.q.push") == b"lmq.q.push:1|c"
    assert timing_line("lmq.q.retention", 1234.5678, 0.5) == b"lmq.q.retention:1234.57|ms|@0.500"
    assert timing_line("lmq.q.retention", 250.0) == b"lmq.q.retention:250|ms"
    assert gauge_line("lmq.q.size", 42) == b"lmq.q.size:42|g"
    assert gauge_line("lmq.q.memory", 1544) == b"lmq.q.memory:1544|g"


def test_negative_gauge_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        gauge_line("lmq.q.size", -1)


@pytest.mark.parametrize(
    ("queue", "segment"),
    [
        ("plain_Q1", "plain_Q1"),
        ("a.b", "a-2Eb"),
        ("Q/N", "Q-2FN"),
        ("my-queue", "my--queue"),
        ("sp ace:|@", "sp-20ace-3A-7C-40"),
        ("キュー", "-E3-82-AD-E3-83-A5-E3-83-BC"),
    ],
)
def test_queue_names_escape_into_one_graphite_segment(queue: str, segment: str) -> None:
    assert escape_queue(queue) == segment
    assert metric_name(queue, "push") == f"lmq.{segment}.push"


@given(st.text(min_size=1))
def test_escaping_is_reversible_and_safe(queue: str) -> None:
    segment = escape_queue(queue)
    assert unescape_queue(segment) == queue
    assert all(c.isascii() and (c.isalnum() or c in "_-") for c in segment)


async def test_emitter_sends_sampled_counters_and_timings(listener: socket.socket) -> None:
    draws = ScriptedRandom([0.5, 0.51, 0.5, 0.51, 0.51, 0.5])
    emitter = StatsdEmitter("127.0.0.1", listener.getsockname()[1], rng=draws)
    await emitter.start()
    metrics = QueueMetrics(emitter)
    metrics.on_push("a.b")  # 0.5 <= rate: sent
    metrics.on_push("a.b")  # 0.51: not sent
    metrics.on_pull("a.b", 0.25)  # counter sent, timing not
    metrics.on_pull("a.b", 1.5)  # counter not sent, timing sent
    await asyncio.sleep(0)  # the emitter sends at the next turn of the loop
    assert received(listener, 3) == [
        b"lmq.a-2Eb.push:1|c|@0.500",
        b"lmq.a-2Eb.pull:1|c|@0.500",
        b"lmq.a-2Eb.retention:1500|ms|@0.500",
    ]
    assert emitter.sent_packets == 1, "lines of one loop turn share a datagram"
    emitter.close()


async def test_emitter_splits_packets_under_the_mtu(listener: socket.socket) -> None:
    emitter = StatsdEmitter("127.0.0.1", listener.getsockname()[1], sample_rate=1.0)
    await emitter.start()
    for i in range(200):
        emitter.gauge(f"lmq.q{i:03d}.size", i)
    emitter.flush()
    lines: list[bytes] = []
    while len(lines) < 200:
        packet = listener.recv(65536)
        assert len(packet) <= 1432
        lines.extend(packet.split(b"\n"))
    assert lines == [f"lmq.q{i:03d}.size:{i}|g".encode() for i in range(200)]
    emitter.close()


async def test_no_daemon_listening_loses_metrics_quietly() -> None:
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nobody listens there any more
    emitter = StatsdEmitter("127.0.0.1", port, sample_rate=1.0)
    await emitter.start()
    for _ in range(3):
        emitter.increment("lmq.q.push")
        emitter.flush()
    assert emitter.dropped >= 1, "the refused datagrams are counted"
    emitter.close()


async def test_unresolvable_host_falls_back_to_localhost(listener: socket.socket) -> None:
    emitter = StatsdEmitter("no-such-host.invalid", listener.getsockname()[1], sample_rate=1.0)
    await emitter.start()
    emitter.gauge("lmq.q.size", 1)
    emitter.flush()
    assert listener.recv(100) == b"lmq.q.size:1|g"
    emitter.close()


async def test_periodic_gauges_send_size_and_memory(listener: socket.socket) -> None:
    emitter = StatsdEmitter("127.0.0.1", listener.getsockname()[1])
    await emitter.start()
    gauges = PeriodicGauges(emitter, 10, lambda: {"Q/N": (3, 1544)})
    gauges.start()
    listener.setblocking(False)
    loop = asyncio.get_running_loop()
    packet = await asyncio.wait_for(loop.sock_recv(listener, 65536), 5)
    await gauges.stop()
    emitter.close()
    assert packet.split(b"\n")[:2] == [b"lmq.Q-2FN.size:3|g", b"lmq.Q-2FN.memory:1544|g"]


async def test_stats_interval_zero_sends_no_gauges() -> None:
    emitter = StatsdEmitter("127.0.0.1", 9)
    gauges = PeriodicGauges(emitter, 0, lambda: {"q": (1, 1)})
    gauges.start()
    assert "pylmq-statsd-gauges" not in {t.get_name() for t in asyncio.all_tasks()}
    await gauges.stop()


async def test_a_full_datagram_is_sent_even_if_the_loop_never_yields(listener: socket.socket) -> None:
    emitter = StatsdEmitter("127.0.0.1", listener.getsockname()[1], sample_rate=1.0)
    await emitter.start()
    for i in range(100):  # ~2 KB of lines, no await in between
        emitter.gauge(f"lmq.q{i:03d}.size", i)
    assert emitter.sent_packets == 1, "the first datagram's worth goes out at once"
    first = listener.recv(65536).split(b"\n")
    assert first[0] == b"lmq.q000.size:0|g" and len(b"\n".join(first)) <= 1432
    emitter.close()
