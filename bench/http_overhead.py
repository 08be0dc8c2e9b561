"""Where HTTP time goes in workload 3 (push → pull → ack, C producers and C consumers, wrk and
bench/lua/lmq.lua as in the bench): the same load against

  aiohttp  aiohttp's low-level server answering like pylmq with constant answers (no queue):
           what aiohttp's request/response path alone allows on this machine (the reason
           pylmq left it for its own server on httptools, pylmq.api.http_server);
  api      pylmq's HTTP API (HttpServer, HttpApi) over a manager that does nothing;
  memory   a pylmq node with the memory store.

Each server runs in a process of its own, with uvloop, one after the other.

    .venv/bin/python bench/http_overhead.py [--c 16] [--quota 1500] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

KINDS = ("aiohttp", "api", "memory")
_ID = "0b0c5b8e-6b7a-4d6f-9e8a-1c2d3e4f5a6b"


async def _serve_aiohttp(port: int) -> None:
    from aiohttp import web

    accum, body = b'{"accum":"no"}', b"x" * 100

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        if request.method == "POST" and "?" not in request.raw_path:
            await request.read()
            return web.Response(body=accum, content_type="application/json")
        if request.method == "GET":
            request.query.get("t")
            headers = {
                "Content-Type": "application/octet-stream",
                "x-lmq-queue-name": "q",
                "x-lmq-message-id": _ID,
                "x-lmq-message-type": "normal",
                "x-lmq-retry-remaining": "2",
            }
            resp = web.Response(body=body, headers=headers)
            await resp.prepare(request)
            await resp.write_eof()
            return resp
        request.query.get("reply")
        return web.Response(status=204)

    await _run(web.Server(handle, handler_cancellation=True, access_log=None), port)


async def _serve_api(port: int) -> None:
    from pylmq.api.http import HttpApi
    from pylmq.api.http_server import HttpServer
    from pylmq.core.message import Message, MessageType, State, make_item, new_uuid
    from pylmq.core.queue import Delivery

    message = Message((0.0, new_uuid()), State.PROCESSING, MessageType.NORMAL, 2, make_item(b"x" * 100))
    delivery = Delivery("q", message)

    class NoQueues:
        async def push(self, name: str, item: Any) -> str:
            return "no"

        async def pull(self, name: str, timeout: float | None) -> Delivery:
            return delivery

        async def ack(self, name: str, id_: str) -> None:
            return None

    await HttpServer(HttpApi(NoQueues())).start("127.0.0.1", port)  # type: ignore[arg-type]
    print("ready", flush=True)
    await asyncio.Event().wait()


async def _run(server: Any, port: int) -> None:
    from aiohttp import web

    runner = web.ServerRunner(server)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    print("ready", flush=True)
    await asyncio.Event().wait()


def _start(kind: str, port: int, scratch: Path) -> subprocess.Popen[bytes]:
    if kind == "memory":
        argv = [sys.executable, "-m", "pylmq", "--http", f"127.0.0.1:{port}", "--rpc", "127.0.0.1:0",
                "--store", "memory", "--log-level", "warning", "--statsd", "off", "--stats-interval", "0"]  # fmt: skip
    else:
        argv = [sys.executable, __file__, "--serve", kind, "--port", str(port)]
    proc = subprocess.Popen(argv, cwd=scratch, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith((b"ready", b"pylmq ready")):
        proc.kill()
        raise RuntimeError(f"{kind} server did not start: {line!r}")
    return proc


def main(c: int, quota: int, rounds: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.procs import free_port
    from bench.wrk import run_wrk

    wrk = shutil.which("wrk")
    if wrk is None:
        sys.exit("wrk is not installed")
    rates: dict[str, list[float]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory(prefix="http-overhead-") as tmp:
        for _ in range(rounds):
            for kind in KINDS:
                port = free_port()
                proc = _start(kind, port, Path(tmp))
                try:
                    run = run_wrk(wrk, f"http://127.0.0.1:{port}", mode="steady", queue="q", connections=2 * c,
                                  quota=quota, body=100, pull_t="1", producers=c, seconds=30)  # fmt: skip
                finally:
                    proc.send_signal(signal.SIGTERM)
                    proc.wait(30)
                s = run.stats
                rates[kind].append(s["acked"] / s["span"] if s["span"] else 0.0)
    top = max(rates["aiohttp"])
    print(f"w3 c={c}, {c * quota} messages per run, best of {rounds}, {os.cpu_count()} CPUs")
    for kind in KINDS:
        best = max(rates[kind])
        print(f"  {kind:8s} {best:8,.0f} msgs/s  {best / top:5.2f} of aiohttp answering constants")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--c", type=int, default=16, help="producers, and as many consumers")
    parser.add_argument("--quota", type=int, default=1500, help="messages per connection")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--serve", choices=KINDS[:2], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        import uvloop

        serve = _serve_aiohttp if args.serve == "aiohttp" else _serve_api
        uvloop.run(serve(args.port))
    else:
        main(args.c, args.quota, args.rounds)
