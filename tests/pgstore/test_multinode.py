"""Three pylmq node processes sharing one PostgreSQL, under load from real HTTP clients.

Each test starts three ``python -m pylmq --store postgres`` processes on one throwaway database,
pushes 20,000 uniquely numbered bodies across them and lets six consumers (two per node) pull
and ack until everything is acked: on each node one consumer pulls and acks one message a
request, the other ten (pull_many, then reply_many). The clients keep a ledger of what each request was answered:

- a push answered 2xx is *confirmed*; one answered 503 (or cut off) may or may not have been
  stored: its bodies are pushed again under new names and the old ones are only *unsure*;
- an ack answered 2xx is *acked* (of a batch ack: the ids it says it acked); one answered 503
  (or cut off) may have been committed: the body is *unsure-acked* (if it was not, the message
  comes back after the queue's timeout and is acked then);
- a delivery of a body that was already acked is a violation (an ack that came back).

At the end, every confirmed body was acked exactly once or is unsure-acked, no body was acked
twice, nothing acked came back, and the database holds no message at all (so no unsure body was
left behind either). Scenario (b) kills a node with SIGKILL mid-load, (c) restarts PostgreSQL
mid-load; nodes are never restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg
import pytest

from pylmq.client import AsyncHttpClient
from pylmq.errors import LMQError, MessageNotFound, StoreUnavailable, Unreachable
from tests.pg_helpers import PgServer, serve_pg

pytestmark = pytest.mark.slow

MESSAGES = 20_000
NODES = 3
CONSUMERS_PER_NODE = 2
PUSH_BATCH = 50  # bodies per push_many request
PULL_BATCH = 10  # messages per pull_many request of the batch consumers
QUEUE = "multi"
READY = re.compile(r"pylmq ready .*\bhttp=\('([\d.]+)', (\d+)\)")


@pytest.fixture(scope="module")
def pg() -> Iterator[PgServer]:
    """A PostgreSQL of this module alone: one test restarts it, which must not cut the session's."""
    yield from serve_pg()


