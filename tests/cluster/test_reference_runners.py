"""Queue runners (pylmq/cluster/runner.py) on real Erlang LMQ nodes (the reference kit).

Two kinds of tests. In-process ones drive :class:`QueueRunners` from a hidden node of the test's
own, joined to nothing, against the module's cluster (two real LMQ nodes): order and exactly
once, a runner killed with calls in flight, idle runners stopped (an injectable clock). The
others run the pylmq node as a process joined to real LMQ nodes: a runner killed by an operator
(``exit(Pid, kill)`` through ``lmq-ref eval``), a deleted queue, the runner's peer suspended or
killed, and pylmq killed -9, after which no runner may be left on any Erlang node.

A runner is found on an Erlang node by the key ``pylmq_queue_runner`` in its process
dictionary and by its initial call, ``erl_eval:exprs/2``. Skipped with the reason where the kit
or OTP 25 is missing (see lmq_reference.py).
"""

from __future__ import annotations

import asyncio
import secrets
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path

import pytest

from pylmq.client import HttpClient, PushOptions
from pylmq.cluster.cluster import SETTLE_FOR, SHARED_FOR
from pylmq.cluster.mnesia_store import RUNNER_HELD
from pylmq.cluster.records import item_to_term, message_from_term
from pylmq.cluster.runner import RETIRED_FOR, QueueRunners
from pylmq.core.message import make_item
from pylmq.erlang import Atom, Node, start_node
from pylmq.erlang.etf import EncodeError
from pylmq.erlang.process import Process
from pylmq.erlang.terms import Term
from pylmq.errors import ClusterError, NotRun, RunnerLost
from tests.cluster.lmq_reference import RefCluster, RefNode, reference_cluster, wait_for
from tests.cluster.test_reference_faults import (
    PY_ARGS,
    drain,
    fresh_queue,
    load_through_a_kill,
    run_load,
    status,
    try_timed,
)
from tests.store.store_helpers import body_of

pytestmark = [pytest.mark.erl, pytest.mark.slow]

A = Atom
OK, EMPTY = A("ok"), A("empty")

# The runners on a node: by the key they keep, of one queue or of any, and by initial call.
RUNNERS_OF = (
    "[P || P <- erlang:processes(), {{dictionary, D}} <- [erlang:process_info(P, dictionary)],"
    " {{pylmq_queue_runner, {{_, Q}}}} <- D, {match}]"
)
ERL_EVAL_PROCS = (
    "length([P || P <- erlang:processes(),"
    " erlang:process_info(P, initial_call) =:= {initial_call, {erl_eval, exprs, 2}}])"
)


def runners_on(node: RefNode, queue: str | None = None) -> list[str]:
    """The pids (as printed) of the queue runners on ``node``: of ``queue``, or of every queue."""
    match = "true" if queue is None else f'Q =:= <<"{queue}">>'
    out = node.eval(f"[erlang:pid_to_list(P) || P <- {RUNNERS_OF.format(match=match)}]")
    return [x.strip().strip('"') for x in out.replace("\n", "").strip("[] ").split(",") if x.strip()]


def erl_eval_processes(node: RefNode) -> int:
    return int(node.eval(ERL_EVAL_PROCS))


def spawn_runner(py: HttpClient, q: str) -> None:
    """A push, pull and ack through pylmq: the pull and the ack run in the queue's runner."""
    py.push(q, b"spawn", "text/plain")
    got = py.pull(q, 5)
    assert got is not None
    py.ack(q, got.id)


def kill_runners(node: RefNode, queue: str) -> int:
    """``exit(Pid, kill)`` of ``queue``'s runners on ``node``, as an operator would; how many."""
    runners = RUNNERS_OF.format(match=f'Q =:= <<"{queue}">>')
    return int(node.eval(f"length([exit(P, kill) || P <- {runners}])"))


@pytest.fixture
async def dist(ref: RefCluster) -> AsyncIterator[Node]:
    node = await start_node(f"rt_{secrets.token_hex(4)}@127.0.0.1", ref.cookie)
    try:
        yield node
    finally:
        await node.stop()


async def new_queue(dist: Node, peer: str) -> tuple[str, Atom]:
    name = "rq_" + secrets.token_hex(4)
    assert await dist.rpc(peer, "lmq_lib", "create", [A(name)], 10) == OK
    return name, A(name)


OnQueue = tuple[str, str, Atom, QueueRunners]
"""A fresh queue's peer, name and table, and the runners that call it."""


@pytest.fixture
async def on_queue(ref: RefCluster, dist: Node) -> AsyncIterator[OnQueue]:
    """A new queue on the second Erlang node, and a :class:`QueueRunners` closed afterwards."""
    peer = ref.erl[1].name
    name, atom = await new_queue(dist, peer)
    runners = QueueRunners(dist)
    try:
        yield peer, name, atom, runners
    finally:
        runners.close()


def enqueue_args(atom: Atom, body: bytes) -> list[Term]:
    return [atom, item_to_term(make_item(body)), [(A("accum"), 0), (A("retry"), 2)]]


# ------------------------------------------------------------------ in-process, against real LMQ nodes


async def test_many_calls_in_flight_on_one_queue_run_in_order_each_answered_exactly_once(
    ref: RefCluster, dist: Node, on_queue: OnQueue
) -> None:
    peer, name, atom, runners = on_queue
    n = 300
    bodies = [f"m{i:04}".encode() for i in range(n)]
    pushes = [runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b), 30) for b in bodies]
    assert await asyncio.gather(*pushes) == [OK] * n
    assert runners.batched_calls > 0, "expected calls in flight together to run in batches"
    pulls = [runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 30) for _ in range(n + 1)]
    got = await asyncio.gather(*pulls)
    assert got[-1] is EMPTY, "expected one dequeue past the last message to find the queue empty"
    assert [body_of(message_from_term(m)) for m in got[:-1]] == bodies, "expected every message once, in order"
    assert len(runners) == 1
    assert await asyncio.to_thread(runners_on, ref.erl[1], name) != [], "expected the queue's runner on its peer"
    runners.close()
    left = await asyncio.to_thread(wait_for, lambda: runners_on(ref.erl[1], name), lambda r: r == [], 10)
    assert left == [], "expected the runner to end when told to stop"


