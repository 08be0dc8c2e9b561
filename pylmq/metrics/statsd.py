"""StatsD: the line protocol (pure functions) and a UDP emitter that never blocks.

What pylmq sends, per queue, as LMQ does:

* ``lmq.<queue>.push:1|c|@0.500`` and ``lmq.<queue>.pull:1|c|@0.500``: counters, each event
  sent with probability :data:`SAMPLE_RATE` (0.5, LMQ's), the server scaling by 1/rate;
* ``lmq.<queue>.retention:<ms>|ms|@0.500``: how long the message waited, in **milliseconds**,
  sampled like the counters. LMQ sent seconds under the ``ms`` type and no ``@rate``, which
  skews both the value and the server's count; pylmq sends what the type says;
* ``lmq.<queue>.size:<n>|g`` and ``lmq.<queue>.memory:<bytes>|g`` every ``stats_interval`` ms.

Queue names are escaped (:func:`escape_queue`) so that any name is one Graphite path segment.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
from collections.abc import Callable, Mapping

__all__ = [
    "MAX_PACKET",
    "SAMPLE_RATE",
    "PeriodicGauges",
    "QueueSizes",
    "StatsdEmitter",
    "counter_line",
    "escape_queue",
    "gauge_line",
    "metric_name",
    "timing_line",
    "unescape_queue",
]

log = logging.getLogger("pylmq.metrics")

SAMPLE_RATE = 0.5
# One datagram stays within an Ethernet MTU (1500 - IP and UDP headers), as statsd advises.
MAX_PACKET = 1432

_PLAIN = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def escape_queue(queue: str) -> str:
    """One Graphite path segment for any queue name, reversibly.

    Letters, digits and ``_`` stay; ``-`` becomes ``--``; every other byte of the name's UTF-8
    becomes ``-`` and two upper-case hex digits: ``a.b`` -> ``a-2Eb``, ``Q/N`` -> ``Q-2FN``,
    ``my-queue`` -> ``my--queue``. The result uses only characters that statsd's key sanitizer
    keeps and Graphite allows, and distinct names never collide (``-`` always starts an escape).
    """
    out: list[str] = []
    for byte in queue.encode("utf-8"):
        if byte in _PLAIN:
            out.append(chr(byte))
        elif byte == 0x2D:
            out.append("--")
        else:
            out.append(f"-{byte:02X}")
    return "".join(out)


def unescape_queue(segment: str) -> str:
    """The queue name :func:`escape_queue` made ``segment`` from."""
    raw = bytearray()
    i = 0
    while i < len(segment):
        c = segment[i]
        if c != "-":
            raw += c.encode("ascii")
            i += 1
        elif segment[i + 1 : i + 2] == "-":
            raw.append(0x2D)
            i += 2
        else:
            raw.append(int(segment[i + 1 : i + 3], 16))
            i += 3
    return raw.decode("utf-8")


def metric_name(queue: str, action: str) -> str:
    return f"lmq.{escape_queue(queue)}.{action}"


def _number(value: float) -> str:
    # statsderl prints integers plainly and floats with two decimals
    if isinstance(value, int) or (value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.2f}"


def _rate(rate: float) -> str:
    return f"|@{rate:.3f}" if rate < 1.0 else ""


def counter_line(name: str, value: int = 1, rate: float = 1.0) -> bytes:
    return f"{name}:{value}|c{_rate(rate)}".encode()


def timing_line(name: str, ms: float, rate: float = 1.0) -> bytes:
    return f"{name}:{_number(ms)}|ms{_rate(rate)}".encode()


def gauge_line(name: str, value: float) -> bytes:
    if value < 0:
        # a leading '-' means "decrease by" to statsd; sizes and bytes are never negative
        raise ValueError(f"gauge {name} cannot be negative ({value})")
    return f"{name}:{_number(value)}|g".encode()


class StatsdEmitter:
    """Sends metric lines over UDP without ever waiting.

    Lines are queued and sent together (several per datagram, ``\\n``-separated) at the next
    turn of the event loop, or as soon as a datagram's worth has gathered, on a non-blocking
    socket: a metric costs the request path an append to a list, and one ``send`` that
    cannot block per ~1.4 KB of lines. Send failures (no daemon, full buffer) are counted in :attr:`dropped`,
    never raised. The host name is resolved once, in :meth:`start`; if that fails,
    127.0.0.1 is used, as statsderl does.
    """

    def __init__(
        self,
        host: str = "localhost",
        port: int = 8125,
        sample_rate: float = SAMPLE_RATE,
        rng: random.Random | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.sample_rate = sample_rate
        self._random = (rng or random.Random()).random
        self._sock: socket.socket | None = None
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._flush_scheduled = False
        self.sent_packets = 0
        self.dropped = 0

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_DGRAM)
            family, _, _, _, address = infos[0]
        except (OSError, IndexError) as e:
            log.warning("statsd host %s unresolvable (%s); sending to 127.0.0.1", self.host, e)
            family, address = socket.AF_INET, ("127.0.0.1", self.port)
        sock = socket.socket(family, socket.SOCK_DGRAM)
        sock.setblocking(False)
        try:
            sock.connect(address)
        except OSError:
            sock.close()
            raise
        self._sock = sock

    def close(self) -> None:
        self.flush()
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    # -- the request path: append, never wait --------------------------------------------

    def sampled(self) -> bool:
        """Whether this event is one of the ``sample_rate`` share that is sent."""
        return self.sample_rate >= 1.0 or self._random() <= self.sample_rate

    def increment(self, name: str) -> None:
        if self.sampled():
            self.send(counter_line(name, 1, self.sample_rate))

    def timing(self, name: str, ms: float) -> None:
        if self.sampled():
            self.send(timing_line(name, ms, self.sample_rate))

    def gauge(self, name: str, value: float) -> None:
        self.send(gauge_line(name, value))

    def send(self, line: bytes) -> None:
        if self._sock is None:
            return
        if self._pending and self._pending_bytes + len(line) > MAX_PACKET:
            # A full datagram's worth: send it now rather than let a loop that does not
            # yield (a burst of synchronous work) pile lines up.
            self.flush()
        self._pending.append(line)
        self._pending_bytes += len(line) + 1
        if not self._flush_scheduled:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._flush_scheduled = True
            loop.call_soon(self._scheduled_flush)

    # -------------------------------------------------------------------------------------

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def flush(self) -> None:
        """Send every queued line now (still without blocking)."""
        lines, self._pending = self._pending, []
        self._pending_bytes = 0
        if self._sock is None or not lines:
            return
        packet = bytearray()
        for line in lines:
            if packet and len(packet) + 1 + len(line) > MAX_PACKET:
                self._send_packet(bytes(packet))
                packet.clear()
            if packet:
                packet += b"\n"
            packet += line
        if packet:
            self._send_packet(bytes(packet))

    def _send_packet(self, packet: bytes) -> None:
        assert self._sock is not None
        try:
            self._sock.send(packet)
            self.sent_packets += 1
        except OSError:
            # BlockingIOError (buffer full) or ConnectionRefusedError (ICMP from a previous
            # datagram, nobody listening): metrics are best effort.
            self.dropped += packet.count(b"\n") + 1


QueueSizes = Callable[[], Mapping[str, tuple[int, int]]]
"""Returns ``{queue: (messages, bytes)}`` for the size and memory gauges."""


class PeriodicGauges:
    """Sends ``lmq.<queue>.size`` and ``.memory`` every ``interval_ms``; 0 sends nothing."""

    def __init__(self, emitter: StatsdEmitter, interval_ms: int, sizes: QueueSizes) -> None:
        self.emitter = emitter
        self.interval_ms = interval_ms
        self.sizes = sizes
        self._task: asyncio.Task[None] | None = None

    def report(self) -> None:
        for queue, (size, memory) in self.sizes().items():
            self.emitter.gauge(metric_name(queue, "size"), size)
            self.emitter.gauge(metric_name(queue, "memory"), memory)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000.0)
            try:
                self.report()
            except Exception:
                log.exception("stats gauges failed; trying again in %d ms", self.interval_ms)

    def start(self) -> None:
        if self.interval_ms > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="pylmq-statsd-gauges")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
