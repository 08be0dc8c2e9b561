"""Real Erlang LMQ test peers for tests: start them, drive them, stop them.

A peer (interop/src/lmq_peer.erl) is an `erl` node holding LMQ's Mnesia tables
and exporting LMQ's cluster contract. Tests talk to peers through one hidden
driver node (interop/src/lmq_peer_driver.erl) over a pipe: a request is an
Erlang term on the driver's stdin, the answer a JSON line on its stdout.

Terms cross as: Python ``str`` <-> Erlang atom, ``bytes`` <-> binary,
``tuple`` <-> tuple, ``list`` <-> list, ``int``/``float`` <-> number.
"""

from __future__ import annotations

import base64
import json
import secrets
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
EBIN = ROOT / "interop" / "ebin"
HOST = "127.0.0.1"
# A peer halts by itself after this long, should its test lose track of it.
MAX_LIFE_SECONDS = 600
LOCAL = "$local"

__all__ = [
    "Cluster",
    "Driver",
    "ErlangError",
    "Message",
    "Peer",
    "build_ebin",
    "decode",
    "encode",
    "node_name",
    "running_cluster",
]


class ErlangError(AssertionError):
    """The driver or a peer answered something other than what was asked."""


# ---------------------------------------------------------------- terms


def encode(value: Any) -> str:
    """Python value as Erlang term text (see the module docstring)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, bytes):
        return "<<" + ",".join(str(b) for b in value) + ">>"
    if isinstance(value, tuple):
        return "{" + ",".join(encode(v) for v in value) + "}"
    if isinstance(value, list):
        return "[" + ",".join(encode(v) for v in value) + "]"
    raise TypeError(f"no Erlang term for {value!r}")


def _float_text(value: float) -> str:
    text = repr(value)
    if text in ("inf", "-inf", "nan"):
        raise ValueError(f"Erlang has no float {text}")
    mantissa, _, exponent = text.partition("e")
    if "." not in mantissa:  # Erlang floats need digits on both sides of a dot
        mantissa += ".0"
    return mantissa + ("e" + exponent if exponent else "")


def decode(value: Any) -> Any:
    """The driver's JSON mapping back to Python values."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "t" in value:
            return tuple(decode(v) for v in value["t"])
        if "b" in value:
            return base64.b64decode(value["b"])
        if "m" in value:
            return {decode(k): decode(v) for k, v in value["m"]}
        if "x" in value:
            return Opaque(value["x"])
        raise ErlangError(f"unknown term mapping {value!r}")
    return value


@dataclass(frozen=True)
class Opaque:
    """A pid, reference, fun or port, as Erlang printed it."""

    printed: str


@dataclass(frozen=True)
class Message:
    """A #message{} record as a peer returned it."""

    ts: float
    uuid: bytes
    state: str
    type: str
    retry: int | str
    content: Any

    @classmethod
    def from_term(cls, term: Any) -> Message:
        if not (isinstance(term, tuple) and len(term) == 6 and term[0] == "message"):
            raise ErlangError(f"expected a #message{{}} record, got {term!r}")
        _, (ts, uuid), state, type_, retry, content = term
        return cls(ts, uuid, state, type_, retry, content)

    @property
    def id(self) -> tuple[float, bytes]:
        return (self.ts, self.uuid)

    @property
    def body(self) -> bytes:
        """The body of a normal message."""
        _metadata, body = self.content
        assert isinstance(body, bytes)
        return body

    @property
    def bodies(self) -> list[bytes]:
        """The bodies of a compound message, in push order."""
        return [body for _metadata, body in self.content]


# ---------------------------------------------------------------- processes


def node_name(prefix: str) -> str:
    """A fresh node name: other people's nodes share this host's epmd."""
    return f"{prefix}_{secrets.token_hex(4)}@{HOST}"


def build_ebin() -> None:
    """Compiles the peer (`make interop`), so tests run without make too."""
    subprocess.run(["make", "-s", "-C", str(ROOT), "interop"], check=True, timeout=120)


def _erl(name: str, cookie: str, *args: str) -> list[str]:
    return ["erl", "-name", name, "-setcookie", cookie, "-pa", str(EBIN), *args]


def _stop(*procs: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """Stops the runtimes together (SIGTERM makes erl shut down cleanly)."""
    running = [p for p in procs if p.poll() is None]
    for proc in running:
        proc.terminate()
    for proc in running:
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)