async def test_a_runner_killed_with_calls_in_flight_fails_them_at_once_and_the_next_call_spawns_another(
    ref: RefCluster, dist: Node, on_queue: OnQueue
) -> None:
    peer, name, atom, runners = on_queue
    timeout = 30.0
    # A call that holds the runner, and one queued behind it: both in flight when it is killed.
    held = asyncio.ensure_future(runners.call(name, peer, "timer", "sleep", [20_000], timeout))
    queued = asyncio.ensure_future(runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b"x"), timeout))
    await asyncio.sleep(0.2)
    pid = runners.pid_of(name)
    assert pid is not None
    began = time.monotonic()
    await dist.rpc(peer, "erlang", "exit", [pid, A("kill")], 10)  # an operator's exit(Pid, kill)
    results = await asyncio.gather(held, queued, return_exceptions=True)
    took = time.monotonic() - began
    # The one it was running may have done anything; the one behind it certainly did nothing.
    assert isinstance(results[0], RunnerLost) and isinstance(results[1], NotRun), results
    assert took < timeout / 3, f"expected the calls to fail when the runner died, not at their timeout ({took:.1f} s)"
    assert "exited: killed" in str(results[0])
    assert len(runners) == 0
    assert await runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b"y"), timeout) == OK
    again = runners.pid_of(name)
    assert again is not None and again != pid, "expected a new runner"
    got = await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], timeout)
    assert body_of(message_from_term(got)) == b"y", "the killed runner's queued enqueue must not have run"


async def test_a_call_that_times_out_kills_its_runner_and_the_calls_behind_it_are_known_not_run(
    ref: RefCluster, dist: Node, on_queue: OnQueue
) -> None:
    peer, name, atom, runners = on_queue
    held = asyncio.ensure_future(runners.call(name, peer, "timer", "sleep", [20_000], 1.0))
    await asyncio.sleep(0.05)
    # Sent right behind it, so that its own timeout comes with the first one's.
    queued = [
        asyncio.ensure_future(runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b"x%d" % i), 1.0))
        for i in range(3)
    ]
    pid = runners.pid_of(name)
    results = await asyncio.gather(held, *queued, return_exceptions=True)
    assert isinstance(results[0], TimeoutError), results
    assert all(isinstance(r, NotRun) for r in results[1:]), results
    gone = await asyncio.to_thread(wait_for, lambda: runners_on(ref.erl[1], name), lambda r: r == [], 10)
    assert gone == [] and runners.pid_of(name) is None, "expected the timed-out runner killed"
    assert await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 5) is EMPTY, "no enqueue may have run"
    assert runners.pid_of(name) not in (None, pid)
    runners.close()


@pytest.mark.parametrize("outcome", ["answer", "runner end"])
async def test_an_outcome_that_comes_in_the_pass_where_the_calls_bound_passed_is_the_calls_outcome(
    on_queue: OnQueue, outcome: str
) -> None:
    # The bound is a timer that fails the call's future; an answer or the runner's end that the
    # loop handles after that timer, before the caller wakes, must still reach the caller.
    peer, name, _atom, runners = on_queue
    call = asyncio.ensure_future(runners.call(name, peer, "timer", "sleep", [300], 5.0))
    while not runners._calls:
        await asyncio.sleep(0.01)
    [(ref, (runner, fut))] = runners._calls.items()
    runners._expire(ref, fut)
    if outcome == "answer":
        runners._on_message(runners._proc, (ref, A("early")))
        assert await call is A("early")
    else:
        runners._fail(runner, RunnerLost("its runner exited"))
        with pytest.raises(RunnerLost):
            await call
    assert not runners._expired and ref not in runners._calls, "nothing of the call is left behind"
    if outcome == "answer":
        # The runner's real answer, later, finds nothing to settle; the runner still serves.
        assert await runners.call(name, peer, "erlang", "length", [[1, 2]], 5.0) == 2


async def test_a_call_whose_arguments_cannot_be_sent_fails_at_once_and_leaves_nothing_behind(
    on_queue: OnQueue,
) -> None:
    peer, name, _atom, runners = on_queue
    assert await runners.call(name, peer, "erlang", "length", [[1]], 5.0) == 1  # its runner is up
    with pytest.raises(EncodeError):
        await runners.call(name, peer, "erlang", "length", [[object()]], 5.0)
    assert not runners._calls and not runners._runners[name].calls
    assert await runners.call(name, peer, "erlang", "length", [[1, 2, 3]], 5.0) == 3


def hold_table_lock(node: RefNode, table: str, ms: int) -> None:
    """Another transaction on ``node`` write-locks ``table`` for ``ms`` milliseconds."""
    lock = f"mnesia:transaction(fun() -> mnesia:lock({{table, '{table}'}}, write), timer:sleep({ms}) end)"
    node.eval(f"Self = self(), spawn(fun() -> Self ! go, {lock} end), receive go -> timer:sleep(100) end")


