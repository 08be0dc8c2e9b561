"""Queue runners: per queue, one process on an Erlang peer that runs this node's transactions on
that queue's table one after the other, as an Erlang node's queue process does (the store sends
it enqueues too, unless the runner is held up: see :mod:`pylmq.cluster.mnesia_store`).

Why: a Python node holds no Mnesia replica, so each transaction on a queue's table is run for it
by an Erlang peer. Sent as independent rpcs they run side by side and fight over the table's
locks (``dequeue`` and ``done`` read-lock the whole table; Mnesia restarts the loser after a
random sleep). Held back on this node until the previous one answered, each costs a network
round trip and a pass through this node's event loop on the queue's serial path. A runner takes
them in the order they were sent and starts the next one as soon as the previous one returned:
one transaction of this node in flight per queue (two for a moment while a runner that moved
to another peer finishes its calls), and no round trip in between, with several requests in
flight to it at once (pipelined). Those that wait together run in one transaction.

Nothing is loaded on the Erlang node: the runner is a short Erlang expression (:data:`SOURCE`),
scanned and parsed by the peer's own ``erl_scan``/``erl_parse`` and run by ``erl_eval`` in a
process spawned there (``erlang:spawn(erl_eval, exprs, ...)``). It answers each
``{lmq_call, From, Ref, M, F, A}`` with ``{Ref, catch M:F(A...)}`` (the calls of a batch,
see :data:`SOURCE`, with one ``{lmq_answers, [{Ref, Result}]}``) and keeps the key
``pylmq_queue_runner`` (``{ThisNode, Queue}``) in its process dictionary, so that an operator
can find it. It ends:

- when this node disconnects or dies (``monitor_node``): nothing is left on the Erlang node;
- when told to (``stop``, after the calls sent before it): the queue was idle for
  ``idle_stop`` seconds (:meth:`QueueRunners.stop_idle`) or deleted, or its runner goes to
  another peer (the cluster's choice, see :meth:`pylmq.cluster.cluster.Cluster.queue_peers`);
- when killed by this node (``exit(Pid, kill)``) after a call to it timed out or its peer
  stalled, so that the calls queued behind it do not run late;
- after :data:`IDLE_EXIT` without any message, a safety net.

This node monitors every runner: when one exits (an operator killed it, its node went down),
the calls in flight to it fail at once instead of waiting out their timeout, and the next call
spawns a new runner. The oldest fails with :class:`~pylmq.errors.RunnerLost` (outcome unknown),
or all the calls of the batch it announced (see :data:`SOURCE`) and did not answer; the others
with :class:`~pylmq.errors.NotRun`: a runner runs its calls in order and its end arrives after
every answer it sent, so it never reached them. When its node went down, answers
may have been lost with the connection, and all are unknown (NodeDown).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pylmq.erlang.node import Node
from pylmq.erlang.process import Process
from pylmq.erlang.terms import Atom, Pid, Reference, Term, erl_string
from pylmq.errors import ClusterError, NodeDown, NotRun, PeerStalled, RunnerLost

__all__ = ["BATCH", "BATCHED", "IDLE_EXIT", "IDLE_STOP", "SOURCE", "QueueRunners"]

A = Atom
IDLE_STOP = 30.0  # seconds without calls after which this node stops a queue's runner
IDLE_EXIT = 600  # seconds after which a runner that received nothing ends by itself
INIT_WAIT = 10  # seconds a new runner waits for its init message (sent right after the spawn)
BATCH = 8  # calls a runner runs in one transaction, at most (see SOURCE)
KILL_WAIT = 1.0  # seconds a timed-out call waits for its killed runner's end to say it never ran
# Seconds a runner's pid still counts as this node's after its end: the table events of its
# last commits come from the mirror's subscription node, over another connection, and may
# arrive after the end.
RETIRED_FOR = 10.0
OK, STOP, CALL, INIT, EXIT, KILL = A("ok"), A("stop"), A("lmq_call"), A("lmq_runner_init"), A("EXIT"), A("kill")
BATCH_NOTICE, ANSWERS, TABLE_LOCK = A("lmq_batch"), A("lmq_answers"), A("lmq_table_lock")
DOWN, NOCONNECTION, NORMAL = A("DOWN"), A("noconnection"), A("normal")

# The runner. Its owner and queue come in the first message, so the parsed program is the same
# for every queue and parsed once per peer. ``erlang:yield()`` after each call lets the peer's
# other processes (its LMQ queue processes) run before this node's next transaction on the queue.
#
# Calls of :data:`BATCHED` waiting in its mailbox are taken together, up to :data:`BATCH`, and
# run inside one transaction: each ``lmq_lib`` call is then a nested transaction, and Mnesia
# commits once for all of them (one commit round to the table's replicas instead of one per
# call, which is most of a small transaction's cost). The rows are the same as if the calls
# ran one by one, in the batch's order (below). The runner first tells this node how many calls the batch holds
# (``lmq_batch``): if it dies before their answers, any of them may have committed. The answers
# of a committed batch go back in one message (``{lmq_answers, [{Ref, Result}]}``): one send
# on the peer and one frame here instead of one per call. Only this node sends calls to its
# runners, so every call of a batch has the same ``From``. A batch
# whose transaction aborts (a call raised) committed nothing; its calls then run one by one.
# Mnesia's first/next inside a transaction, stepping over a row deleted in it, skip the rows
# written in it below that row: a dequeue behind a settle (which deletes a delivery's row, due
# later than a row the batch pushed or moved to now) would answer empty with a message due.
# Behind enqueues and dequeues only, every row written is due no earlier than every row deleted
# (a dequeue takes the first), so a dequeue finds what it would alone. Hence the batch's order:
# ``done`` and ``retain`` run after the batch's other calls. That changes nothing a call sees: a
# dequeue takes only rows due now, and what they delete or move is a delivery's row due later
# (else they answer not_found), and the calls of a batch were all in flight together, so no
# client saw one answered before another was sent. ``release`` and ``put_back`` make a row due
# now, which a dequeue behind them must see: a dequeue after one, and one after a deferred
# ``done`` or ``retain`` (on the same delivery, maybe), start the next batch instead.
# Any other call runs alone, in its turn.
#
# While this node says so (``{lmq_table_lock, true}``: no other node has written the queue
# lately, see :meth:`QueueRunners.call`), a batch's transaction first write-locks the whole
# table: one lock round trip to the other replicas instead of one per row, and the rows' own
# locks are then free. It is then a ``sync_transaction``, which returns once every replica has
# committed, and so released the table lock: otherwise the next batch's request could reach
# another replica's lock manager first, and Mnesia restarts the younger transaction after a
# random sleep (one batch in five, when tried). (A batch whose dequeues all find the queue
# empty writes nothing, and Mnesia commits it without waiting for the other replicas, sync or
# not: the next batch may then restart once. Leaving batches of dequeues to row locks cost
# more: they are common, when the clients' cycles fall into step.) Others' transactions on the
# table wait for a whole batch meanwhile, even an enqueue of their own row: with ``false`` it
# is row locks, as LMQ's own transactions take them. (A sticky table lock, cheaper still, was
# refused: other nodes' reads of the table would see their replica before the commit reached
# it.)
BATCHED = ("enqueue", "dequeue", "done", "retain", "release", "put_back")
_GUARD = "; ".join(f"F =:= {f}" for f in BATCHED)
SOURCE = f"""
receive
    {{lmq_runner_init, Owner, Queue}} ->
        erlang:monitor_node(Owner, true),
        put(pylmq_queue_runner, {{Owner, Queue}}),
        put(pylmq_table_lock, false),
        One = fun({{lmq_call, From, Ref, M, F, A}}) -> From ! {{Ref, catch erlang:apply(M, F, A)}} end,
        Batch = fun(Taken, Deferred) -> lists:reverse(Taken, lists:reverse(Deferred)) end,
        Take = fun Take(Taken, Deferred, 0, _) -> {{Batch(Taken, Deferred), none}};
                   Take(Taken, Deferred, N, Moved) ->
                       receive
                           {{lmq_call, _, _, lmq_lib, F, _}} = C when F =:= done; F =:= retain ->
                               Take(Taken, [C | Deferred], N - 1, Moved);
                           {{lmq_call, _, _, lmq_lib, dequeue, _}} = C when Moved ->
                               {{Batch(Taken, Deferred), C}};
                           {{lmq_call, _, _, lmq_lib, F, _}} = C when F =:= release, Deferred =/= [];
                                                                     F =:= put_back, Deferred =/= [] ->
                               {{Batch(Taken, Deferred), C}};
                           {{lmq_call, _, _, lmq_lib, F, _}} = C when {_GUARD} ->
                               Take([C | Taken], Deferred, N - 1, Moved orelse F =:= release orelse F =:= put_back);
                           {{lmq_call, _, _, _, _, _}} = C -> {{Batch(Taken, Deferred), C}};
                           {{lmq_table_lock, L}} -> put(pylmq_table_lock, L), Take(Taken, Deferred, N, Moved)
                       after 0 -> {{Batch(Taken, Deferred), none}}
                       end
               end,
        Run = fun([Call]) -> One(Call);
                 ([{{lmq_call, From, Ref, _, _, [Tab | _]}} | _] = Calls) ->
                     From ! {{lmq_batch, Ref, length(Calls)}},
                     Calling = fun() -> [{{R, erlang:apply(M, F, A)}} || {{lmq_call, _, R, M, F, A}} <- Calls] end,
                     Result = case get(pylmq_table_lock) of
                         true -> mnesia:sync_transaction(fun() -> mnesia:lock({{table, Tab}}, write), Calling() end);
                         _ -> mnesia:transaction(Calling)
                     end,
                     case Result of
                         {{atomic, Answers}} -> From ! {{lmq_answers, Answers}};
                         {{aborted, _}} -> lists:foreach(One, Calls)
                     end;
                 (Calls) -> lists:foreach(One, Calls)
              end,
        Loop = fun Loop(Held) ->
            Next = case Held of
                none ->
                    receive
                        {{lmq_call, _, _, _, _, _}} = C -> C;
                        {{lmq_table_lock, L}} -> put(pylmq_table_lock, L), none;
                        {{nodedown, _}} -> normal;
                        stop -> normal
                    after {IDLE_EXIT * 1000} -> normal
                    end;
                _ -> Held
            end,
            case Next of
                normal -> normal;
                none -> Loop(none);
                {{lmq_call, _, _, lmq_lib, F, _}} when {_GUARD} ->
                    {{Calls, Rest}} = case F =:= done orelse F =:= retain of
                        true -> Take([], [Next], {BATCH - 1}, false);
                        false -> Take([Next], [], {BATCH - 1}, F =:= release orelse F =:= put_back)
                    end,
                    Run(Calls),
                    erlang:yield(),
                    Loop(Rest);
                _ ->
                    One(Next),
                    erlang:yield(),
                    Loop(none)
            end
        end,
        Loop(none)
