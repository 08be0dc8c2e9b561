"""queue_server's JSON protocol, without I/O: framing, requests, answers (docs/queue-server.md).

Shared by the node's listeners (:mod:`pylmq.api.qs_server`) and the client
(:mod:`pylmq.client._qs`).

- Over TCP a request is one JSON object with no length prefix and no delimiter; a
  :class:`Framer` finds each top-level ``{...}`` in the byte stream (braces inside strings and
  escaped quotes do not count), skips whitespace and newlines between objects, and bounds what
  it holds. Each answer is one JSON object followed by ``"\\n"``.
- Over UDP a datagram is one request, and its answer is one datagram with no newline.
- An answer is the request object echoed back (``seq`` and any unknown field included) with
  ``code`` (0 ok, -1 error), ``reason`` when the code is not 0, and the action's results; a
  produce's answer leaves out ``data``, ``delay``, ``ttl`` and ``retry``.

:func:`parse_request` turns one object's bytes into a typed request or an :class:`Invalid`
that says why, carrying what can be echoed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "ACTION_CLEAR",
    "ACTION_CONFIG",
    "ACTION_CONFIRM",
    "ACTION_CONSUME",
    "ACTION_LEADER",
    "ACTION_LIST",
    "ACTION_LIST_LOCAL",
    "ACTION_MONITOR",
    "ACTION_MONITOR_LOCAL",
    "ACTION_PRODUCE",
    "CODE_ERROR",
    "CODE_OK",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_REQUEST",
    "DEFAULT_UDP_MAX",
    "MAX_PRIORITY",
    "PRODUCE_DROPPED",
    "UDP_MAX_LIMIT",
    "Confirm",
    "Consume",
    "Framer",
    "FramingError",
    "Invalid",
    "Leader",
    "ListQueues",
    "Monitor",
    "Produce",
    "QsAction",
    "Request",
    "Unsupported",
    "encode_answer",
    "encode_request",
    "error_answer",
    "parse_request",
]

ACTION_PRODUCE: Final = 1
ACTION_CONSUME: Final = 2
ACTION_CONFIRM: Final = 3
ACTION_MONITOR: Final = 4
ACTION_CONFIG: Final = 5
ACTION_CLEAR: Final = 6
ACTION_LIST: Final = 7
ACTION_LEADER: Final = 8
ACTION_MONITOR_LOCAL: Final = 104
ACTION_LIST_LOCAL: Final = 107

CODE_OK: Final = 0
CODE_ERROR: Final = -1

DEFAULT_MAX_REQUEST: Final = 1 << 20
"""Bytes one TCP request may take (queue_server's 40 KiB is too small for LMQ's bodies)."""
DEFAULT_UDP_MAX: Final = 32 << 10
"""Bytes of a request or answer datagram: above that, TCP (queue_server advises it from 2 KB)."""
DEFAULT_IDLE_TIMEOUT: Final = 30.0
"""Seconds a TCP connection may stay idle before the server closes it (queue_server's 30 s)."""
UDP_MAX_LIMIT: Final = 65507
"""The largest UDP payload over IPv4."""
MAX_PRIORITY: Final = 255

PRODUCE_DROPPED: Final = ("data", "delay", "ttl", "retry")
"""Fields of a produce request its answer does not echo (the body is not sent back)."""

_SPACE: Final = frozenset(b" \t\r\n")
_OUTSIDE = re.compile(rb'[{}"]')  # what changes the state outside a string
_INSIDE = re.compile(rb'["\\]')  # inside a string: its end, or an escape


class FramingError(Exception):
    """The byte stream cannot be split any further: the connection must end after answering."""


class Framer:
    """Finds each top-level JSON object in a TCP byte stream.

    :meth:`feed` returns the complete objects' bytes in order. When an object exceeds
    ``max_size`` bytes or a byte other than whitespace stands between objects, it returns the
    objects before that and sets :attr:`error`; the stream is broken for good (where the next
    request starts is unknown): a later feed raises :class:`FramingError`.
    Only the unfinished object is kept, and it is scanned once: each feed resumes where the
    last one stopped."""

    __slots__ = ("_buf", "_depth", "_in_string", "_pos", "error", "max_size")

    def __init__(self, max_size: int = DEFAULT_MAX_REQUEST) -> None:
        self.max_size = max_size
        self._buf = bytearray()
        self._pos = 0  # where scanning resumes in _buf (may pass its end after a trailing backslash)
        self._depth = 0
        self._in_string = False
        self.error: FramingError | None = None

    @property
    def pending(self) -> int:
        """Bytes of an object not yet complete."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[bytes]:
        if self.error is not None:
            raise FramingError(f"the stream is broken: {self.error}")
        buf = self._buf
        buf += data
        out: list[bytes] = []
        start = 0  # where the object being scanned begins
        pos = self._pos
        n = len(buf)
        try:
            while True:
                if self._depth == 0:
                    while pos < n and buf[pos] in _SPACE:
                        pos += 1
                    if pos >= n:
                        start = pos = n
                        break
                    if buf[pos] != 0x7B:  # "{"
                        raise FramingError(f"expected a JSON object, got byte {bytes(buf[pos : pos + 1])!r}")
                    start = pos
                    pos += 1
                    self._depth = 1
                if self._in_string:
                    m = _INSIDE.search(buf, pos)
                    if m is None:
                        break
                    if m.group() == b"\\":
                        pos = m.end() + 1  # the escaped byte, even a quote, is part of the string
                        continue
                    self._in_string = False
                    pos = m.end()
                    continue
                m = _OUTSIDE.search(buf, pos)
                if m is None:
                    pos = n
                    break
                pos = m.end()
                c = m.group()
                if c == b'"':
                    self._in_string = True
                elif c == b"{":
                    self._depth += 1
                else:
                    self._depth -= 1
                    if self._depth == 0:
                        if pos - start > self.max_size:
                            raise FramingError(f"a request is larger than {self.max_size} bytes")
                        out.append(bytes(buf[start:pos]))
                        start = pos
            if n - start > self.max_size:
                raise FramingError(f"a request is larger than {self.max_size} bytes")
        except FramingError as e:
            self.error = e
            buf.clear()
            self._pos = 0
            return out
        del buf[:start]
        self._pos = pos - start
        return out


# -- requests -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Produce:
    queue: str
    data: str
    delay: float | None  # absolute Unix seconds; None: now
    ttl: float | None  # absolute Unix seconds; None: the default
    retry: int  # 0: at most once; N: redelivered every N seconds until ttl
    priority: int  # pylmq's extension: 0..255, higher first


@dataclass(frozen=True, slots=True)
class Consume:
    queue: str


@dataclass(frozen=True, slots=True)
class Confirm:
    queue: str
    msg_id: int | str  # the integer msg_id, or a message's UUID text


@dataclass(frozen=True, slots=True)
class Monitor:
    queue: str
    local: bool  # 104: answered by this node whatever the cluster


@dataclass(frozen=True, slots=True)
class ListQueues:
    pattern: str  # a substring of the names listed; "" lists all
    local: bool


@dataclass(frozen=True, slots=True)
class Leader:
    pass


@dataclass(frozen=True, slots=True)
class Unsupported:
    action: int


QsAction = Produce | Consume | Confirm | Monitor | ListQueues | Leader | Unsupported


@dataclass(slots=True)
class Request:
    """A valid request: what to do and the object its answer echoes."""

    action: QsAction
    echo: dict[str, Any]


@dataclass(slots=True)
class Invalid:
    """A request answered -1 with ``reason``; ``echo`` is its object when it was one."""

    reason: str
    echo: dict[str, Any] = field(default_factory=dict)


_QUEUE_ACTIONS: Final = frozenset(
    (ACTION_PRODUCE, ACTION_CONSUME, ACTION_CONFIRM, ACTION_MONITOR, ACTION_MONITOR_LOCAL)
)


def _is_int(v: object) -> bool:
    return type(v) is int


def _is_number(v: object) -> bool:
    return type(v) is int or (type(v) is float and v == v and v not in (float("inf"), float("-inf")))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_request(raw: bytes | str) -> Request | Invalid:
    """One request object (a TCP frame or a datagram) as a :class:`Request` or an :class:`Invalid`."""
    try:
        obj = json.loads(raw, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        # RecursionError: nesting deeper than the parser goes; not JSON this node can read.
        return Invalid(f"bad request: not JSON ({type(e).__name__})")
    if type(obj) is not dict:
        return Invalid("bad request: not a JSON object")
    return validate(obj)


def validate(obj: dict[str, Any]) -> Request | Invalid:
    if "action" not in obj:
        return Invalid("field error: missing action", obj)
    action = obj["action"]
    if not _is_int(action):
        return Invalid("field error: action must be an integer", obj)
    if action in _QUEUE_ACTIONS:
        queue = obj.get("queue")
        if type(queue) is not str or not queue:
            return Invalid("field error: queue must be a non-empty string", obj)
        if action == ACTION_PRODUCE:
            return _produce(queue, obj)
        if action == ACTION_CONSUME:
            return Request(Consume(queue), obj)
        if action == ACTION_CONFIRM:
            mid = obj.get("msg_id")
            if (type(mid) is str and mid) or (type(mid) is int and mid > 0):
                return Request(Confirm(queue, mid), obj)
            return Invalid("field error: msg_id must be a positive integer or a message UUID", obj)
        return Request(Monitor(queue, action == ACTION_MONITOR_LOCAL), obj)
    if action in (ACTION_LIST, ACTION_LIST_LOCAL):
        pattern = obj.get("pattern", "")
        if type(pattern) is not str:
            return Invalid("field error: pattern must be a string", obj)
        return Request(ListQueues(pattern, action == ACTION_LIST_LOCAL), obj)
    if action == ACTION_LEADER:
        return Request(Leader(), obj)
    if action in (ACTION_CONFIG, ACTION_CLEAR):
        return Request(Unsupported(action), obj)
    return Invalid(f"invalid action {action}", obj)


def _produce(queue: str, obj: dict[str, Any]) -> Request | Invalid:
    data = obj.get("data")
    if type(data) is not str:
        return Invalid("field error: data must be a string", obj)
    times: list[float | None] = []
    for name in ("delay", "ttl"):
        v = obj.get(name)
        if v is not None and not _is_number(v):
            return Invalid(f"field error: {name} must be a number (absolute Unix seconds)", obj)
        times.append(v)
    retry = obj.get("retry", 0)
    if not _is_int(retry) or retry < 0:
        return Invalid("field error: retry must be an integer >= 0 (seconds between deliveries)", obj)
    priority = obj.get("priority", 0)
    if not _is_int(priority) or not 0 <= priority <= MAX_PRIORITY:
        return Invalid(f"field error: priority must be an integer 0..{MAX_PRIORITY}", obj)
    return Request(Produce(queue, data, times[0], times[1], retry, priority), obj)


# -- answers --------------------------------------------------------------------------------------


def encode_answer(
    echo: dict[str, Any], code: int, reason: str | None = None, results: dict[str, Any] | None = None, *, tcp: bool
) -> bytes:
    """The answer to the request ``echo``: the request's fields, ``code``, ``reason`` when the
    code is not 0, then ``results``. Fields are set, never repeated. TCP answers end in a newline."""
    out = dict(echo)
    if out.get("action") == ACTION_PRODUCE:
        for k in PRODUCE_DROPPED:
            out.pop(k, None)
    out.pop("reason", None)
    out["code"] = code
    if code != CODE_OK:
        out["reason"] = reason or "error"
    if results:
        out.update(results)
    text = json.dumps(out, separators=(",", ":"), allow_nan=False).encode("ascii")
    return text + b"\n" if tcp else text


def error_answer(invalid: Invalid, *, tcp: bool) -> bytes:
    return encode_answer(invalid.echo, CODE_ERROR, invalid.reason, tcp=tcp)


def encode_request(obj: dict[str, Any]) -> bytes:
    """A request as a client sends it (no newline needed: the object ends the frame)."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode("ascii")