async def test_a_runner_killed_during_a_batch_fails_the_batch_as_unknown_and_the_calls_behind_as_not_run(
    ref: RefCluster, dist: Node, on_queue: OnQueue
) -> None:
    peer, name, atom, runners = on_queue
    await asyncio.to_thread(hold_table_lock, ref.erl[1], name, 3000)
    # Three enqueues wait behind a call that runs alone, then run as one batch (held by the lock).
    first = asyncio.ensure_future(runners.call(name, peer, "timer", "sleep", [300], 30))
    batch = [
        asyncio.ensure_future(runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b"b%d" % i), 30))
        for i in range(3)
    ]
    assert await first is OK
    await asyncio.sleep(0.2)
    assert runners.batched_calls == 3, "expected the three enqueues announced as one batch"
    behind = [
        asyncio.ensure_future(runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b"n%d" % i), 30))
        for i in range(2)
    ]
    await asyncio.sleep(0.2)
    pid = runners.pid_of(name)
    assert pid is not None
    await dist.rpc(peer, "erlang", "exit", [pid, A("kill")], 10)
    results = await asyncio.gather(*batch, *behind, return_exceptions=True)
    # Any call of the batch may have committed with it; the calls behind it certainly did not.
    assert all(isinstance(r, RunnerLost) for r in results[:3]), results
    assert all(isinstance(r, NotRun) for r in results[3:]), results
    await asyncio.sleep(3)  # the lock is released
    got = []
    while (m := await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 10)) is not EMPTY:
        got.append(body_of(message_from_term(m)))
    assert not {b"n0", b"n1"} & set(got), f"calls known not run were run: {got}"


async def test_a_batch_whose_transaction_aborts_runs_its_calls_one_by_one(
    ref: RefCluster, dist: Node, on_queue: OnQueue
) -> None:
    peer, name, atom, runners = on_queue
    first = asyncio.ensure_future(runners.call(name, peer, "timer", "sleep", [300], 30))
    raising = [atom, item_to_term(make_item(b"bad")), A("not_a_list")]  # its options are not a list
    args = [enqueue_args(atom, b"a"), raising, enqueue_args(atom, b"c")]
    calls = [asyncio.ensure_future(runners.call(name, peer, "lmq_lib", "enqueue", a, 30)) for a in args]
    assert await first is OK
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert runners.batched_calls == 3, "expected the three enqueues run as one batch"
    # The raising call aborted the batch's transaction: nothing of it committed, and each call
    # ran again alone, with its own answer.
    assert results[0] is OK and results[2] is OK, results
    assert isinstance(results[1], ClusterError) and "raised" in str(results[1]), results
    got = [body_of(message_from_term(await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 10)))]
    got.append(body_of(message_from_term(await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 10))))
    assert got == [b"a", b"c"], "expected each good enqueue exactly once, in order"
    assert await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 10) is EMPTY
    runners.close()


async def run_behind_a_sleep(
    runners: QueueRunners, name: str, peer: str, calls: list[tuple[str, list[Term]]], *, table_lock: bool = False
) -> list[Term | BaseException]:
    """``calls`` sent together while the runner sleeps, so that they wait together (a batch)."""
    first = asyncio.ensure_future(runners.call(name, peer, "timer", "sleep", [300], 30))
    futs = [
        asyncio.ensure_future(runners.call(name, peer, "lmq_lib", f, a, 30, table_lock=table_lock)) for f, a in calls
    ]
    assert await first is OK
    return await asyncio.gather(*futs, return_exceptions=True)


async def test_a_batch_is_answered_in_one_message_after_its_notice(
    ref: RefCluster, dist: Node, on_queue: OnQueue
) -> None:
    # One send on the peer and one frame here for the whole batch, not one per call.
    peer, name, atom, runners = on_queue
    received: list[Term] = []
    handler = runners._proc.handler
    assert handler is not None

    def record(proc: Process, msg: Term) -> None:
        received.append(msg)
        handler(proc, msg)

    runners._proc.handler = record
    calls = [("enqueue", enqueue_args(atom, f"b{i}".encode())) for i in range(3)] + [("dequeue", [atom, 30])]
    results = await run_behind_a_sleep(runners, name, peer, calls)
    assert results[:3] == [OK] * 3
    assert body_of(message_from_term(results[3])) == b"b0"
    kinds = [m[0] if isinstance(m[0], Atom) else "answer" for m in received if isinstance(m, tuple)]
    assert kinds == ["answer", A("lmq_batch"), A("lmq_answers")], received
    notice, answers = received[1], received[2][1]
    assert notice[2] == 4 and runners.batched_calls == 4
    refs = [r for r, _ in answers]
    assert len(set(refs)) == 4 and notice[1] == refs[0], "expected the four calls' answers, the first one first"
    assert not runners._calls, "expected no call left waiting"
    runners.close()


async def test_a_batch_under_the_table_lock_answers_and_writes_what_its_calls_would_one_by_one(
    ref: RefCluster, dist: Node, on_queue: OnQueue
) -> None:
    peer, name, atom, runners = on_queue
    assert await runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b"a"), 10) is OK
    delivery = message_from_term(await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 10))
    calls = [
        ("done", [atom, delivery.id[1]]),
        ("enqueue", enqueue_args(atom, b"b")),
        ("enqueue", enqueue_args(atom, b"c")),
        ("dequeue", [atom, 30]),
    ]
    results = await run_behind_a_sleep(runners, name, peer, calls, table_lock=True)
    assert results[:3] == [OK] * 3, results
    assert body_of(message_from_term(results[3])) == b"b"
    assert runners.batched_calls == 4, "expected the four calls in one batch"
    assert await asyncio.to_thread(runner_table_lock, ref.erl[1:], name) == "[true]"
    rows = await rows_of(dist, peer, atom)  # (state, type, retry, content), in key order
    assert [(r[0], r[3]) for r in rows if isinstance(r, tuple)] == [
        (A("available"), ([], b"c")),
        (A("processing"), ([], b"b")),
    ], rows
    # Told otherwise, the next batch takes row locks again.
    more = [("enqueue", enqueue_args(atom, b"d")), ("dequeue", [atom, 30])]
    results = await run_behind_a_sleep(runners, name, peer, more, table_lock=False)
    assert results[0] is OK and body_of(message_from_term(results[1])) == b"c"
    assert await asyncio.to_thread(runner_table_lock, ref.erl[1:], name) == "[false]"
    runners.close()


