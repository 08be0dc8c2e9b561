"""What StatsD costs the request path: pushes and pulls through the queue manager with
metrics off, with meters only, and with meters plus the StatsD emitter (to a live UDP
listener and to a port where nobody listens). Ratios are measured in one run.

    .venv/bin/python bench/statsd_overhead.py [--messages N]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import time

from pylmq.core.manager import QueueManager
from pylmq.metrics import QueueMetrics, StatsdEmitter
from pylmq.store.memory import MemoryStore

ROUNDS = 5


async def run_once(metrics: QueueMetrics | None, messages: int) -> float:
    """Seconds for ``messages`` push + pull + ack through the manager."""
    store = MemoryStore()
    await store.open()
    manager = QueueManager(store, observer=metrics)
    await manager.start()
    item = ((), b"x" * 64)
    start = time.perf_counter()
    for i in range(messages):
        queue = f"bench.q/{i % 8}"
        await manager.push(queue, item)
        got = await manager.pull(queue, 0)
        assert got is not None
        await manager.ack(queue, got.message.id[1])  # (timestamp, uuid bytes)
    elapsed = time.perf_counter() - start
    await manager.close()
    await store.close()
    return elapsed


async def main(messages: int) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    listener.bind(("127.0.0.1", 0))
    dead = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    dead.bind(("127.0.0.1", 0))
    dead_port = dead.getsockname()[1]
    dead.close()

    live = StatsdEmitter("127.0.0.1", listener.getsockname()[1])
    gone = StatsdEmitter("127.0.0.1", dead_port)
    await live.start()
    await gone.start()
    variants: dict[str, QueueMetrics | None] = {
        "no metrics": None,
        "meters only": QueueMetrics(),
        "meters + statsd (listening)": QueueMetrics(live),
        "meters + statsd (nobody listening)": QueueMetrics(gone),
    }
    best: dict[str, float] = dict.fromkeys(variants, float("inf"))
    for _ in range(ROUNDS):  # interleaved rounds, best of each, to share machine noise
        for name, metrics in variants.items():
            best[name] = min(best[name], await run_once(metrics, messages))
    base = best["meters only"]
    print(f"{messages} x (push, pull, ack), best of {ROUNDS}, memory store")
    for name, seconds in best.items():
        print(f"  {name:36s} {seconds / messages * 1e6:8.2f} us/message   x{seconds / base:.3f} vs meters only")
    print(f"  datagrams sent (listening): {live.sent_packets}, lines dropped: {live.dropped}")
    print(f"  datagrams sent (nobody):    {gone.sent_packets}, lines dropped: {gone.dropped}")
    live.close()
    gone.close()
    listener.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=20_000)
    asyncio.run(main(parser.parse_args().messages))