class NodeProcess:
    """``python -m pylmq --store postgres`` on free ports; its output goes to a file of ``where``."""

    def __init__(self, dsn: str, where: Path, index: int) -> None:
        where.mkdir(parents=True, exist_ok=True)
        self.log = where / f"node{index}.log"
        argv = [
            sys.executable, "-m", "pylmq", "--store", "postgres", "--dsn", dsn,
            "--http", "127.0.0.1:0", "--rpc", "127.0.0.1:0", "--qs", "off", "--sqs", "off",
            "--statsd", "off", "--stats-interval", "0", "--log-level", "warning",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
        with open(self.log, "wb") as out:
            # Run in the scratch directory: no etc/ or log/ of the checkout is read or written.
            self.proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, cwd=where, env=env)
        self.url = ""

    def wait_ready(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if m := READY.search(self.log.read_text(errors="replace")):
                self.url = f"http://{m.group(1)}:{m.group(2)}"
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"node did not start; its output:\n{self.tail()}")

    def tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill9(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()


@contextlib.contextmanager
def three_nodes(pg: PgServer, where: Path) -> Iterator[tuple[list[NodeProcess], str]]:
    """Three nodes on a fresh database; the nodes and the database's DSN."""
    dsn = pg.new_database()
    nodes: list[NodeProcess] = []
    try:
        # The first node creates the schema; the others start on it at the same time (the
        # migration's advisory lock serialises them).
        nodes = [NodeProcess(dsn, where, i) for i in range(NODES)]
        for n in nodes:
            n.wait_ready(time.monotonic() + 60)
        yield nodes, dsn
    finally:
        for n in nodes:
            n.stop()


@dataclass
class Ledger:
    """What the clients were answered (see the module's docstring)."""

    confirmed: set[str] = field(default_factory=set)
    unsure_push: set[str] = field(default_factory=set)
    delivered: Counter[str] = field(default_factory=Counter)
    acked: Counter[str] = field(default_factory=Counter)
    unsure_ack: set[str] = field(default_factory=set)
    came_back: list[str] = field(default_factory=list)  # deliveries of an acked body
    unavailable: int = 0  # answers 503 store_unavailable
    cut_off: int = 0  # requests to a node that died under them, or refused connections
    stale_acks: int = 0  # acks of a delivery whose timeout had passed (404: it comes back)
    other: list[str] = field(default_factory=list)  # any other error: a failure
    pushes_done: bool = False

    def settled(self) -> bool:
        """Every confirmed body is acked, or its ack's outcome is unknown."""
        return self.pushes_done and all(b in self.acked or b in self.unsure_ack for b in self.confirmed)

    def note(self, e: LMQError) -> None:
        if isinstance(e, StoreUnavailable) and e.reason == "store_unavailable":
            self.unavailable += 1
        elif isinstance(e, Unreachable):
            self.cut_off += 1
        else:
            self.other.append(f"{type(e).__name__}: {e}")


def client_for(nodes: list[NodeProcess], i: int) -> AsyncHttpClient:
    """A client of node ``i`` that moves to the next node when ``i`` refuses connections."""
    urls = [nodes[(i + k) % len(nodes)].url for k in range(len(nodes))]
    return AsyncHttpClient(urls, request_timeout=15.0, connect_timeout=2.0)


async def produce(client: AsyncHttpClient, bodies: list[str], ledger: Ledger, deadline: float) -> None:
    todo = [bodies[k : k + PUSH_BATCH] for k in range(0, len(bodies), PUSH_BATCH)]
    attempt = 0
    while todo and time.monotonic() < deadline:
        batch = todo.pop(0)
        try:
            await client.push_many(QUEUE, [b.encode() for b in batch])
        except LMQError as e:
            ledger.note(e)
            # Stored or not, we cannot tell: those names are unsure; the same payloads go
            # again under new names, so that no body is ever pushed twice.
            ledger.unsure_push.update(batch)
            attempt += 1
            todo.insert(0, [f"{b}.r{attempt}" for b in batch])
            await asyncio.sleep(0.05)
            continue
        ledger.confirmed.update(batch)


async def consume(client: AsyncHttpClient, ledger: Ledger, stop: asyncio.Event, deadline: float, batch: int) -> None:
    """Pull and ack until ``stop``: one message a request when ``batch`` is 1, else up to
    ``batch`` a pull (pull_many) acked in one request (reply_many)."""
    while not stop.is_set() and time.monotonic() < deadline:
        try:
            if batch == 1:
                msg = await client.pull(QUEUE, timeout=0.5)
                got = [] if msg is None else [msg]
            else:
                got = await client.pull_many(QUEUE, batch, timeout=0.5)
        except LMQError as e:
            ledger.note(e)
            await asyncio.sleep(0.05)
            continue
        bodies = {m.id: m.body.decode() for m in got}
        for body in bodies.values():
            if body in ledger.acked:
                ledger.came_back.append(body)
            ledger.delivered[body] += 1
        if not got:
            continue
        try:
            if batch == 1:
                await client.ack(QUEUE, got[0].id)
                ok, stale = [got[0].id], []
            else:
                result = await client.reply_many(QUEUE, "ack", list(bodies))
                ok, stale = list(result.ok), list(result.not_found)
        except MessageNotFound:
            ledger.stale_acks += 1
            continue
        except LMQError as e:
            ledger.note(e)
            ledger.unsure_ack.update(bodies.values())
            continue
        for i in ok:
            ledger.acked[bodies[i]] += 1
        ledger.stale_acks += len(stale)


async def run_load(
    nodes: list[NodeProcess],
    *,
    timeout: float,
    deadline_s: float,
    disturb: Callable[[Ledger], bool] | None = None,
    quiet: float = 0.0,
) -> Ledger:
    """Push MESSAGES bodies across the nodes and consume them with two clients per node until
    every confirmed body is settled, then ``quiet`` seconds more (what comes back after a
    timeout comes back within it). ``disturb(ledger)`` is polled until it returns True."""
    ledger = Ledger()
    deadline = time.monotonic() + deadline_s
    first = client_for(nodes, 0)
    await first.update_props(QUEUE, {"timeout": timeout, "retry": "infinity"})
    await first.close()
    producers = [client_for(nodes, i) for i in range(NODES)]
    consumers = [client_for(nodes, i) for i in range(NODES) for _ in range(CONSUMERS_PER_NODE)]
    stop = asyncio.Event()
    bodies = [f"m{k}" for k in range(MESSAGES)]
    try:
        # Half the consumers take one message a request, the other half PULL_BATCH.
        consuming = [
            asyncio.create_task(consume(c, ledger, stop, deadline, 1 if k % 2 == 0 else PULL_BATCH))
            for k, c in enumerate(consumers)
        ]
        producing = asyncio.gather(*(produce(p, bodies[i::NODES], ledger, deadline) for i, p in enumerate(producers)))
        disturbed = disturb is None
        while time.monotonic() < deadline:
            if not disturbed:
                assert disturb is not None
                disturbed = disturb(ledger)
            if producing.done():
                await producing
                ledger.pushes_done = True
            if disturbed and ledger.settled():
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(quiet)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*consuming), timeout=30)
        if not producing.done():
            producing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await producing
    finally:
        for c in [*producers, *consumers]:
            await c.close()
    return ledger