@pytest.mark.parametrize("settle", ["done", "release", "put_back", "retain"])
async def test_a_pull_batched_behind_a_settle_answers_what_it_would_alone(
    ref: RefCluster, dist: Node, on_queue: OnQueue, settle: str
) -> None:
    # The settle deletes the delivery's row, due later than the row written before the pull (the
    # push, or the settle's own row moved to now): Mnesia's first/next inside a transaction skip
    # such a row when the row they pass is one deleted in the same transaction. Alone, the pull
    # finds the row committed.
    peer, name, atom, runners = on_queue
    assert await runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b"p"), 10) is OK
    delivery = message_from_term(await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 10))
    uuid = delivery.id[1]
    settle_args: list[Term] = [atom, uuid, 60] if settle == "retain" else [atom, uuid]
    calls = [(settle, settle_args), ("enqueue", enqueue_args(atom, b"b")), ("dequeue", [atom, 30])]
    before = runners.batched_calls
    results = await run_behind_a_sleep(runners, name, peer, calls)
    assert results[:2] == [OK, OK], results
    pulled = results[2]
    assert pulled is not EMPTY and not isinstance(pulled, BaseException), f"the pull missed a message: {results}"
    # Released or put back, the delivery is due again (older than the push): it comes first.
    expected = b"p" if settle in ("release", "put_back") else b"b"
    assert body_of(message_from_term(pulled)) == expected
    # An ack or ext runs after the pull in the batch: all three in one. After a release or a
    # put-back (a row due now, which the pull must see) the pull starts the next batch.
    together = 2 if settle in ("release", "put_back") else 3
    assert runners.batched_calls - before == together, "expected the calls to wait together"
    runners.close()


async def rows_of(dist: Node, peer: str, atom: Atom) -> list[Term]:
    """The rows of a queue table on ``peer``, in key order, without their ids (new at each run)."""
    rows = await dist.rpc(peer, "ets", "tab2list", [atom], 10)
    assert isinstance(rows, list)
    return [r[2:] for r in rows if isinstance(r, tuple)]


async def test_a_batch_of_every_kind_of_call_answers_and_writes_what_its_calls_would_one_by_one(
    ref: RefCluster, dist: Node
) -> None:
    # Two queues in the same state; the same calls run one by one on one, together on the
    # other: settles of deliveries chained on the same row (a row the batch wrote is found by
    # the next call's scan), accumulated pushes (a qlc cursor on a row written in the batch),
    # and a pull behind them all, which must find the row put back.
    peer = ref.erl[1].name
    runners = QueueRunners(dist)
    accum = [(A("accum"), 5000), (A("retry"), 2)]

    async def prepare() -> tuple[str, Atom, list[tuple[str, list[Term]]]]:
        name, atom = await new_queue(dist, peer)
        for b in (b"p1", b"p2", b"p3"):
            assert await runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b), 10) is OK
        pulled = [await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 10) for _ in range(3)]
        u1, u2, u3 = (message_from_term(m).id[1] for m in pulled)
        x, y = item_to_term(make_item(b"x")), item_to_term(make_item(b"y"))
        calls: list[tuple[str, list[Term]]] = [
            ("retain", [atom, u1, 60]),
            ("done", [atom, u1]),
            ("put_back", [atom, u2]),
            ("release", [atom, u2]),  # put back: no longer a delivery
            ("enqueue", [atom, x, accum]),
            ("enqueue", [atom, y, accum]),  # joins x's row
            ("release", [atom, u3]),
            ("dequeue", [atom, 30]),
        ]
        return name, atom, calls

    def answer(term: Term) -> Term:
        try:
            m = message_from_term(term)
        except ValueError:
            return term
        return (m.state, body_of(m))

    alone_name, alone_atom, alone_calls = await prepare()
    alone = [answer(await runners.call(alone_name, peer, "lmq_lib", f, args, 10)) for f, args in alone_calls]
    name, atom, calls = await prepare()
    before = runners.batched_calls
    together = await run_behind_a_sleep(runners, name, peer, calls)
    assert alone[-1] != EMPTY, alone
    assert [answer(t) for t in together] == alone
    assert await rows_of(dist, peer, atom) == await rows_of(dist, peer, alone_atom)
    assert runners.batched_calls - before == 7, "expected the settles and pushes in one batch, the pull in the next"
    runners.close()