class Driver:
    """The hidden driver node; runs rpc calls for the test, several at once."""

    def __init__(self, cookie: str, log: IO[bytes]) -> None:
        self.name = node_name("drv")
        self._proc = subprocess.Popen(
            _erl(self.name, cookie, "-hidden", "-noshell", "-s", "lmq_peer_driver", "main"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
        )
        self._next_id = 0
        self._results: dict[int, Any] = {}
        self._done = threading.Condition()
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for raw in self._proc.stdout:
            try:
                answer = json.loads(raw)
            except ValueError:
                continue  # a log line of the runtime, not an answer
            if not isinstance(answer, dict) or "id" not in answer:
                continue
            with self._done:
                self._results[answer["id"]] = decode(answer["result"])
                self._done.notify_all()
        with self._done:
            self._done.notify_all()

    def send(self, node: str, module: str, function: str, args: list[Any]) -> int:
        """Starts rpc:call(node, module, function, args); returns its request id."""
        with self._send_lock:
            self._next_id += 1
            request_id = self._next_id
            line = f"{{{request_id},{encode(node)},{encode(module)},{encode(function)},{encode(args)}}}.\n"
            assert self._proc.stdin is not None
            self._proc.stdin.write(line.encode())
            self._proc.stdin.flush()
        return request_id

    def result(self, request_id: int, timeout: float = 30.0) -> Any:
        """The answer to a request, waiting up to `timeout` seconds for it."""
        with self._done:
            answered = self._done.wait_for(
                lambda: request_id in self._results or self._proc.poll() is not None, timeout
            )
            if request_id in self._results:
                return self._results.pop(request_id)
        state = "exited" if self._proc.poll() is not None else "still running"
        raise ErlangError(
            f"expected an answer to request {request_id} within {timeout} s; "
            f"none came (answered={answered}, driver {state})"
        )

    def call(self, node: str, module: str, function: str, *args: Any, timeout: float = 30.0) -> Any:
        return self.result(self.send(node, module, function, list(args)), timeout)

    def close(self) -> None:
        if self._proc.stdin is not None:
            with suppress(OSError):
                self._proc.stdin.close()  # the driver halts at end of input

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self._proc


class Peer:
    """One `erl` node running lmq_peer."""

    def __init__(self, prefix: str, cookie: str, log: IO[bytes]) -> None:
        self.name = node_name(prefix)
        self._proc = subprocess.Popen(
            _erl(
                self.name,
                cookie,
                "-noinput",
                "-s",
                "lmq_peer",
                "start",
                "-lmq_peer_max_life",
                str(MAX_LIFE_SECONDS),
            ),
            stdout=log,
            stderr=log,
        )
        self.driver: Driver | None = None

    def _driver(self) -> Driver:
        if self.driver is None:
            raise ErlangError(f"peer {self.name} has no driver yet")
        return self.driver

    def call(self, function: str, *args: Any, timeout: float = 30.0) -> Any:
        """lmq_peer:function(args...) on this peer (the driver API)."""
        return self._driver().call(self.name, "lmq_peer", function, *args, timeout=timeout)

    def rpc(self, module: str, function: str, *args: Any, timeout: float = 30.0) -> Any:
        """Any module:function(args...) on this peer, e.g. lmq_lib as pylmq calls it."""
        return self._driver().call(self.name, module, function, *args, timeout=timeout)

    def send(self, function: str, *args: Any) -> int:
        """Starts lmq_peer:function(args...) without waiting; see Driver.result."""
        return self._driver().send(self.name, "lmq_peer", function, list(args))

    def push(self, queue: str, body: bytes) -> Any:
        return self.call("push", queue, body)

    def pull(self, queue: str, timeout: float = 0) -> Message | str:
        got = self.call("pull", queue, timeout, timeout=timeout + 30)
        return got if got == "empty" else Message.from_term(got)

    def pull_message(self, queue: str, timeout: float = 0) -> Message:
        got = self.pull(queue, timeout)
        if not isinstance(got, Message):
            raise ErlangError(f"expected a message from {queue} on {self.name}, got {got!r}")
        return got

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self._proc


@dataclass
class Cluster:
    """Two joined peers, a and b (b joined a), their driver, and any peers added later."""

    a: Peer
    b: Peer
    driver: Driver
    cookie: str
    log: IO[bytes]
    extra: list[Peer] = field(default_factory=list)

    def start_peer(self, prefix: str, ready_timeout: float = 30.0) -> Peer:
        """One more peer on its own (not joined), stopped with the cluster."""
        peer = Peer(prefix, self.cookie, self.log)
        self.extra.append(peer)
        _wait_ready(self.driver, peer, ready_timeout)
        return peer


def _wait_ready(driver: Driver, peer: Peer, timeout: float) -> None:
    peer.driver = driver
    ready = driver.call(LOCAL, "lmq_peer_driver", "wait_ready", peer.name, int(timeout * 1000), timeout=timeout + 10)
    if ready != "true":
        raise ErlangError(f"expected peer {peer.name} to start, got {ready!r}")


@contextmanager
def running_cluster(log_dir: Path, ready_timeout: float = 30.0) -> Iterator[Cluster]:
    """Starts peers a and b, joins b to a, and stops everything afterwards."""
    build_ebin()
    cookie = "lmqtest" + secrets.token_hex(8)
    log = (log_dir / "erlang.log").open("ab")
    a = Peer("pa", cookie, log)
    b = Peer("pb", cookie, log)
    driver = Driver(cookie, log)
    cluster = Cluster(a, b, driver, cookie, log)
    try:
        for peer in (a, b):
            _wait_ready(driver, peer, ready_timeout)
        joined = b.call("join", a.name)
        if joined != "ok":
            raise ErlangError(f"expected {b.name} to join {a.name} with ok, got {joined!r}")
        yield cluster
    finally:
        driver.close()
        _stop(driver.process, *(p.process for p in (a, b, *cluster.extra)))
        log.close()