async def rows_left(dsn: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        n: int = await conn.fetchval("SELECT count(*) FROM lmq.message")
        return n
    finally:
        await conn.close()


def check(ledger: Ledger, left: int) -> None:
    assert ledger.other == [], ledger.other[:10]
    assert ledger.pushes_done, "the producers did not finish before the deadline"
    assert len(ledger.confirmed) >= MESSAGES - len(ledger.unsure_push)
    twice = [b for b, n in ledger.acked.items() if n > 1]
    assert twice == [], f"acked twice: {twice[:10]}"
    assert ledger.came_back == [], f"acked, then delivered again: {ledger.came_back[:10]}"
    lost = [b for b in ledger.confirmed if b not in ledger.acked and b not in ledger.unsure_ack]
    assert lost == [], f"{len(lost)} confirmed bodies never acked, e.g. {lost[:10]}"
    stray = set(ledger.acked) - ledger.confirmed - ledger.unsure_push
    assert stray == set(), f"acked bodies nobody pushed: {sorted(stray)[:10]}"
    assert left == 0, f"{left} messages left in the database"


@contextlib.asynccontextmanager
async def timed(what: str) -> AsyncIterator[None]:
    t0 = time.monotonic()
    yield
    print(f"{what}: {time.monotonic() - t0:.1f}s")


async def test_three_nodes_ack_every_message_exactly_once(pg: PgServer, tmp_path: Path) -> None:
    with three_nodes(pg, tmp_path) as (nodes, dsn):
        async with timed("three nodes, 20,000 messages"):
            ledger = await run_load(nodes, timeout=60.0, deadline_s=300)
        check(ledger, await rows_left(dsn))
        # Nothing went wrong, so nothing is unsure and no message was delivered twice: no two
        # consumers ever got the same delivery.
        assert ledger.unavailable == ledger.cut_off == ledger.stale_acks == 0
        assert ledger.unsure_push == ledger.unsure_ack == set()
        assert len(ledger.confirmed) == MESSAGES and set(ledger.acked) == ledger.confirmed
        assert max(ledger.delivered.values()) == 1
        assert all(n.alive() for n in nodes)


async def test_kill_9_of_a_node_under_load_loses_nothing(pg: PgServer, tmp_path: Path) -> None:
    timeout = 2.0
    with three_nodes(pg, tmp_path) as (nodes, dsn):
        victim = nodes[2]

        def kill_third(ledger: Ledger) -> bool:
            if sum(ledger.acked.values()) < MESSAGES // 3:
                return False
            victim.kill9()
            return True

        async with timed("kill -9 of one node"):
            # quiet: a delivery the dead node made and nobody acked comes back after the timeout
            ledger = await run_load(nodes, timeout=timeout, deadline_s=300, disturb=kill_third, quiet=timeout + 1.5)
        assert not victim.alive()
        check(ledger, await rows_left(dsn))
        # The victim's clients noticed and moved on; its unacked deliveries came back elsewhere.
        assert ledger.cut_off > 0
        assert nodes[0].alive() and nodes[1].alive()


async def test_postgres_restart_under_load_gives_503s_then_recovers(pg: PgServer, tmp_path: Path) -> None:
    timeout = 2.0
    with three_nodes(pg, tmp_path) as (nodes, dsn):
        restarted = asyncio.Event()

        def restart_pg(ledger: Ledger) -> bool:
            if sum(ledger.acked.values()) < MESSAGES // 3:
                return False
            # In a thread: the clients keep running (and meet the outage) while pg_ctl works.
            task = asyncio.get_running_loop().run_in_executor(None, pg.restart)
            task.add_done_callback(lambda _: restarted.set())
            return True

        async with timed("PostgreSQL restart"):
            ledger = await run_load(nodes, timeout=timeout, deadline_s=300, disturb=restart_pg, quiet=timeout + 1.5)
        assert restarted.is_set()
        check(ledger, await rows_left(dsn))
        # Clients were told the store was unavailable (503 store_unavailable), and the same node
        # processes recovered by themselves: none was restarted, none refused a connection.
        assert ledger.unavailable > 0
        assert ledger.cut_off == 0
        assert all(n.alive() for n in nodes)