async def test_runners_killed_again_and_again_under_batches_never_report_a_call_that_ran_as_not_run(
    ref: RefCluster, dist: Node, on_queue: OnQueue
) -> None:
    # Waves of pushes and acks in flight together (batches), the runner killed under each wave.
    # A call answered ran once; one failed NotRun did not run at all; one lost may have run.
    # (A batch's call wrongly failed NotRun shows only when the kill falls between its commit
    # and its answers: test_a_runner_killed_during_a_batch_... checks the classification itself.)
    peer, name, atom, runners = on_queue
    for i in range(40):
        assert await runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, b"d%02d" % i), 10) is OK
    pulled = [await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 60], 10) for _ in range(40)]
    deliveries = [message_from_term(m).id[1] for m in pulled]
    # Another transaction write-locks the table 15 ms in every 25 for a few seconds: batches wait
    # inside their transaction, announced and not answered, when the kills come.
    lock = f"mnesia:transaction(fun() -> mnesia:lock({{table, '{name}'}}, write), timer:sleep(15) end)"
    locker = f"spawn(fun() -> [begin {lock}, timer:sleep(10) end || _ <- lists:seq(1, 120)] end), ok"
    await asyncio.to_thread(ref.erl[1].eval, locker)
    pushes: dict[bytes, asyncio.Future[Term]] = {}
    acks: dict[bytes, asyncio.Future[Term]] = {}
    kills = 0
    for wave in range(20):
        for i in range(10):
            body = b"w%02d-%d" % (wave, i)
            call = runners.call(name, peer, "lmq_lib", "enqueue", enqueue_args(atom, body), 10)
            pushes[body] = asyncio.ensure_future(call)
            if i % 5 == 0 and deliveries:
                uuid = deliveries.pop()
                acks[uuid] = asyncio.ensure_future(runners.call(name, peer, "lmq_lib", "done", [atom, uuid], 10))
        await asyncio.sleep(0.005 * (wave % 5))
        pid = runners.pid_of(name)
        if pid is not None:
            await dist.rpc(peer, "erlang", "exit", [pid, A("kill")], 10)
            kills += 1
    await asyncio.gather(*pushes.values(), *acks.values(), return_exceptions=True)
    rows = await dist.rpc(peer, "ets", "tab2list", [atom], 10)
    assert isinstance(rows, list)
    bodies = [body_of(message_from_term(r)) for r in rows]
    uuids = {message_from_term(r).id[1] for r in rows}
    outcome = {k: type(f.exception()).__name__ if f.exception() else "ok" for k, f in {**pushes, **acks}.items()}
    for body, f in pushes.items():
        if outcome[body] == "ok":
            assert f.result() is OK and bodies.count(body) == 1, f"answered push {body!r}: {bodies.count(body)} rows"
        elif outcome[body] == "NotRun":
            assert body not in bodies, f"push {body!r} failed as not run, but it ran"
        else:
            assert outcome[body] == "RunnerLost" and bodies.count(body) <= 1, (body, outcome[body])
    for uuid, f in acks.items():
        if outcome[uuid] == "ok":
            assert f.result() is OK and uuid not in uuids, "an answered ack left its delivery"
        elif outcome[uuid] == "NotRun":
            assert uuid in uuids, "an ack failed as not run, but it ran"
    kinds = sorted(set(outcome.values()))
    assert kills >= 10 and "NotRun" in kinds and "RunnerLost" in kinds, (kills, kinds)
    assert runners.batched_calls > 0, "expected batches"


async def test_runners_of_queues_idle_past_the_limit_are_stopped_on_the_erlang_node(
    ref: RefCluster, dist: Node
) -> None:
    peer = ref.erl[0].name
    now = [1000.0]
    runners = QueueRunners(dist, idle_stop=30.0, clock=lambda: now[0])
    (idle, idle_atom), (busy, busy_atom) = await new_queue(dist, peer), await new_queue(dist, peer)
    for name, atom in ((idle, idle_atom), (busy, busy_atom)):
        assert await runners.call(name, peer, "lmq_lib", "dequeue", [atom, 30], 10) is EMPTY
    now[0] += 20
    assert await runners.call(busy, peer, "lmq_lib", "dequeue", [busy_atom, 30], 10) is EMPTY
    assert runners.stop_idle() == []
    now[0] += 11  # idle: 31 s without a call; busy: 11 s
    assert runners.stop_idle() == [idle]
    assert runners.peer_of(idle) is None and runners.peer_of(busy) == peer
    left = await asyncio.to_thread(wait_for, lambda: runners_on(ref.erl[0], idle), lambda r: r == [], 10)
    assert left == [], "expected the idle queue's runner gone from the Erlang node"
    assert len(await asyncio.to_thread(runners_on, ref.erl[0], busy)) == 1
    runners.close()


async def test_a_runner_stopped_with_calls_in_flight_runs_them_and_stays_this_nodes_until_after_its_end(
    ref: RefCluster, dist: Node
) -> None:
    # What a move to another peer does to the runner it leaves: its calls still run and are
    # answered, and its pid still counts as this node's (the table events of its last commits
    # may come after its end) until RETIRED_FOR after the end, which it must be told of.
    peer0, peer1 = ref.erl[0].name, ref.erl[1].name
    now = [1000.0]
    runners = QueueRunners(dist, clock=lambda: now[0])
    name, atom = await new_queue(dist, peer1)
    try:
        assert await runners.call(name, peer1, "lmq_lib", "enqueue", enqueue_args(atom, b"first"), 30) is OK
        old = runners.pid_of(name)
        assert old is not None and runners.owns(old)
        sent = [
            asyncio.ensure_future(runners.call(name, peer1, "lmq_lib", "enqueue", enqueue_args(atom, b"m%d" % i), 30))
            for i in range(40)
        ]
        await asyncio.sleep(0)  # every one sent to the runner on peer1
        assert await runners.call(name, peer0, "lmq_lib", "enqueue", enqueue_args(atom, b"moved"), 30) is OK
        assert await asyncio.gather(*sent) == [OK] * 40
        assert runners.peer_of(name) == peer0 and runners.owns(old)
        gone = await asyncio.to_thread(wait_for, lambda: runners_on(ref.erl[1], name), lambda r: r == [], 10)
        assert gone == [], "expected the stopped runner to end once its calls ran"
        size = await dist.rpc(peer1, "mnesia", "table_info", [atom, A("size")], 10)
        assert size == 42, "every call sent to either runner ran once"
        await asyncio.sleep(0.5)  # its end (DOWN) comes right after
        runners.stop_idle()
        assert runners.owns(old), "a pid that just ended still counts as this node's"
        now[0] += RETIRED_FOR + 1
        runners.stop_idle()
        assert not runners.owns(old), "forgotten RETIRED_FOR after its end (which this node heard)"
        new = runners.pid_of(name)
        assert new is not None and runners.owns(new)
    finally:
        runners.close()


async def test_callers_waiting_for_a_new_runner_that_want_different_peers_each_get_a_runner_that_runs_their_call(
    ref: RefCluster, dist: Node
) -> None:
    # A move decided while a runner was being spawned: the first caller woken stops the new
    # runner to go elsewhere; the next must not send its call to the stopped one.
    peer0, peer1 = ref.erl[0].name, ref.erl[1].name
    runners = QueueRunners(dist)
    name, atom = await new_queue(dist, peer1)
    try:
        # A call the runner runs alone (not in a batch, which would take the next call in
        # with it, stop or not): then it reads its mailbox in order, the stop first.
        spawning = asyncio.ensure_future(runners.call(name, peer1, "lmq_lib", "first", [atom], 30))
        await asyncio.sleep(0)  # its spawn under way: the next two wait for it
        elsewhere = asyncio.ensure_future(runners.call(name, peer0, "lmq_lib", "enqueue", enqueue_args(atom, b"b"), 30))
        here = asyncio.ensure_future(runners.call(name, peer1, "lmq_lib", "enqueue", enqueue_args(atom, b"c"), 30))
        assert list(await asyncio.gather(spawning, elsewhere, here)) == [EMPTY, OK, OK]
        assert await dist.rpc(peer1, "mnesia", "table_info", [atom, A("size")], 10) == 2
    finally:
        runners.close()


