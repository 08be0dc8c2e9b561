"""Erlang distribution cost: Python -> Erlang rpc round trips (sequential and pipelined) with the
Erlang -> Erlang rpc figure measured in the same run as the reference, and the codec on a
100-record LMQ message list.

    .venv/bin/python bench/dist_rpc.py [--calls N]

Needs ``erl`` and an epmd on 127.0.0.1:4369 (started if missing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "erlang"))

# tests/erlang is on the path only at run time (above): mypy cannot follow these two.
from dist_helpers import erl_eval  # type: ignore[import-not-found]
from otp_nodes import COOKIE, ErlNode, Runtime, ensure_epmd  # type: ignore[import-not-found]

from pylmq.erlang import Atom, Node, decode, encode


def codec(rounds: int = 2000) -> tuple[float, float, int]:
    def record(i: int) -> tuple[object, ...]:
        return (
            Atom("message"),
            (1.7e9 + i, os.urandom(16)),
            Atom("available"),
            Atom("normal"),
            3,
            ([(b"content-type", b"text/plain")], b"x" * 100),
        )

    msgs = [record(i) for i in range(100)]
    raw = encode(msgs)
    t = time.perf_counter()
    for _ in range(rounds):
        encode(msgs)
    enc = (time.perf_counter() - t) / rounds
    t = time.perf_counter()
    for _ in range(rounds):
        decode(raw)
    dec = (time.perf_counter() - t) / rounds
    return enc, dec, len(raw)


async def main(calls: int) -> None:
    enc, dec, size = codec()
    print(f"codec, 100 LMQ message records ({size} bytes): encode {enc * 1e6:.0f} us, decode {dec * 1e6:.0f} us")
    ensure_epmd()
    rt = Runtime("system", shutil.which("erl") or "erl")
    a = ErlNode(rt, f"ba{secrets.token_hex(3)}").start()
    b = ErlNode(rt, f"bb{secrets.token_hex(3)}").start()
    node = await Node(f"bpy{secrets.token_hex(3)}@127.0.0.1", COOKIE, listen_host="127.0.0.1").start()
    try:
        await node.rpc(a.name, "erlang", "node", [])
        t = time.perf_counter()
        for _ in range(calls):
            await node.rpc(a.name, "erlang", "node", [])
        seq = (time.perf_counter() - t) / calls
        t = time.perf_counter()
        await asyncio.gather(*(node.rpc(a.name, "erlang", "node", []) for _ in range(calls)))
        pipe = (time.perf_counter() - t) / calls
        code = (
            f"rpc:call('{b.name}', erlang, node, []), T0 = erlang:monotonic_time(microsecond), "
            f"[rpc:call('{b.name}', erlang, node, []) || _ <- lists:seq(1, {calls})], "
            f"erlang:monotonic_time(microsecond) - T0."
        )
        erl_us = await erl_eval(node, a.name, code, timeout=120) / calls
        print(f"Python -> Erlang rpc, sequential: {1 / seq:,.0f} calls/s ({seq * 1e6:.0f} us/call)")
        print(f"Python -> Erlang rpc, pipelined:  {1 / pipe:,.0f} calls/s ({pipe * 1e6:.0f} us/call)")
        print(f"Erlang -> Erlang rpc (reference): {1e6 / erl_us:,.0f} calls/s ({erl_us:.0f} us/call)")
        print(f"ratio sequential Python/Erlang: {erl_us / (seq * 1e6):.2f}x the Erlang rate")
    finally:
        await node.stop()
        a.stop()
        b.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    asyncio.run(main(min(args.calls, 100_000)))
