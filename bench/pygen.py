"""The Python load generator: worker processes running lanes of clients on uvloop.

A lane is one driver (one connection) with a role and a count; ``window`` concurrent loops on a
lane pipeline its requests where the protocol allows. Workers connect, print ``READY``, wait for
``GO`` on stdin (so that all start together), run until their counts are done or the time bound,
and print ``RESULT <json>`` with counts, latencies and their own CPU time.

    python -m bench.pygen '<spec json>'      (run by :func:`run_lanes`)

Roles: ``push`` (``quota`` pushes), ``drain`` (pull t=0 and ack until empty or ``quota``),
``consume`` (pull t=``pull_t`` and ack until ``quota``, or until an empty answer to a pull sent
once every push lane of the run was done), ``idle`` (long polls with t=30 until stopped),
``probe`` (``quota`` times: one pull t=0, then its ack, timed apart), ``cycle`` (``quota``
rounds of push, pull t=0 and ack on the lane's own queue), ``cycle_wait`` (the same with
pulls that wait up to ``pull_t``, as wrk's ``cycle`` mode: on a queue shared by several lanes a
pull that lost the race for the message just pushed waits for the next one), ``batch`` (the same with
:data:`BATCH` messages a request: a batch push, a pull of up to that many, a batch ack).

A consumer does not stop on the first empty answer while producers still push: the original
LMQ's queue hands messages to waiting pulls only when its process is idle, so under push load a
pull may answer empty while the queue is full. Push lanes, in whichever process, write a marker
file when they end; a consume lane looks at the markers only when it is answered empty (and
then pulls once more: that empty answer may have been given before the last push).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.drivers import Driver, make_driver

__all__ = ["Lane", "LaneSet", "run_lanes"]

_CHECKOUT = Path(__file__).resolve().parents[1]
BATCH = 10  # messages a request of a ``batch`` lane (SQS's batch limit)


@dataclass
class Lane:
    role: str
    queue: str
    quota: int = 0
    window: int = 1


@dataclass
class LaneSet:
    """Counts and latencies (ms) of a set of lanes; merged across workers."""

    pushed: int = 0
    acked: int = 0
    empties: int = 0
    errors: int = 0
    first: float = 0.0
    last: float = 0.0
    lat: list[float] = field(default_factory=list)
    pull_lat: list[float] = field(default_factory=list)
    ack_lat: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    proc_cpu_s: list[float] = field(default_factory=list)  # cpu_s of each worker process merged
    error_text: str = ""

    def merge(self, other: dict[str, Any]) -> None:
        self.pushed += other["pushed"]
        self.acked += other["acked"]
        self.empties += other["empties"]
        self.errors += other["errors"]
        if other["first"] and (not self.first or other["first"] < self.first):
            self.first = other["first"]
        self.last = max(self.last, other["last"])
        self.lat += other["lat"]
        self.pull_lat += other["pull_lat"]
        self.ack_lat += other["ack_lat"]
        self.cpu_s += other["cpu_s"]
        self.proc_cpu_s.append(other["cpu_s"])
        self.error_text = self.error_text or other["error_text"]


# -- worker side ------------------------------------------------------------------------------------


class _Worker:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.body = b"x" * int(spec["body"])
        self.pull_t = float(spec["pull_t"])
        self.res = LaneSet()
        self.deadline = 0.0
        self.markers: str | None = spec.get("markers")
        self.producers = int(spec.get("producers", 0))
        self.producers_done = self.producers == 0

    def _all_pushed(self) -> bool:
        """True once every push lane of the run (all processes) has ended."""
        if not self.producers_done and self.markers is not None:
            self.producers_done = len(os.listdir(self.markers)) >= self.producers
        return self.producers_done

    def _mark(self) -> None:
        now = time.monotonic()
        if not self.res.first:
            self.res.first = now
        self.res.last = now

    async def _lane(self, driver: Driver, lane: Lane, marker: str) -> None:
        left = [lane.quota]

        async def push_loop() -> None:
            while left[0] > 0 and time.monotonic() < self.deadline:
                left[0] -= 1
                t = time.perf_counter()
                await driver.push(lane.queue, self.body)
                self.res.lat.append((time.perf_counter() - t) * 1000)
                self.res.pushed += 1
                self._mark()

        async def take_loop(timeout: float) -> None:
            while left[0] > 0 and time.monotonic() < self.deadline:
                final = self.producers_done  # read before the pull: an empty answer to it is final
                t = time.perf_counter()
                handle = await driver.pull(lane.queue, timeout)
                t2 = time.perf_counter()
                self.res.lat.append((t2 - t) * 1000)
                if handle is None:
                    self.res.empties += 1
                    if lane.role == "drain" or final:
                        return
                    self._all_pushed()
                    continue
                left[0] -= 1
                await driver.ack(lane.queue, handle)
                self.res.lat.append((time.perf_counter() - t2) * 1000)
                self.res.acked += 1
                self._mark()

        async def cycle_loop(timeout: float) -> None:
            # push, then pull and ack what came: one message's whole life per round,
            # each request timed; a round counts as pushed and acked.
            while left[0] > 0 and time.monotonic() < self.deadline:
                left[0] -= 1
                t = time.perf_counter()
                await driver.push(lane.queue, self.body)
                t2 = time.perf_counter()
                handle = await driver.pull(lane.queue, timeout)
                t3 = time.perf_counter()
                self.res.pushed += 1
                if handle is None:
                    self.res.empties += 1
                    continue
                await driver.ack(lane.queue, handle)
                t4 = time.perf_counter()
                self.res.lat += [(t2 - t) * 1000, (t3 - t2) * 1000, (t4 - t3) * 1000]
                self.res.acked += 1
                self._mark()

        async def batch_loop() -> None:
            # cycle_loop with BATCH messages a request; a round counts BATCH pushed and
            # what came back acked.
            bodies = [self.body] * BATCH
            while left[0] > 0 and time.monotonic() < self.deadline:
                left[0] -= 1
                t = time.perf_counter()
                await driver.push_many(lane.queue, bodies)
                t2 = time.perf_counter()
                handles = await driver.pull_many(lane.queue, BATCH)
                t3 = time.perf_counter()
                self.res.pushed += BATCH
                if not handles:
                    self.res.empties += 1
                    continue
                await driver.ack_many(lane.queue, handles)
                t4 = time.perf_counter()
                self.res.lat += [(t2 - t) * 1000, (t3 - t2) * 1000, (t4 - t3) * 1000]
                self.res.acked += len(handles)
                self._mark()

        async def idle_loop() -> None:
            while time.monotonic() < self.deadline:
                if await driver.pull(lane.queue, 30) is not None:
                    self.res.acked += 1

        async def probe_loop() -> None:
            for _ in range(lane.quota):
                t = time.perf_counter()
                handle = await driver.probe_pull(lane.queue)
                t2 = time.perf_counter()
                if handle is None:
                    self.res.empties += 1
                    return
                await driver.ack(lane.queue, handle)
                t3 = time.perf_counter()
                self.res.pull_lat.append((t2 - t) * 1000)
                self.res.ack_lat.append((t3 - t2) * 1000)
                self.res.lat.append((t3 - t) * 1000)
                self.res.acked += 1
                self._mark()

        if lane.role == "push":
            loops = [push_loop() for _ in range(lane.window)]
        elif lane.role in ("drain", "consume"):
            # An integer 0: the original LMQ answers at once only to that (a float 0.0 is
            # 0 ms of waiting, over before its queue process answers); pylmq takes either.
            timeout = 0 if lane.role == "drain" else self.pull_t
            loops = [take_loop(timeout) for _ in range(lane.window)]
        elif lane.role == "idle":
            loops = [idle_loop()]
        elif lane.role == "cycle":
            loops = [cycle_loop(0) for _ in range(lane.window)]
        elif lane.role == "cycle_wait":
            loops = [cycle_loop(self.pull_t) for _ in range(lane.window)]
        elif lane.role == "batch":
            loops = [batch_loop() for _ in range(lane.window)]
        elif lane.role == "probe":
            loops = [probe_loop()]
        else:
            raise ValueError(f"unknown role {lane.role!r}")
        try:
            await asyncio.gather(*loops)
        finally:
            if lane.role == "push" and self.markers is not None:
                Path(self.markers, marker).touch()

    async def main(self) -> None:
        lanes = [Lane(**x) for x in self.spec["lanes"]]
        oldspec = bool(self.spec.get("rpc_oldspec", False))
        drivers = [make_driver(self.spec["driver"], self.spec["addr"], rpc_oldspec=oldspec) for _ in lanes]
        sem = asyncio.Semaphore(64)

        async def connect(d: Driver) -> None:
            async with sem:
                await d.connect()

        await asyncio.gather(*(connect(d) for d in drivers))
        print("READY", flush=True)
        loop = asyncio.get_running_loop()
        go: asyncio.Future[None] = loop.create_future()
        loop.add_reader(sys.stdin.fileno(), _release, go)
        await go
        loop.remove_reader(sys.stdin.fileno())
        sys.stdin.readline()
        self.deadline = time.monotonic() + float(self.spec["seconds"])
        ru0 = resource.getrusage(resource.RUSAGE_SELF)
        me = self.spec.get("index", 0)
        tasks = [
            loop.create_task(self._lane(d, lane, f"{me}-{i}"))
            for i, (d, lane) in enumerate(zip(drivers, lanes, strict=True))
        ]
        # Idle lanes run until told to stop (a second line on stdin) or their time bound.
        stop: asyncio.Future[None] = loop.create_future()
        loop.add_reader(sys.stdin.fileno(), _release, stop)
        _done, _ = await asyncio.wait(
            [*tasks, stop] if any(lane.role == "idle" for lane in lanes) else tasks,
            timeout=float(self.spec["seconds"]) + 30,
            return_when=asyncio.FIRST_COMPLETED if any(lane.role == "idle" for lane in lanes) else "ALL_COMPLETED",
        )
        for t in tasks:
            if not t.done():
                t.cancel()
        for t in tasks:
            with contextlib.suppress(BaseException):
                await t
            if t.done() and not t.cancelled() and t.exception() is not None:
                self.res.errors += 1
                exc = t.exception()
                assert exc is not None
                where = traceback.extract_tb(exc.__traceback__)[-1]
                text = f"{exc!r} at {Path(where.filename).name}:{where.lineno}"
                self.res.error_text = self.res.error_text or text[:300]
        ru1 = resource.getrusage(resource.RUSAGE_SELF)
        self.res.cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        for d in drivers:
            with contextlib.suppress(Exception):
                await d.close()
        print("RESULT " + json.dumps(self.res.__dict__), flush=True)


def _release(fut: asyncio.Future[None]) -> None:
    """A line came on stdin: whoever waits on ``fut`` goes on (once; more lines change nothing)."""
    if not fut.done():
        fut.set_result(None)


def _worker_main(spec_text: str) -> None:
    spec = json.loads(spec_text)
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        runner.run(_Worker(spec).main())


# -- driver side ------------------------------------------------------------------------------------


class Workers:
    """Worker processes for one cell: started and connected, then released together."""

    def __init__(self, driver: str, addr: Any, lanes: list[Lane], *, procs: int, seconds: float,
                 body: int = 100, pull_t: float = 1.0, rpc_oldspec: bool = False) -> None:  # fmt: skip
        procs = max(1, min(procs, len(lanes)))
        self.popens: list[subprocess.Popen[str]] = []
        self.seconds = seconds
        producers = sum(1 for lane in lanes if lane.role == "push")
        # Only consume lanes look at the producers' markers.
        self.markers = (
            tempfile.mkdtemp(prefix="bench-pygen-")
            if producers and any(lane.role == "consume" for lane in lanes)
            else None
        )
        for i in range(procs):
            spec = {
                "driver": driver, "addr": addr, "lanes": [lane.__dict__ for lane in lanes[i::procs]],
                "seconds": seconds, "body": body, "pull_t": pull_t, "rpc_oldspec": rpc_oldspec,
                "index": i, "markers": self.markers, "producers": producers if self.markers else 0,
            }  # fmt: skip
            self.popens.append(
                subprocess.Popen(
                    [sys.executable, "-m", "bench.pygen", json.dumps(spec)],
                    cwd=_CHECKOUT,  # where ``bench`` is importable, whatever the caller's directory
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    start_new_session=True,
                )
            )

    def ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        for p in self.popens:
            assert p.stdout is not None
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
                    raise RuntimeError("load generator did not connect in time")
                line = p.stdout.readline()
                if not line:
                    err = p.stderr.read() if p.stderr else ""
                    raise RuntimeError(f"load generator failed: {err[-800:]}")
                if line.startswith("READY"):
                    break

    def go(self) -> None:
        for p in self.popens:
            assert p.stdin is not None
            p.stdin.write("GO\n")
            p.stdin.flush()

    def stop_idle(self) -> None:
        for p in self.popens:
            with contextlib.suppress(OSError):
                assert p.stdin is not None
                p.stdin.write("STOP\n")
                p.stdin.flush()

    def results(self) -> LaneSet:
        total = LaneSet()
        deadline = time.monotonic() + self.seconds + 60
        try:
            for p in self.popens:
                assert p.stdout is not None
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select([p.stdout], [], [], left)[0]:
                        raise RuntimeError("load generator did not finish in time")
                    line = p.stdout.readline()
                    if not line:
                        err = p.stderr.read() if p.stderr else ""
                        raise RuntimeError(f"load generator failed: {err[-800:]}")
                    if line.startswith("RESULT "):
                        total.merge(json.loads(line[7:]))
                        break
        finally:
            self.kill()
        return total

    def kill(self) -> None:
        for p in self.popens:
            if p.poll() is None:
                p.kill()
            with contextlib.suppress(Exception):
                p.wait(5)
        if self.markers is not None:
            shutil.rmtree(self.markers, ignore_errors=True)


def run_lanes(driver: str, addr: Any, lanes: list[Lane], *, procs: int, seconds: float,
              body: int = 100, pull_t: float = 1.0, rpc_oldspec: bool = False) -> LaneSet:  # fmt: skip
    w = Workers(driver, addr, lanes, procs=procs, seconds=seconds, body=body, pull_t=pull_t, rpc_oldspec=rpc_oldspec)
    try:
        w.ready()
        w.go()
        return w.results()
    finally:
        w.kill()


if __name__ == "__main__":
    _worker_main(sys.argv[1])