# ------------------------------------------------------------------ the pylmq node, as a process


def test_a_runner_killed_by_an_operator_is_replaced_and_no_answered_push_is_lost(ref: RefCluster) -> None:
    py = HttpClient(ref.py[0].url, request_timeout=30)
    q = fresh_queue(py)
    spawn_runner(py, q)
    # pylmq joined lmq1, whose table events feed its mirror: the runner is on lmq2.
    lmq1, lmq2 = ref.erl
    (before,) = runners_on(lmq2, q)
    assert runners_on(lmq1, q) == [], "expected the runner on the peer that does not feed the mirror"
    assert kill_runners(lmq2, q) == 1  # while idle
    spawn_runner(py, q)
    (after,) = wait_for(lambda: runners_on(lmq2, q), lambda r: len(r) == 1, 10)
    assert after != before, "expected a new runner for the next request"
    # While calls are in flight: push, pull, ack cycles from two clients, the runner killed
    # three times under them, wherever it is (a call whose outcome the kill left unknown is
    # retried on the other peer, and its runner with it). Enough rounds to outlast the kills.
    killed: list[int] = []

    def kill_thrice() -> None:
        for _ in range(3):
            killed.append(wait_for(lambda: kill_runners(lmq2, q) + kill_runners(lmq1, q), lambda n: n > 0, 5))
            time.sleep(0.2)

    clients = {"a": py, "b": HttpClient(ref.py[0].url, request_timeout=30)}
    pushed, delivered, acked, errors = run_load(clients, q, 400, kill_thrice, 30)
    assert sum(killed) >= 2, f"expected runners to kill while the cycles ran: {killed}"
    assert all("ClusterError" in e for _, e in errors), errors
    rest = drain(HttpClient(lmq1.url, request_timeout=30), q, acked, 4)
    assert sorted(pushed - delivered - rest) == [], "answered pushes lost"


def test_pushes_pulls_and_acks_batched_together_leave_the_mirror_and_the_erlang_nodes_agreeing(
    ref: RefCluster,
) -> None:
    # Clients in step push, pull and ack through pylmq: a push, its pull and its ack often wait
    # together in the runner and commit as one transaction, where Mnesia keeps one operation per
    # key (the pushed row's write is gone, only deletes remain). pylmq's mirror (fed by lmq1's
    # table events), its /stats and peek must still agree with the Erlang nodes, and a puller
    # waiting on an Erlang node must get a message pushed through pylmq.
    py = HttpClient(ref.py[0].url, request_timeout=30)
    q = fresh_queue(py)
    spawn_runner(py, q)
    lmq1, lmq2 = ref.erl
    clients = {label: HttpClient(ref.py[0].url, request_timeout=30) for label in "abcdef"}
    pushed, delivered, acked, errors = run_load(clients, q, 40, lambda: None, 0)
    assert errors == [] and delivered == acked
    rest = drain(py, q, acked, 0.5)  # a pull may have found the others' pushes all taken
    assert pushed == delivered | rest and not delivered & rest, "expected each push delivered once"

    def size_on_pylmq() -> int:
        return int(py.stats()["queues"][q]["size"])

    assert wait_for(size_on_pylmq, lambda n: n == 0, 10) == 0, "pylmq's mirror kept rows the Erlang nodes do not have"
    assert py.peek(q) == []
    # The table's size on each node (the Erlang /stats answered 500 after this module's other
    # tests, which make queues with lmq_lib:create alone).
    assert [int(node.eval(f"mnesia:table_info('{q}', size)")) for node in (lmq1, lmq2)] == [0, 0]
    # Pulls waiting on the Erlang nodes get pushes made through pylmq, once each.
    got: list[bytes] = []
    with ThreadPoolExecutor(2) as pool:
        waiting = [pool.submit(n.client().pull, q, 10) for n in (lmq1, lmq2)]
        time.sleep(0.3)
        for b in (b"late-1", b"late-2"):
            py.push(q, b, "text/plain")
        for w in waiting:
            m = w.result()
            assert m is not None, "a puller waiting on an Erlang node missed a push made through pylmq"
            got.append(m.body)
    assert sorted(got) == [b"late-1", b"late-2"]
    assert wait_for(size_on_pylmq, lambda n: n == 2, 10) == 2


def runner_table_lock(nodes: list[RefNode], queue: str) -> str:
    """What ``queue``'s runners on ``nodes`` were last told about locking their whole table."""
    runners = RUNNERS_OF.format(match=f'Q =:= <<"{queue}">>')
    flag = "element(2, lists:keyfind(pylmq_table_lock, 1, element(2, process_info(P, dictionary))))"
    return "".join(node.eval(f"[{flag} || P <- {runners}]").strip() for node in nodes).replace("[]", "")


