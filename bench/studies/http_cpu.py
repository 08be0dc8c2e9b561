"""CPU per request of pylmq's HTTP path without sockets: push, pull and ack of a 100-byte message
fed as bytes to one server connection (httptools parsing, routing, the queue manager over the
memory store or the durable one, the answer's bytes) with a transport that only collects what is written. What a
loopback socket adds (send, recv, epoll: about as much again on this machine) is not in it.

    python -m bench.studies.http_cpu [--cycles 30000] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import time
from typing import Any

_HOST = b"Host: 127.0.0.1:9980\r\n"
_CT = b"Content-Type: application/octet-stream\r\n"
PUSH = b"POST /messages/q HTTP/1.1\r\n" + _HOST + _CT + b"Content-Length: 100\r\n\r\n" + b"x" * 100
PULL = b"GET /messages/q?t=1 HTTP/1.1\r\n" + _HOST + b"\r\n"


class CollectingTransport:
    """Enough of a transport for the server's connection: keeps what is written."""

    def __init__(self) -> None:
        self.out: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.out.append(data)

    def writelines(self, data: Any) -> None:
        self.out.extend(data)

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def measure(cycles: int, profile: bool, store_kind: str) -> float | None:
    """µs of CPU per request (None when profiling)."""
    from pylmq.api.http import HttpApi
    from pylmq.api.http_server import HttpServer, _Connection
    from pylmq.core.manager import QueueManager
    from pylmq.core.store import Store
    from pylmq.store.durable import DurableStore
    from pylmq.store.memory import MemoryStore

    scratch = tempfile.TemporaryDirectory(prefix="http-cpu-")
    store: Store = MemoryStore()
    if store_kind != "memory":
        store = DurableStore(scratch.name, fsync=store_kind.partition("-")[2])
    await store.open()
    manager = QueueManager(store)
    await manager.start()
    conn = _Connection(HttpServer(HttpApi(manager)))
    transport = CollectingTransport()
    conn.connection_made(transport)  # type: ignore[arg-type]

    def cycle() -> None:
        conn.data_received(PUSH)
        conn.data_received(PULL)
        answer = transport.out[-1]
        at = answer.index(b"x-lmq-message-id: ") + 18
        conn.data_received(b"POST /messages/q/" + answer[at : at + 36] + b"?reply=ack HTTP/1.1\r\n" + _HOST + b"\r\n")
        transport.out.clear()

    for _ in range(2000):  # warm caches (routes, metadata, headers)
        cycle()
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(cycles):
            cycle()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return None
    start = time.process_time()
    for _ in range(cycles):
        cycle()
    return (time.process_time() - start) / cycles / 3 * 1e6


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--cycles", type=int, default=30_000)
    parser.add_argument("--profile", action="store_true", help="cProfile instead of timing")
    parser.add_argument("--store", default="memory", choices=("memory", "durable-interval", "durable-none"))
    args = parser.parse_args()
    import uvloop

    us = uvloop.run(measure(args.cycles, args.profile, args.store))
    if us is not None:
        print(f"{us:.2f} us of CPU per request ({args.cycles} push/pull/ack cycles)")