after {INIT_WAIT * 1000} -> normal
end.
"""


class _Expired(Exception):
    """A call's bound passed (raised into its caller only)."""


@dataclass(eq=False)
class _Runner:
    queue: str
    peer: str
    pid: Pid
    mref: Reference
    last_use: float
    # Calls sent and not answered, in the order sent (the order the runner runs them): ref -> when.
    calls: dict[Reference, float] = field(default_factory=dict)
    killed: bool = False
    # Answers still to come from the batch it announced last: all of its calls may have
    # committed if it dies before they arrive.
    batch_left: int = 0
    table_lock: bool = False  # what it was last told (see SOURCE)
    born: float = 0.0  # when it was spawned, by QueueRunners.clock
    # Its share of a settling time beyond the first (see QueueRunners.settled), drawn at spawn.
    jitter: float = field(default_factory=random.random)


class QueueRunners:
    """This node's queue runners, one per queue (on one peer at a time), spawned on first use."""

    def __init__(self, dist: Node, *, idle_stop: float = IDLE_STOP, clock: Callable[[], float] = time.monotonic):
        self.dist = dist
        self.idle_stop = idle_stop
        self.clock = clock
        self._proc: Process = dist.spawn(None, self._on_message)
        self._programs: dict[str, tuple[Term, Term]] = {}  # peer -> (parsed runner, empty bindings)
        self._runners: dict[str, _Runner] = {}  # queue -> its runner
        self._by_mref: dict[Reference, _Runner] = {}
        self._starting: dict[str, asyncio.Future[_Runner]] = {}
        self._calls: dict[Reference, tuple[_Runner, asyncio.Future[Term]]] = {}
        # Calls whose bound passed and whose caller has not woken yet: their outcome, if it
        # came in the meantime (see _settle).
        self._expired: dict[Reference, tuple[Term, BaseException | None] | None] = {}
        self.batched_calls = 0  # calls the runners announced as run in a batch (for tests and stats)
        # The runners' pids, and those of the processes that ran this node's rpcs (adopt), to
        # tell this node's writes from others': None while one runs (or drains), then when it
        # ended, until RETIRED_FOR later (stop_idle prunes them).
        self._pids: dict[Pid, float | None] = {}

    def __len__(self) -> int:
        return len(self._runners)

    def peer_of(self, queue: str) -> str | None:
        """The peer whose runner serves ``queue`` now, if any."""
        r = self._runners.get(queue)
        return None if r is None else r.peer

    def pid_of(self, queue: str) -> Pid | None:
        """The pid of ``queue``'s runner, if it has one (for logs and operators)."""
        r = self._runners.get(queue)
        return None if r is None else r.pid

    def settled(self, queue: str, after: float) -> bool:
        """Whether ``queue``'s runner (if any) has run at least ``after`` seconds, and up to twice
        that: a random share per runner, so that two nodes' runners that would each move to
        the other's node do not move in step."""
        r = self._runners.get(queue)
        return r is None or self.clock() - r.born >= after * (1.0 + r.jitter)

    def owns(self, pid: Term) -> bool:
        """Whether ``pid`` (a transaction's coordinator) is one of this node's runners, or ran
        one of its rpcs (:meth:`adopt`)."""
        return pid in self._pids

    def adopt(self, pid: Pid) -> None:
        """``pid`` runs a call of this node's on a peer (not a runner): its writes are this
        node's until RETIRED_FOR after :meth:`retire`."""
        self._pids[pid] = None

    def retire(self, pid: Pid) -> None:
        """The call that ``pid`` ran was answered or given up."""
        if pid in self._pids:
            self._pids[pid] = self.clock()

    async def call(
        self,
        queue: str,
        peer: str,
        module: str,
        function: str,
        args: list[Term],
        timeout: float,
        *,
        table_lock: bool = False,
    ) -> Term:
        """``module:function(args)`` run by ``queue``'s runner on ``peer`` (spawned if needed; a
        runner on another peer is stopped). Raises like an rpc: NodeDown, PeerStalled (``sent``
        False: not sent), RunnerLost (its runner exited), NotRun (it exited before reaching this
        call), TimeoutError after ``timeout`` seconds in all (up to :data:`KILL_WAIT` more when
        an older call was still unanswered); ClusterError if the function raised on the peer.
        ``table_lock``: the runner's batches lock the whole table (see :data:`SOURCE`), from
        the batch that holds this call on; the caller asks for it while no other node writes
        the queue."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        runner = self._runners.get(queue)
        if runner is None or runner.peer != peer:
            async with asyncio.timeout_at(deadline):
                runner = await self._runner(queue, peer, timeout)
        conn = self.dist.net_kernel.connections.get(peer)
        if conn is not None and conn.stalled:
            silence = conn.silence()
            raise PeerStalled(f"node {peer} is stalled: nothing received for {silence:.1f} s", sent=False)
        if runner.table_lock is not table_lock:
            self.dist.send(runner.pid, (TABLE_LOCK, table_lock))
            runner.table_lock = table_lock
        ref = self.dist.make_ref()
        fut: asyncio.Future[Term] = loop.create_future()
        self._calls[ref] = (runner, fut)
        runner.last_use = runner.calls[ref] = self.clock()
        try:
            self.dist.send(runner.pid, (CALL, self._proc.pid, ref, A(module), A(function), args))
        except BaseException:  # not sent (arguments that cannot be encoded): nothing to wait for
            del self._calls[ref], runner.calls[ref]
            raise
        # Its answer, or the runner's end, removes it from the maps and settles ``fut``
        # (_settle). The bound is a timer that fails ``fut`` with _Expired, not asyncio.timeout
        # around a shield: those cost about as much CPU as the rest of the call.
        timer = loop.call_at(deadline, self._expire, ref, fut)
        try:
            result = await fut
        except _Expired:
            result = await self._after_timeout(runner, ref)
        finally:
            timer.cancel()
            if ref in self._expired:
                del self._expired[ref]
                if not fut.cancelled():
                    fut.exception()  # its _Expired, read (this caller may have been cancelled first)
        if type(result) is tuple and len(result) == 2 and result[0] is EXIT:
            raise ClusterError(f"{module}:{function} raised on {peer}: {result[1]!r:.300}")
        return result

    def _expire(self, ref: Reference, fut: asyncio.Future[Term]) -> None:
        if not fut.done():
            self._expired[ref] = None
            fut.set_exception(_Expired())

    def _settle(self, ref: Reference, fut: asyncio.Future[Term], result: Term, error: BaseException | None) -> None:
        """A call's answer (``error`` None) or failure."""
        if not fut.done():
            if error is None:
                fut.set_result(result)
            else:
                fut.set_exception(error)
        elif ref in self._expired:
            # Its bound passed in this same pass of the loop, before its caller woke: the
            # caller takes the outcome from here (_after_timeout).
            self._expired[ref] = (result, error)

    async def _after_timeout(self, r: _Runner, ref: Reference) -> Term:
        """A call to ``r`` timed out. ``r`` is killed: the calls queued behind it must not run
        late. A call that was not the oldest unanswered one may not have started (a runner runs
        its calls in order, a batch at a time): the runner's end, which comes after every
        answer it sent, tells which (:class:`NotRun`, or :class:`RunnerLost` for a call of the
        batch it announced) within :data:`KILL_WAIT`; the oldest one's outcome stays unknown."""
        late = self._expired.pop(ref, None)
        if late is not None:
            result, error = late
            if error is not None:
                raise error
            return result
        if not r.killed:
            self._kill(r)
        fut: asyncio.Future[Term] = asyncio.get_running_loop().create_future()
        if ref in self._calls:
            self._calls[ref] = (r, fut)  # what comes for it now settles this one
        if next(iter(r.calls), ref) != ref and not fut.done():
            try:
                async with asyncio.timeout(KILL_WAIT):
                    return await asyncio.shield(fut)
            except TimeoutError:
                pass
        if fut.done():
            return fut.result()  # answered, or NotRun, in the meantime
        fut.cancel()
        if r.mref not in self._by_mref:  # no end will come to clear it (forgotten at close)
            self._calls.pop(ref, None)
            r.calls.pop(ref, None)
        # Otherwise it stays in the order until its late answer or the runner's end: its place
        # is what tells the calls behind it that they never started.
        raise TimeoutError

    def oldest_wait(self, queue: str) -> float:
        """How long the oldest unanswered call to ``queue``'s runner has waited (0 if none)."""
        r = self._runners.get(queue)
        first = None if r is None else next(iter(r.calls.values()), None)
        return 0.0 if first is None else self.clock() - first

    async def _runner(self, queue: str, peer: str, timeout: float) -> _Runner:
        r = self._runners.get(queue)
        if r is not None:
            if r.peer == peer:
                return r
            self.stop(queue)  # its calls in flight still run, then it ends
        starting = self._starting.get(queue)
        if starting is None:
            starting = self._starting[queue] = asyncio.get_running_loop().create_future()
            try:
                r = await self._spawn(queue, peer, timeout)
            except BaseException as e:
                starting.set_exception(e)
                starting.exception()  # retrieved: only the waiters, if any, raise it
                raise
            finally:
                self._starting.pop(queue, None)
            starting.set_result(r)
            return r
        r = await asyncio.shield(starting)
        if r.peer != peer or self._runners.get(queue) is not r:
            # Another caller, woken first, wanted another peer and stopped it already.
            return await self._runner(queue, peer, timeout)
        return r

    async def _program(self, peer: str, timeout: float) -> tuple[Term, Term]:
        program = self._programs.get(peer)
        if program is None:
            scanned = await self.dist.rpc(peer, "erl_scan", "string", [erl_string(SOURCE)], timeout)
            if not (type(scanned) is tuple and scanned[0] is OK):
                raise ClusterError(f"erl_scan:string of the queue runner on {peer} answered {scanned!r:.300}")
            parsed = await self.dist.rpc(peer, "erl_parse", "parse_exprs", [scanned[1]], timeout)
            if not (type(parsed) is tuple and parsed[0] is OK):
                raise ClusterError(f"erl_parse:parse_exprs of the queue runner on {peer} answered {parsed!r:.300}")
            bindings = await self.dist.rpc(peer, "erl_eval", "new_bindings", [], timeout)
            program = self._programs[peer] = (parsed[1], bindings)
        return program

    async def _spawn(self, queue: str, peer: str, timeout: float) -> _Runner:
        program, bindings = await self._program(peer, timeout)
        pid = await self.dist.rpc(peer, "erlang", "spawn", [A("erl_eval"), A("exprs"), [program, bindings]], timeout)
        if type(pid) is not Pid:
            raise ClusterError(f"spawning a queue runner on {peer} answered {pid!r:.300}")
        # Monitored before anything else is sent: if it dies from here on, this node hears of it.
        now = self.clock()
        r = _Runner(queue, peer, pid, self._proc.monitor(pid), now, born=now)
        self.dist.send(pid, (INIT, self.dist.atom, queue.encode()))
        self._pids[pid] = None
        self._runners[queue] = r
        self._by_mref[r.mref] = r
        return r

    def _on_message(self, _proc: Process, msg: Term) -> None:
        if type(msg) is not tuple:
            return
        if len(msg) == 2:
            if msg[0] is ANSWERS:
                if type(msg[1]) is list:
                    for answer in msg[1]:
                        if type(answer) is tuple and len(answer) == 2:
                            self._answer(answer[0], answer[1])
            else:
                self._answer(msg[0], msg[1])
        elif len(msg) == 3 and msg[0] is BATCH_NOTICE:
            entry = self._calls.get(msg[1]) if type(msg[1]) is Reference else None
            if entry is not None and type(msg[2]) is int:
                entry[0].batch_left = msg[2]
                self.batched_calls += msg[2]
        elif len(msg) == 5 and msg[0] is DOWN:
            r = self._by_mref.pop(msg[1], None)
            if r is not None:
                reason = msg[4]
                if reason is NOCONNECTION:
                    # Answers sent before the connection broke may be lost with it: all unknown.
                    self._fail(r, NodeDown(f"node {r.peer} went down"))
                elif reason is NORMAL:
                    # It ends normally only between calls (told to stop, its owner gone): after
                    # every answer it sent, so a call left (sent as it was being stopped) never ran.
                    self._fail(r, NotRun(f"not run: the queue runner of {r.queue} on {r.peer} had stopped"))
                else:
                    why = reason.name if isinstance(reason, Atom) else f"{reason!r:.200}"
                    self._fail(r, RunnerLost(f"the queue runner of {r.queue} on {r.peer} exited: {why}"), ordered=True)

    def _answer(self, ref: Term, result: Term) -> None:
        entry = self._calls.pop(ref, None) if type(ref) is Reference else None
        if entry is not None:
            runner = entry[0]
            runner.calls.pop(ref, None)
            if runner.batch_left:
                runner.batch_left -= 1
            self._settle(ref, entry[1], result, None)

    def _forget(self, r: _Runner) -> None:
        self._pids[r.pid] = self.clock()
        if self._runners.get(r.queue) is r:
            del self._runners[r.queue]
        if self._by_mref.pop(r.mref, None) is not None:
            self._proc.demonitor(r.mref)

    def _fail(self, r: _Runner, error: Exception, *, ordered: bool = False) -> None:
        """``r`` is gone: its calls in flight fail with ``error`` now, not at their timeout.
        ``ordered``: every answer ``r`` sent has arrived (its exit came after them on the same
        connection), so only the oldest unanswered call, or the calls of the batch it announced
        and did not answer, may have started; the others fail with :class:`NotRun`."""
        self._forget(r)
        started = max(1, r.batch_left)
        for n, ref in enumerate(list(r.calls)):
            entry = self._calls.pop(ref, None)
            if entry is not None:
                if ordered and n >= started:
                    not_run = NotRun(f"not run: the queue runner of {r.queue} on {r.peer} ended before it")
                    self._settle(ref, entry[1], None, not_run)
                else:
                    self._settle(ref, entry[1], None, error)
        r.calls.clear()

    def _kill(self, r: _Runner) -> None:
        # No new call goes to it; its end (DOWN, killed) tells which of its calls never started.
        r.killed = True
        if self._runners.get(r.queue) is r:
            del self._runners[r.queue]
        self.dist.exit(r.pid, KILL)

    def stop(self, queue: str) -> None:
        """Stop ``queue``'s runner once the calls already sent to it are run (deleted, idle, or
        moved to another peer). New calls go to a new runner; this one stays monitored, its
        calls bounded and failed as any runner's, until its end (which comes after their
        answers) clears it."""
        r = self._runners.pop(queue, None)
        if r is not None:
            self.dist.send(r.pid, STOP)

    def stalled(self, peer: str) -> None:
        """``peer`` stalled: the calls in flight to its runners fail now (outcome unknown) and
        those runners are killed, so that they do not run queued calls when the peer resumes."""
        for r in [r for r in self._by_mref.values() if r.peer == peer]:  # stopped ones too
            self._fail(r, PeerStalled(f"node {peer} stalled with the call in flight"))
            self.dist.exit(r.pid, KILL)
        self._programs.pop(peer, None)

    def stop_idle(self) -> list[str]:
        """Stop the runners of queues without a call for ``idle_stop`` seconds; their queues. A
        call in flight is never that old: it is bounded by the rpc timeout, a few seconds."""
        now = self.clock()
        cutoff = now - self.idle_stop
        idle = [q for q, r in self._runners.items() if r.last_use < cutoff and not r.calls]
        for q in idle:
            self.stop(q)
        retired = now - RETIRED_FOR
        for pid in [p for p, ended in self._pids.items() if ended is not None and ended < retired]:
            del self._pids[pid]
        return idle

    def close(self) -> None:
        """Stop every runner (this node leaves the cluster or stops)."""
        for q in list(self._runners):
            self.stop(q)
        for r in list(self._by_mref.values()):
            self._forget(r)  # their ends are not waited for: this node is done with them
        self._programs.clear()