def test_a_runner_locks_its_whole_table_only_while_no_other_node_writes_the_queue(ref: RefCluster) -> None:
    py = HttpClient(ref.py[0].url, request_timeout=30)
    q = fresh_queue(py)
    spawn_runner(py, q)
    lmq1 = ref.erl[0]
    assert runner_table_lock(ref.erl, q) == "[true]", "expected a table lock while only pylmq writes"
    HttpClient(lmq1.url, request_timeout=30).push(q, b"from-erlang", "text/plain")
    # The Erlang node's write reaches pylmq's mirror as a table event; pylmq's next calls then
    # tell the runner (wherever it is: it may go to lmq1, the writer's node) to leave the table
    # to row locks.

    def cycle_and_look() -> str:
        spawn_runner(py, q)
        return runner_table_lock(ref.erl, q)

    got = wait_for(cycle_and_look, lambda v: v == "[false]", 10)
    assert got == "[false]", "expected row locks once another node wrote the queue"
    time.sleep(SHARED_FOR + 0.5)
    spawn_runner(py, q)
    assert runner_table_lock(ref.erl, q) == "[true]", f"expected the table lock back {SHARED_FOR} s after"


def test_a_push_with_options_is_this_nodes_write_and_leaves_the_table_lock_on(ref: RefCluster) -> None:
    # Run by the queue's runner, as an enqueue: an rpc's coordinator is a process pylmq does not
    # know, so its write would count as another node's (row locks for SHARED_FOR seconds) and
    # would replace the node of the queue's real other writer with the rpc's.
    py = HttpClient(ref.py[0].url, request_timeout=30)
    q = fresh_queue(py)
    spawn_runner(py, q)
    for _ in range(3):
        py.push_with(q, b"later", "text/plain", PushOptions(delay=600))
    time.sleep(0.5)  # the table events of the writes, in by now
    spawn_runner(py, q)  # calls that tell the runner whether to lock its table
    assert runner_table_lock(ref.erl, q) == "[true]", "a push with options counted as another node's write"
    assert ref.erl[0].eval(f"mnesia:table_info('{q}', size)").strip() == "3", "expected the three delayed rows"


def test_a_push_around_a_held_up_runner_is_this_nodes_write_and_leaves_the_table_lock_on(ref: RefCluster) -> None:
    # Sent as an rpc of its own while the runner is held up, it runs in a process pylmq spawns
    # on the peer and so knows: through rex, its coordinator would be a process pylmq does not
    # know, and its write would count as another node's (row locks for SHARED_FOR seconds).
    py = HttpClient(ref.py[0].url, request_timeout=30)
    q = fresh_queue(py)
    lmq2 = ref.erl[1]
    spawn_runner(py, q)
    assert len(runners_on(lmq2, q)) == 1
    runners = RUNNERS_OF.format(match=f'Q =:= <<"{q}">>')
    # A suspension lasts while its suspender lives: this one until told, 10 s at most.
    suspender = f"pylmq_suspender_{q}"
    hold = f"[erlang:suspend_process(P) || P <- {runners}], receive resume -> ok after 10000 -> ok end"
    lmq2.eval(f"register({suspender}, spawn(fun() -> {hold} end)), ok")
    assert wait_for(lambda: lmq2.eval(f"[S || P <- {runners}, {{status, S}} <- [process_info(P, status)]]"),
                    lambda v: "suspended" in v, 5).strip() == "[suspended]"  # fmt: skip
    outcome: list[object] = []

    def call(request: Callable[[HttpClient], object]) -> threading.Thread:
        def run() -> None:
            try:
                outcome.append(request(HttpClient(ref.py[0].url, request_timeout=30)))
            except Exception as e:
                outcome.append(e)

        t = threading.Thread(target=run)
        t.start()
        return t

    try:
        held = call(lambda c: c.push(q, b"held", "text/plain"))  # a push the runner holds
        time.sleep(RUNNER_HELD + 0.3)
        py.push(q, b"around", "text/plain")
        assert held.is_alive(), "expected the push around the runner answered while the runner holds the other"
        time.sleep(0.2)  # its table event, in by now
        # A call sent now tells the runner whether to lock its table: within SHARED_FOR of
        # the push, so that a push counted as another node's write would make it row locks.
        behind = call(lambda c: c.pull(q, 0))
        time.sleep(0.2)
    finally:
        lmq2.eval(f"{suspender} ! resume, ok")
    held.join(30)
    behind.join(30)
    assert len(outcome) == 2 and not any(isinstance(o, Exception) for o in outcome), outcome
    assert runner_table_lock(ref.erl, q) == "[true]", "the push around the runner counted as another node's write"
    assert lmq2.eval(f"mnesia:table_info('{q}', size)").strip() == "2", "expected both pushes written"


def test_a_shared_queues_runner_goes_to_the_node_of_the_other_writers_and_follows_them(ref: RefCluster) -> None:
    py = HttpClient(ref.py[0].url, request_timeout=30)
    q = fresh_queue(py)
    lmq1, lmq2 = ref.erl
    pushed: list[bytes] = []
    pulled: list[bytes] = []

    def push(url: str, body: bytes) -> None:
        HttpClient(url, request_timeout=30).push(q, body, "text/plain")
        pushed.append(body)

    def cycle() -> None:
        # Writes by pylmq alone: its runner's, which never move it.
        push(ref.py[0].url, b"py-%d" % len(pushed))
        got = py.pull(q, 5)
        assert got is not None
        pulled.append(got.body)
        py.ack(q, got.id)

    def placed() -> tuple[int, int]:
        cycle()
        return len(runners_on(lmq1, q)), len(runners_on(lmq2, q))

    # pylmq alone: the runner goes to lmq2 (lmq1 feeds pylmq's mirror), and stays there.
    assert placed() == (0, 1)
    # Settled (at most twice SETTLE_FOR): a single write from another node then moves it
    # within SHARED_FOR, whatever share of SETTLE_FOR this runner drew.
    time.sleep(SETTLE_FOR * 2 + 0.2)
    assert placed() == (0, 1), "pylmq's own writes must not move its runner"
    push(lmq1.url, b"from-lmq1")
    got = wait_for(placed, lambda v: v == (1, 0), 10)
    moved = time.monotonic()
    assert got == (1, 0), "expected the runner beside lmq1's writes, and none left on lmq2"
    # Another writer, on the other node: the runner follows, once settled (SETTLE_FOR).
    push(lmq2.url, b"from-lmq2")
    early = placed()
    if time.monotonic() - moved < SETTLE_FOR - 0.5:  # else the host was too slow to tell
        assert early == (1, 0), "a runner must stay SETTLE_FOR seconds before it moves again"
    time.sleep(SETTLE_FOR * 2 + 0.2)
    push(lmq2.url, b"from-lmq2, still writing")  # the last one is SHARED_FOR old by now
    got = wait_for(placed, lambda v: v == (0, 1), 10)
    assert got == (0, 1), "expected the runner to follow the writes to lmq2"
    while (left := py.pull(q, 0)) is not None:
        pulled.append(left.body)
        py.ack(q, left.id)
    assert sorted(pulled) == sorted(pushed), "every message served once across the moves"


def test_a_moved_runner_stays_under_pylmq_s_own_load_and_pushes_with_options(ref: RefCluster) -> None:
    # The writes that must not move a runner again: those of the runner it left (still
    # running the calls sent to it, their table events maybe later than its end) and pushes
    # with options (the runner's, not rpcs of their own, whose coordinator pylmq does not know).
    py = HttpClient(ref.py[0].url, request_timeout=30)
    q = fresh_queue(py)
    lmq1, lmq2 = ref.erl
    spawn_runner(py, q)
    assert len(runners_on(lmq2, q)) == 1
    time.sleep(SETTLE_FOR * 2 + 0.2)  # settled, at most twice SETTLE_FOR
    stop = threading.Event()
    errors: list[BaseException] = []

    def cycles() -> None:
        client = HttpClient(ref.py[0].url, request_timeout=30)
        try:
            while not stop.is_set():
                client.push(q, b"load", "text/plain")
                if (got := client.pull(q, 1)) is not None:
                    client.ack(q, got.id)
                client.push_with(q, b"later", "text/plain", PushOptions(delay=600))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=cycles) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        HttpClient(lmq1.url, request_timeout=30).push(q, b"from-lmq1", "text/plain")
        # The move, with calls in flight to the runner it leaves on lmq2. One write is enough:
        # none of pylmq's hides it (those of its runners and its rpcs are its own).
        assert wait_for(lambda: len(runners_on(lmq1, q)), lambda n: n == 1, 10) == 1
        seen = []
        deadline = time.monotonic() + SETTLE_FOR * 2 + SHARED_FOR + 1
        while time.monotonic() < deadline:
            seen.append((len(runners_on(lmq1, q)), len(runners_on(lmq2, q))))
            time.sleep(0.2)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    # Right after the move, the runner on lmq2 may still be draining; after that, never again.
    settled = seen[seen.index((1, 0)) :] if (1, 0) in seen else seen
    assert settled and all(s == (1, 0) for s in settled), f"the runner moved again: {seen}"


def test_a_deleted_queues_runner_is_stopped(ref: RefCluster) -> None:
    py = HttpClient(ref.py[0].url, request_timeout=30)
    q = fresh_queue(py)
    spawn_runner(py, q)
    lmq2 = ref.erl[1]
    assert len(runners_on(lmq2, q)) == 1
    py.delete_queue(q)
    assert wait_for(lambda: runners_on(lmq2, q), lambda r: r == [], 10) == []


def test_when_the_runners_peer_is_suspended_requests_go_to_the_other_peer_within_the_bound(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=2, pylmq=1, py_args=PY_ARGS) as cluster:
        lmq1, lmq2 = cluster.erl  # the runner goes on lmq2, the peer that does not feed the mirror
        py = HttpClient(cluster.py[0].url, request_timeout=30)
        q = fresh_queue(py)
        spawn_runner(py, q)
        assert len(runners_on(lmq2, q)) == 1
        lmq2.signal(signal.SIGSTOP)
        try:
            wait_for(lambda: status(cluster), lambda s: lmq2.name in s["stalled"], 10)
            # lmq1 cannot commit while its replica lmq2 is suspended (until the Erlang nodes'
            # net_ticktime drops it), so a request may be refused; but it is answered within
            # the bound, sent to lmq1 (a runner there), never to the stalled node again.
            for _ in range(3):
                got = try_timed("a pull", partial(py.pull, q, 0))
                if isinstance(got, ClusterError):
                    assert lmq2.name not in got.detail, f"a stalled node must not be called: {got.detail}"
                    assert f"peer {lmq1.name}" in got.detail, f"expected the push sent to lmq1: {got.detail}"
        finally:
            lmq2.signal(signal.SIGCONT)


def test_kill_9_of_the_runners_peer_under_load_loses_no_answered_push(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=2, pylmq=1, py_args=PY_ARGS) as cluster:
        lmq1, lmq2 = cluster.erl
        py = HttpClient(cluster.py[0].url, request_timeout=30)
        q = fresh_queue(py)
        spawn_runner(py, q)
        assert len(runners_on(lmq2, q)) == 1
        load_through_a_kill(py, q, lmq2, lmq1)
        assert len(runners_on(lmq1, q)) == 1, "expected the queue's runner on the surviving node"


def test_kill_9_of_the_pylmq_node_leaves_no_runner_on_any_erlang_node(tmp_path: Path) -> None:
    with reference_cluster(tmp_path, erlang=2, pylmq=1, py_args=PY_ARGS) as cluster:
        py = HttpClient(cluster.py[0].url, request_timeout=30)
        baseline = [erl_eval_processes(n) for n in cluster.erl]
        queues = [fresh_queue(py) for _ in range(3)]
        for q in queues:
            spawn_runner(py, q)
        assert sum(len(runners_on(n)) for n in cluster.erl) == 3
        assert [erl_eval_processes(n) for n in cluster.erl] != baseline
        cluster.py[0].kill()
        for node, before in zip(cluster.erl, baseline, strict=True):
            assert wait_for(partial(runners_on, node), lambda r: r == [], 10) == []
            assert erl_eval_processes(node) == before, f"expected no erl_eval process left on {node.name}"
