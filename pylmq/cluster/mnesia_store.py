"""The `mnesia` store: the queues are the Erlang cluster's Mnesia tables.

In a mixed cluster the queue tables are LMQ's own (docs/lmq-contract.md#tables: one ``ordered_set``
per queue named by the queue atom, ``'__lmq_queue_info__'``, ``'__lmq_info__'``). A Python node
cannot run Mnesia (it is a hidden node), so every mutation is one ``lmq_lib`` call run on a live
Erlang peer as one Mnesia transaction: locking and ordering are Mnesia's, exactly as between
Erlang nodes. Any connected peer serves a call (the link hands them out in turn; a queue's
transactions go to its runner, see below), so there is no master. Reads (queue names, props,
sizes, wake-up timing) come from the local :class:`~pylmq.cluster.mirror.Mirror`, kept by
:mod:`pylmq.cluster.cluster` from Mnesia table events, without round trips.

``lmq_lib`` changes Mnesia only. An Erlang node serves a queue through a queue process that its
``lmq_queue_mgr`` starts and that caches the queue's props; LMQ starts, updates and stops those
processes on the node that made the change and, by ``lmq_event``, on the others. So after every
create, props change, delete and default props change the store waits until the cluster
(:class:`PeerLink`) has brought every Erlang node's queue processes in line with Mnesia, as if an
Erlang node had made the change (see :mod:`pylmq.cluster.cluster`).

The store has three modes:

- ``local``: not joined; everything goes to the node's own store (durable or memory).
- ``cluster``: joined; mutations by rpc, reads from the mirror.
- ``standalone``: every Erlang peer is gone; the local store was seeded from the mirror and
  serves alone (see :meth:`MnesiaStore.become_standalone`).

Every call is bounded: it fails after ``rpc_timeout`` seconds (a few by default, configurable),
and sooner when the link finds its peer stalled (it sends nothing and leaves a probe unanswered,
see :mod:`pylmq.erlang.connection`). Stalled peers are left out of :meth:`PeerLink.peers` until
they are heard from again (and the link has found them still running Mnesia with the others), so
only the calls already sent to a peer when it stalls wait for it.
A peer that let a call time out is tried after the others for a while (it may be alive but
slow, e.g. waiting on a stalled replica's locks; the stall check is what excludes a peer).

Failover, per operation, when the peer serving a call dies, stalls or stays silent past the rpc
timeout after the call was sent, so that its outcome is unknown:

- ``enqueue`` is not idempotent: the record's id is made on the Erlang side, so a retry cannot
  tell whether the first attempt committed and could store the message twice. It is NOT retried:
  the caller gets a :class:`~pylmq.errors.ClusterError` (HTTP 503) and the client, which knows
  whether a duplicate matters, decides. A call that could not be sent (no connected peer) is
  tried on the next peer.
- ``dequeue`` is retried on another peer. If the first attempt committed, its message sits in
  processing under a deadline nobody will ever see; it is redelivered when the deadline passes
  (LMQ's own redelivery), so nothing is lost and nothing is delivered twice within a timeout.
- ``done``/``retain``/``release``/``put_back`` are retried on another peer. If the retry says
  ``not_found``, the first attempt is taken to have committed (a committed ack, ext, nack or
  put-back is exactly what makes the retry find nothing) and the call succeeds. The only other
  ways to get that answer are a deadline that passed during the failover or a second settle of
  the same delivery, and in both the message's fate is what LMQ gives it anyway.
- ``create``/``delete``/props/default props are idempotent and are retried.

This node's transactions on one queue (enqueue, dequeue, done, retain, release, put_back) are
run by that queue's runner on a peer (:mod:`pylmq.cluster.runner`): one process that runs them
one after the other, as an Erlang node's queue process does, so that they do not fight over the
table's locks (dequeue and the settles read-lock the whole table; concurrent ones make Mnesia
restart them after random sleeps), and without a round trip to this node between two of them. A
call to a runner is one call for the rules above: bounded by ``rpc_timeout``, failed over the
same way. A runner that exits with calls in flight (an operator killed it, or this node did
after a call to it timed out) fails them at once: the one it may have been running (or the
calls of the batch it was running: calls that wait together run in one transaction) with their
outcome unknown, as a peer going down does; the ones behind, which it never reached, with
:class:`~pylmq.errors.NotRun`, and they are sent again as rpcs of their own. The peer of a
queue's runner is chosen by the link (:meth:`PeerLink.queue_peers`); the others are the
fallbacks, in order.

An enqueue goes as an rpc of its own while the queue's runner is held up (its oldest call
unanswered for :data:`RUNNER_HELD`): under a flood of concurrent transactions from Erlang
clients Mnesia can restart a table transaction for longer than ``rpc_timeout``, and a push
queued behind it would wait that long. The row write of a push with per-message options takes
the same lane.

In the cluster the store refuses props the Erlang nodes cannot serve (:func:`erlang_props_problem`),
before anything reaches Mnesia: they would store them, then fail on every request that shows them.

Per-message options (docs/mixed-clusters.md, "Per-message options, dead letters, peek and virtual
queues"): a row holds LMQ's five fields and nothing else (Erlang matches the record's arity), so
only what those fields express is served. A delay is the row's key time (LMQ's "due at"): such a
push writes the row itself, ``mnesia:transaction(fun mnesia:write/3, [Queue, Row, write])`` on a
peer, with the key stamped by this node's clock, then fires ``new_message`` as an Erlang node's
push does: every Erlang queue process with waiters then recomputes ``lmq_lib:waittime`` (the first
row's key) and sleeps until the row is due, and this node's waiters do the same from the mirror. A
per-message retry is the row's retry field. Expiry, intervals, priorities, dead letters and
requeues are refused before anything is written (:func:`mixed_options_problem`). pylmq's virtual
queues live in ``'__lmq_info__'``, one row per name keyed ``{pylmq_virtual_queues, Name}``, shared
by the pylmq nodes of the cluster and ignored by the Erlang ones.

A dequeue that finds nothing although the mirror shows a deliverable first record (the mirror
lags the cluster by an event, or this host's clock runs ahead of the peer's) holds the queue:
:meth:`MnesiaStore.waittime` reports a short wait (doubling up to a second) until the mirror
hears of a change of that queue, so waiting pulls neither spin nor sleep through a message.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Container, Sequence
from typing import Protocol

from pylmq.cluster.mirror import LMQ_INFO, VIRTUAL_QUEUES, Mirror
from pylmq.cluster.records import (
    default_list_to_term,
    item_to_term,
    message_from_term,
    message_to_term,
    name_to_atom,
    props_to_term,
    retry_to_term,
)
from pylmq.core.clock import Clock, SystemClock
from pylmq.core.message import (
    Inherit,
    Item,
    MessageId,
    PushOptions,
    Retry,
    State,
    StoredMessage,
    StoredMessageType,
    new_uuid,
)
from pylmq.core.props import DefaultList, RawProps
from pylmq.core.store import DedupIds, TransferListener
from pylmq.core.table import AccumResult, QueueCounts
from pylmq.erlang.terms import Atom, Export, Term
from pylmq.errors import (
    ClusterError,
    InvalidProps,
    NodeDown,
    NotRun,
    NotSupported,
    PeerStalled,
    RemoteError,
    RunnerLost,
)
from pylmq.store.local import LocalStore

__all__ = [
    "CLUSTER",
    "ERLANG_INT_MAX",
    "LOCAL",
    "MODES",
    "STANDALONE",
    "MnesiaStore",
    "PeerLink",
    "erlang_defaults_problem",
    "erlang_props_problem",
    "mixed_options_problem",
    "not_in_mixed_cluster",
    "virtual_row",
]

log = logging.getLogger("pylmq.cluster.mnesia_store")

A = Atom
LOCAL, CLUSTER, STANDALONE = "local", "cluster", "standalone"
MODES = (LOCAL, CLUSTER, STANDALONE)
OK, EMPTY, ERROR, NOT_FOUND = A("ok"), A("empty"), A("error"), A("not_found")
NO_QUEUE = (ERROR, A("no_queue_exists"))
ACCUM_REPLY = {OK: "no", (A("accum"), A("new")): "new", (A("accum"), A("yes")): "yes"}
RPC_TIMEOUT = 5.0  # seconds a call to an Erlang peer may take; Settings.rpc_timeout
SUSPECT_FOR = 10.0  # seconds a peer that let a call time out is tried after the others
# An enqueue does not queue behind a runner whose oldest call has waited this long (seconds):
# calls take milliseconds; this long means Mnesia is restarting a transaction under contention.
RUNNER_HELD = 0.25
MNESIA_WRITE = Export(A("mnesia"), A("write"), 3)
MNESIA_DELETE = Export(A("mnesia"), A("delete"), 3)
WRITE, ATOMIC, ABORTED, NO_EXISTS = A("write"), A("atomic"), A("aborted"), A("no_exists")
HOLD_FIRST, HOLD_MAX = 0.05, 1.0
# jsonx, LMQ's JSON encoder, fails on larger integers (no_match): an Erlang node holding one in a
# queue's props answers GET /stats and GET /properties with 500. Its msgpack wraps past 2**64.
ERLANG_INT_MAX = 2**63 - 1


# Why the Erlang nodes cannot honour pylmq's per-message features: their dequeue knows LMQ's
# five record fields only.
ERLANG_NODES_WOULD = "its Erlang nodes would redeliver or discard these messages"


def not_in_mixed_cluster(feature: str, why: str = ERLANG_NODES_WOULD) -> str:
    """The refusal text of a pylmq feature the Erlang nodes of a mixed cluster cannot honour."""
    return f"{feature} not available while the node serves an Erlang LMQ cluster: {why}"


def mixed_options_problem(options: PushOptions, retry: Retry) -> str | None:
    """Why a push with these options (``retry``: the queue's) cannot be served by the Erlang
    nodes of a cluster, or None: a delay is the row's key time and a retry its retry field,
    nothing else fits LMQ's record. ``once`` is LMQ's retry 0 (one delivery, never another), so
    an expiry beside it changes nothing and is accepted: by queue_server's rule a message never
    delivered is delivered once even after it expired, and a ``once`` one is never delivered
    again."""
    if options.interval is not None:
        return not_in_mixed_cluster("a retry interval (per-message timeout) is")
    if options.priority != 0:
        return not_in_mixed_cluster("a message priority is")
    if options.group is not None:
        return not_in_mixed_cluster("a message group (an SQS FIFO queue's MessageGroupId) is")
    if options.expires is not None and not options.once:
        return not_in_mixed_cluster("a ttl (expiry time) is")
    if not options.once and (retry if options.retry is Inherit.QUEUE else options.retry) is None:
        return not_in_mixed_cluster('retry "infinity" is', "their HTTP pull fails on it; set a number of retries")
    return None


def erlang_props_problem(props: RawProps) -> str | None:
    """Why the Erlang LMQ nodes of a cluster could not serve these (valid) props, or None.

    ``retry`` infinity: LMQ's own APIs accept only integers, and its HTTP pull fails on a message
    whose retry is the atom (``integer_to_binary(infinity)``: 500, the message stays in processing
    and comes back after every timeout). Integers as Mnesia holds them (accum in ms) must fit jsonx.
    ``dead_letter``: an Erlang node discards a message out of retries. ``sqs`` (the SQS
    attributes no LMQ prop holds): the props rows pylmq writes hold LMQ's keys only
    (:func:`~pylmq.cluster.records.props_to_term`), so the cluster could not keep it.
    """
    if props.get("dead_letter") is not None:
        return not_in_mixed_cluster("dead_letter is")
    retry = props.get("retry", 0)
    if retry is None:
        return (
            'retry "infinity" cannot be served by the Erlang LMQ nodes of this cluster'
            " (their HTTP pull fails on it); set a number of retries"
        )
    stored = {
        "retry": retry,
        "accum": round(float(props.get("accum", 0)) * 1000),
        "timeout": props.get("timeout", 0),
    }
    for key, value in stored.items():
        if value > ERLANG_INT_MAX:
            limit = ERLANG_INT_MAX if key != "accum" else ERLANG_INT_MAX / 1000
            return f"{key} {props[key]!r} cannot be served by the Erlang LMQ nodes of this cluster (at most {limit:g})"
    if props.get("sqs"):
        return not_in_mixed_cluster(
            "SQS queue attributes beyond VisibilityTimeout and RedrivePolicy (the 'sqs' prop) are",
            "the props rows shared with the Erlang LMQ nodes hold LMQ's properties only",
        )
    return None


def erlang_defaults_problem(defaults: DefaultList) -> str | None:
    """:func:`erlang_props_problem` of the first default props that have one, naming them."""
    for regex, props in defaults:
        if (problem := erlang_props_problem(props)) is not None:
            return f"default props of {regex!r:.60}: {problem}"
    return None


def virtual_row(name: str, queues: Sequence[str]) -> Term:
    """pylmq's virtual queue ``name`` as its ``'__lmq_info__'`` row (one row per name)."""
    return (A("lmq_info"), (VIRTUAL_QUEUES, name.encode()), [q.encode() for q in queues])


class PeerLink(Protocol):
    """What the store needs from the cluster membership (:class:`pylmq.cluster.Cluster`)."""

    def peers(self) -> list[str]:
        """Connected Erlang peers able to serve a call (stalled ones left out), in the order to try them."""
        ...

    def stalled(self) -> dict[str, float]:
        """Erlang peers left out of :meth:`peers` as stalled -> seconds since heard from."""
        ...

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term: ...

    def queue_peers(self, queue: str) -> list[str]:
        """:meth:`peers` in the order to try them for a transaction on ``queue``: the peer of its
        runner first, or the peer it is to go to (another writer's node, for a shared queue)."""
        ...

    async def run(self, queue: str, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        """``module:function(args)`` run by ``queue``'s runner on ``peer``; raises as :meth:`rpc`,
        :class:`~pylmq.errors.RunnerLost` if the runner exited with the call in flight, and
        :class:`~pylmq.errors.NotRun` if it ended before reaching the call."""
        ...

    def runner_wait(self, queue: str) -> float:
        """Seconds the oldest unanswered call to ``queue``'s runner has waited (0 if none)."""
        ...

    def pushed(self, name: str) -> None:
        """A push on this node committed: tell every node's lmq_event (``new_message``)."""
        ...

    async def queue_created(self, name: str, props: Term | None) -> None:
        """The queue was created, or its props (``props``: the term now in Mnesia) were set,
        through this node: bring every Erlang node's queue process up to date."""
        ...

    async def queue_deleted(self, name: str) -> None:
        """The queue was deleted through this node: stop every Erlang node's queue process."""
        ...

    async def defaults_changed(self) -> None:
        """The default props were set through this node: every Erlang queue process reloads."""
        ...

    def node_lists(self) -> tuple[list[str], list[str]]:
        """(the cluster's Mnesia db nodes, those running that this node reaches), sorted."""
        ...


class _Unknown(Exception):
    """The call was sent and its peer died or went silent: its outcome is unknown."""


def _failure(peer: str, e: Exception, elapsed: float) -> str:
    if isinstance(e, PeerStalled):
        return f"peer {peer} stalled (nothing received from it) and the call was dropped after {elapsed:.1f} s"
    if isinstance(e, RunnerLost):
        return f"the queue runner on peer {peer} exited after {elapsed:.1f} s ({e.detail})"
    if isinstance(e, NodeDown):
        return f"peer {peer} went down after {elapsed:.1f} s ({e.detail})"
    return f"peer {peer} did not answer within the rpc timeout ({elapsed:.1f} s)"


def _skipped(link: PeerLink) -> str:
    stalled = link.stalled()
    if not stalled:
        return ""
    return "; stalled, so not called: " + ", ".join(f"{p} (silent {s:.1f} s)" for p, s in stalled.items())


def _whole(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


class MnesiaStore:
    def __init__(self, local: LocalStore, clock: Clock | None = None, *, rpc_timeout: float = RPC_TIMEOUT) -> None:
        self.local = local
        self.rpc_timeout = rpc_timeout
        self.clock: Clock = clock or SystemClock()
        self.mirror = Mirror(clock=self.clock.now)
        self.mode = LOCAL
        self.kind = local.kind  # "mnesia" while serving the cluster's queues
        self.link: PeerLink | None = None
        self._turn = itertools.count()
        self._holds: dict[str, tuple[int, float, float]] = {}  # name -> (mirror seq, until, length)
        self._suspects: dict[str, float] = {}  # peer -> until when it is tried last

    @property
    def clustered(self) -> bool:
        return self.mode == CLUSTER

    # -- life cycle -----------------------------------------------------------------------------

    async def open(self) -> None:
        await self.local.open()

    async def close(self) -> None:
        await self.local.close()

    async def barrier(self) -> None:
        # In the cluster a mutation is as durable as LMQ makes it (ram_copies on every db node)
        # once its transaction returned; alone, the local store's policy applies.
        if self.mode != CLUSTER:
            await self.local.barrier()

    # -- mode switches (driven by the cluster) ---------------------------------------------------------

    def become_cluster(self, link: PeerLink) -> None:
        self.link = link
        self._holds.clear()
        self.mode, self.kind = CLUSTER, "mnesia"

    async def become_standalone(self) -> tuple[int, int]:
        """Every Erlang peer is gone: the local store becomes a copy of the mirror and serves.

        Records keep their ids, states and deadlines, so deliveries in flight can still be acked
        here and unacked ones come back at their deadline. Returns (queues, messages) seeded.
        """
        # LocalStore's mutations never suspend, so no request sees a half-seeded store.
        local, mirror = self.local, self.mirror
        for name in list(local.queue_names()):
            await local.delete(name)
        await local.set_default_props(list(mirror.defaults))
        names = set(mirror.queue_props) | set(mirror.tables)
        count = 0
        for name in sorted(names):
            await local.create(name, dict(mirror.queue_props.get(name, {})))
            table = local.tables[name]
            t = mirror.table(name)
            for msg in t.messages() if t is not None else []:
                table.restore(msg)
                if local.journal is not None:
                    local.journal.put(name, msg)
                count += 1
            table.recovered()
        # pylmq's virtual queues go on serving alone as the cluster last had them.
        await self._replace_local_virtual(mirror.virtual)
        self.mode, self.kind = STANDALONE, local.kind
        self._holds.clear()
        await local.barrier()
        return len(names), count

    def resume_standalone(self) -> None:
        """Serve the local store alone as it is: the operator chose standalone for a node that
        cannot reach its cluster after a restart (its store holds what it last served alone)."""
        self.mode, self.kind = STANDALONE, self.local.kind
        self._holds.clear()

    async def become_local(self) -> None:
        """Left the cluster: the node starts over on its own (as LMQ's leave), empty."""
        self.mode, self.kind = LOCAL, self.local.kind
        self._holds.clear()
        for name in list(self.local.queue_names()):
            await self.local.delete(name)
        await self._replace_local_virtual({})
        await self.local.barrier()

    async def clear_local(self) -> None:
        """After the Python side's data (virtual queues too) went into the cluster at join."""
        for name in list(self.local.queue_names()):
            await self.local.delete(name)
        await self._replace_local_virtual({})
        await self.local.barrier()

    async def _replace_local_virtual(self, virtual: dict[str, list[str]]) -> None:
        for name in list(self.local.virtual_queues()):
            if name not in virtual:
                await self.local.set_virtual(name, [])
        for name, queues in virtual.items():
            await self.local.set_virtual(name, queues)

    # -- calls ---------------------------------------------------------------------------------------------

    def _link(self) -> PeerLink:
        if self.link is None:
            raise ClusterError("not joined to a cluster")
        return self.link

    async def _call(
        self,
        function: str,
        args: list[Term],
        *,
        retry_unknown: bool,
        module: str = "lmq_lib",
        what: str = "",
        queue: str | None = None,
        near: str | None = None,
    ) -> tuple[Term, bool]:
        """``module:function(args)`` (``lmq_lib`` unless told) on a peer; returns (result, whether
        an earlier attempt's outcome is unknown). A transaction on ``queue``'s table is run by the
        queue's runner, on the peers in the link's order for it; other calls are rpcs to the peers
        in turn, or in the order of queue ``near``, whose table the rpc writes: its write then
        comes from the node of the queue's runner. (The link runs an rpc in a process whose pid
        it learns, so the write counts as this node's; but on a peer without spawn requests,
        before OTP 23, it counts as another node's, and from elsewhere it would send the runner
        there, see :meth:`PeerLink.queue_peers`.) See the module docstring
        for failover. ``what`` names the operation in errors (``module:function`` unless told)."""
        what = what or f"{module}:{function}"
        link = self._link()
        unknown = False
        peers = link.peers()
        if not peers:
            raise ClusterError(f"{what} not run: no Erlang LMQ peer is reachable{_skipped(link)}")
        if queue is not None or near is not None:
            peers = link.queue_peers(queue or near or "")
        else:
            start = next(self._turn) % len(peers)
            peers = peers[start:] + peers[:start]
        now = self.clock.now()
        # Peers that let a call time out lately go last: alive maybe, but slow or stalling.
        order = sorted(peers, key=lambda p: self._suspects.get(p, 0.0) > now)
        failures: list[str] = []
        loop = asyncio.get_running_loop()
        for n, peer in enumerate(order, 1):
            began = loop.time()
            try:
                if queue is None:
                    return await link.rpc(peer, module, function, args, self.rpc_timeout), unknown
                try:
                    return await link.run(queue, peer, module, function, args, self.rpc_timeout), unknown
                except NotRun:
                    # Its runner was killed before reaching it (a call ahead of it timed out), or
                    # stopped: nothing was done. Sent again as an rpc of its own, not queued in a
                    # new runner behind the same kind of transaction, to the node of the queue's
                    # runner now (see ``near`` above).
                    began = loop.time()
                    peer = next(iter(link.queue_peers(queue)), peer)
                    return await link.rpc(peer, module, function, args, self.rpc_timeout), unknown
            except (NodeDown, TimeoutError) as e:
                if isinstance(e, PeerStalled) and not e.sent:
                    # It stalled after peers() was taken; the call never went out: the next peer.
                    failures.append(f"peer {peer} stalled before the call was sent")
                    continue
                failure = _failure(peer, e, loop.time() - began)
                failures.append(failure)
                if isinstance(e, TimeoutError):
                    self._suspects[peer] = self.clock.now() + SUSPECT_FOR
                unknown = True
                if not retry_unknown:
                    raise ClusterError(
                        f"{what}: {failure}; its outcome is unknown (it may or may not have"
                        " been applied), so it was not retried: retry if a duplicate is acceptable"
                    ) from e
                if n < len(order):
                    log.warning("%s: %s; retrying it on another peer", what, failure)
            except RemoteError as e:
                raise ClusterError(f"{what} failed on {peer}: {e.detail}") from e
        raise ClusterError(f"{what} failed on every Erlang LMQ peer: {'; '.join(failures)}{_skipped(link)}")

    def _enqueue_lane(self, name: str) -> str | None:
        """Where an enqueue on ``name`` goes: the queue's runner (the queue, returned), so that it
        never fights this node's table transactions over the table's locks, unless the runner
        is held up (``None``: an rpc of its own). An enqueue's outcome cannot be learnt again,
        and one queued behind a transaction that Mnesia keeps restarting (heavy concurrent
        writes from elsewhere) would wait out ``rpc_timeout`` with it."""
        return name if self._link().runner_wait(name) < RUNNER_HELD else None

    async def _table_call(self, name: str, function: str, args: list[Term]) -> tuple[Term, bool]:
        """``lmq_lib:function(args)``, a transaction that locks the table of queue ``name``
        (dequeue, done, retain, release, put_back), run by the queue's runner and retried on
        another peer if its outcome is unknown."""
        return await self._call(function, args, retry_unknown=True, queue=name)

    @staticmethod
    def _check(function: str, result: Term) -> Term:
        if isinstance(result, tuple) and len(result) == 2 and result[0] is ERROR and result != NO_QUEUE:
            raise ClusterError(f"lmq_lib:{function} answered {result!r:.300}")
        return result

    # -- queues and properties -------------------------------------------------------------------

    def check_push(self, options: PushOptions, retry: Retry) -> None:
        """:class:`NotSupported` if the Erlang nodes of the cluster cannot honour a push with
        these options to a queue whose retry is ``retry`` (:func:`mixed_options_problem`); for
        callers that check every queue of a push before creating any."""
        if self.mode == CLUSTER and (problem := mixed_options_problem(options, retry)) is not None:
            raise NotSupported(problem)

    def check_props(self, props: RawProps) -> None:
        if self.mode == CLUSTER and (problem := erlang_props_problem(props)) is not None:
            raise InvalidProps(problem)

    def dedup_ids(self, name: str) -> DedupIds:
        # A FIFO send is refused in a cluster (its message group): this map fills only while
        # the node serves alone, where its local store keeps the queues.
        return self.local.dedup_ids(name)

    def keep_dedup(self, name: str, key: str, sent: float, message_id: str, sequence: str) -> None:
        self.local.keep_dedup(name, key, sent, message_id, sequence)

    def cluster_nodes(self) -> tuple[list[str], list[str]] | None:
        # LMQ lists Mnesia's db nodes: Erlang nodes only. A pylmq node is hidden and holds no
        # table copy, so it lists itself only while it serves alone.
        return self._link().node_lists() if self.mode == CLUSTER else None

    async def lookup(self, name: str) -> bool:
        return False  # the mirror hears of every queue the cluster creates, in order

    def queue_names(self) -> list[str]:
        if self.mode != CLUSTER:
            return self.local.queue_names()
        return list(self.mirror.queue_props)

    def queue_props(self, name: str) -> RawProps | None:
        if self.mode != CLUSTER:
            return self.local.queue_props(name)
        return self.mirror.queue_props.get(name)

    def default_props(self) -> DefaultList:
        if self.mode != CLUSTER:
            return self.local.default_props()
        return list(self.mirror.defaults)

    async def create(self, name: str, props: RawProps | None = None) -> bool:
        if self.mode != CLUSTER:
            return await self.local.create(name, props)
        atom = name_to_atom(name)
        existed = name in self.mirror.queue_props
        if props is None:
            if existed:
                return False
            # lmq_lib:create/1 of an existing queue would reset its props: look first, as
            # LMQ's queue start does.
            found, _ = await self._call("queue_info", [atom], retry_unknown=True)
            if isinstance(found, list):
                self.mirror.queue_props.setdefault(name, {})
                return False
            self._check("create", (await self._call("create", [atom], retry_unknown=True))[0])
            self.mirror.queue_props.setdefault(name, {})
            await self._link().queue_created(name, None)
            return True
        self.check_props(props)
        term = props_to_term(props)
        self._check("create", (await self._call("create", [atom, term], retry_unknown=True))[0])
        self.mirror.queue_props[name] = dict(props)
        await self._link().queue_created(name, term)
        return not existed

    async def delete(self, name: str) -> bool:
        if self.mode != CLUSTER:
            return await self.local.delete(name)
        existed = name in self.mirror.queue_props or name in self.mirror.tables
        self._check("delete", (await self._call("delete", [name_to_atom(name)], retry_unknown=True))[0])
        self.mirror.queue_props.pop(name, None)
        await self._link().queue_deleted(name)
        return existed

    async def set_queue_props(self, name: str, props: RawProps) -> None:
        if self.mode != CLUSTER:
            return await self.local.set_queue_props(name, props)
        # create/2 replaces the props of an existing queue; create() then has every Erlang node's
        # queue process take them (lmq_lib alone updates no queue process).
        await self.create(name, props)

    async def set_default_props(self, defaults: DefaultList) -> None:
        if self.mode != CLUSTER:
            return await self.local.set_default_props(defaults)
        if (problem := erlang_defaults_problem(defaults)) is not None:
            raise InvalidProps(problem)
        term = default_list_to_term(defaults)
        self._check(
            "set_lmq_info", (await self._call("set_lmq_info", [A("default_props"), term], retry_unknown=True))[0]
        )
        self.mirror.defaults = list(defaults)
        await self._link().defaults_changed()

    # -- messages ----------------------------------------------------------------------------------------

    async def enqueue(self, name: str, item: Item, retry: Retry, accum: float) -> AccumResult:
        if self.mode != CLUSTER:
            return await self.local.enqueue(name, item, retry, accum)
        atom = name_to_atom(name)
        args = [atom, item_to_term(item), [(A("accum"), round(accum * 1000)), (A("retry"), retry_to_term(retry))]]
        result, _ = await self._call("enqueue", args, retry_unknown=False, queue=self._enqueue_lane(name), near=name)
        if result == NO_QUEUE:
            # Nothing was written; the queue was deleted under us: created on use, as LMQ does.
            await self.create(name)
            result, _ = await self._call(
                "enqueue", args, retry_unknown=False, queue=self._enqueue_lane(name), near=name
            )
        reply = ACCUM_REPLY.get(result)
        if reply is None:
            raise ClusterError(f"lmq_lib:enqueue answered {result!r:.300}")
        self._link().pushed(name)
        return reply

    async def push(self, name: str, item: Item, retry: Retry, options: PushOptions, *, track: bool = False) -> bytes:
        """One message with per-message options; its uuid. ``retry`` is the queue's retry, used
        unless ``options`` set one. In the cluster, the row is written as LMQ's enqueue would,
        keyed by its due time (see the module docstring); options the Erlang nodes cannot honour
        are refused with :class:`NotSupported` before anything is written. ``track`` (the queue
        has a dead-letter queue) cannot hold there: that prop is refused in the cluster."""
        if self.mode != CLUSTER:
            return await self.local.push(name, item, retry, options, track=track)
        self.check_push(options, retry)
        effective = 0 if options.once else retry if options.retry is Inherit.QUEUE else options.retry
        now = self.clock.now()
        # LMQ's key time is when the row becomes due; an earlier not-before is now, as enqueue stamps.
        ts = float(now if options.not_before is None else max(now, options.not_before))
        uuid = new_uuid()
        stored = None if effective is None else effective + 1  # LMQ counts deliveries left, first included
        row = message_to_term(StoredMessage((ts, uuid), State.AVAILABLE, StoredMessageType.NORMAL, stored, item))
        atom = name_to_atom(name)
        result = await self._write(name, atom, row)
        if self._no_table(result):
            # Nothing was written: created on use, as LMQ does, then written.
            await self.create(name)
            result = await self._write(name, atom, row)
        if result != (ATOMIC, OK):
            raise ClusterError(f"mnesia:write of a message to {name} answered {result!r:.300}")
        # As an Erlang node's push: every queue process recomputes its wait from the first row.
        self._link().pushed(name)
        return uuid

    async def _write(self, name: str, atom: Atom, row: Term) -> Term:
        # Not retried when its outcome is unknown, as enqueue: a row due now may have been
        # delivered and acked before a second write would bring it back. In the enqueue's lane,
        # as an enqueue: behind the runner's batches instead of fighting them over the table's
        # locks. (Sent through rex, as it was, its write also counted as another node's: the
        # table lock off, and the node of the queue's real other writer replaced.)
        result, _ = await self._call(
            "transaction", [MNESIA_WRITE, [atom, row, WRITE]], retry_unknown=False, module="mnesia",
            what=f"mnesia:write of a message to {name}", queue=self._enqueue_lane(name), near=name,
        )  # fmt: skip
        return result

    @staticmethod
    def _no_table(result: Term) -> bool:
        return (
            isinstance(result, tuple)
            and len(result) == 2
            and result[0] is ABORTED
            and isinstance(result[1], tuple)
            and len(result[1]) >= 1
            and result[1][0] is NO_EXISTS
        )

    async def dequeue_in_group(
        self, name: str, group: str, timeout: float, after: bytes | None = None
    ) -> tuple[StoredMessage, float] | None:
        if self.mode != CLUSTER:
            return await self.local.dequeue_in_group(name, group, timeout, after)
        return None  # message groups are pylmq's: the cluster's queues have none

    async def dequeue(
        self, name: str, timeout: float, dead_letter: str | None = None, *, hold: bool = False
    ) -> tuple[StoredMessage, float] | None:
        if self.mode != CLUSTER:
            return await self.local.dequeue(name, timeout, dead_letter, hold=hold)
        # ``dead_letter`` cannot be set in the cluster (erlang_props_problem): the Erlang nodes'
        # discard is the only fate of a message out of retries here, as for every node.
        t = self.mirror.table(name)
        first = t.first() if t is not None else None
        seq = self.mirror.seq.get(name, 0)
        result, _ = await self._table_call(name, "dequeue", [name_to_atom(name), _whole(timeout)])
        if result is EMPTY or result == NO_QUEUE:
            self._hold(name, seq)
            return None
        self._check("dequeue", result)
        try:
            msg = message_from_term(result)
        except ValueError as e:
            raise ClusterError(f"lmq_lib:dequeue answered {result!r:.300}") from e
        self._holds.pop(name, None)
        now = self.clock.now()
        retention = now - first.id[0] if first is not None and first.id[0] <= now else 0.0
        return msg, max(0.0, retention)

    async def _settle(self, name: str, function: str, args: list[Term]) -> bool:
        result, unknown = await self._table_call(name, function, args)
        if result is OK:
            return True
        if result is NOT_FOUND or result == NO_QUEUE:
            return unknown  # see the module docstring: the lost attempt committed
        self._check(function, result)
        raise ClusterError(f"lmq_lib:{function} answered {result!r:.300}")

    async def done(self, name: str, uuid: bytes) -> bool:
        if self.mode != CLUSTER:
            return await self.local.done(name, uuid)
        return await self._settle(name, "done", [name_to_atom(name), uuid])

    async def retain(self, name: str, uuid: bytes, timeout: float) -> bool:
        if self.mode != CLUSTER:
            return await self.local.retain(name, uuid, timeout)
        return await self._settle(name, "retain", [name_to_atom(name), uuid, _whole(timeout)])

    async def release(self, name: str, uuid: bytes) -> bool:
        if self.mode != CLUSTER:
            return await self.local.release(name, uuid)
        ok = await self._settle(name, "release", [name_to_atom(name), uuid])
        if ok:
            self._link().pushed(name)  # available again: waiting pullers anywhere may take it
        return ok

    async def claim(
        self, name: str, uuids: Sequence[bytes], timeout: float, max_bytes: int | None = None
    ) -> list[StoredMessage | None]:
        if self.mode != CLUSTER:
            return await self.local.claim(name, uuids, timeout, max_bytes)
        # lmq_lib has no operation that takes a record back by uuid whatever its state, and a
        # read-then-write from here would race the Erlang nodes' own deliveries.
        raise NotSupported("claiming messages by id is not available while the node serves an Erlang LMQ cluster")

    async def put_back(self, name: str, uuid: bytes) -> bool:
        if self.mode != CLUSTER:
            return await self.local.put_back(name, uuid)
        ok = await self._settle(name, "put_back", [name_to_atom(name), uuid])
        if ok:
            self._link().pushed(name)
        return ok

    def listen_transfers(self, listener: TransferListener | None) -> None:
        # Only the local store transfers records (dead letters); the cluster has none.
        self.local.listen_transfers(listener)

    async def requeue(self, dlq: str, count: int, to: str | None, keep: Container[str] = ()) -> int:
        if self.mode != CLUSTER:
            return await self.local.requeue(dlq, count, to, keep)
        raise NotSupported(not_in_mixed_cluster("requeue of dead letters is", "it has no dead-letter queues"))

    # -- virtual queues (pylmq's own: lmq_info rows the Erlang nodes never read) ----------------

    def virtual_queues(self) -> dict[str, list[str]]:
        if self.mode != CLUSTER:
            return self.local.virtual_queues()
        return {name: list(queues) for name, queues in self.mirror.virtual.items()}

    async def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        """Bind ``name`` to ``queues`` (an empty sequence unbinds it). In the cluster, one
        ``'__lmq_info__'`` row per name, written or deleted in one transaction, so that two pylmq
        nodes binding different names at once keep both."""
        if self.mode != CLUSTER:
            return await self.local.set_virtual(name, queues)
        if queues:
            call = [MNESIA_WRITE, [LMQ_INFO, virtual_row(name, queues), WRITE]]
        else:
            call = [MNESIA_DELETE, [LMQ_INFO, (VIRTUAL_QUEUES, name.encode()), WRITE]]
        result, _ = await self._call(
            "transaction", call, retry_unknown=True, module="mnesia", what=f"virtual queue {name} in lmq_info"
        )
        if result != (ATOMIC, OK):
            raise ClusterError(f"virtual queue {name} in lmq_info: mnesia answered {result!r:.300}")
        # The mirror hears of it by its table event too; set now so this node's next call sees it.
        if queues:
            self.mirror.virtual[name] = list(queues)
        else:
            self.mirror.virtual.pop(name, None)

    # -- reads -----------------------------------------------------------------------------------------

    async def peek(self, name: str, after: MessageId | bytes | None, limit: int) -> list[StoredMessage]:
        """Records in id order after ``after`` (see :meth:`pylmq.core.store.Store.peek`), from
        the mirror: LMQ's fields only (no ext)."""
        if self.mode != CLUSTER:
            return await self.local.peek(name, after, limit)
        t = self.mirror.table(name)
        return [] if t is None else t.page(after, limit)

    def find_delivery(self, name: str, key: int) -> bytes | None:
        """The uuid of the processing record of ``name`` whose uuid has this integer key
        (:func:`~pylmq.core.message.msg_key`), from the mirror's index; None if none or several."""
        if self.mode != CLUSTER:
            return self.local.find_delivery(name, key)
        t = self.mirror.table(name)
        return None if t is None else t.find_delivery(key)

    def _hold(self, name: str, seq: int) -> None:
        if self.mirror.seq.get(name, 0) != seq:
            return  # the mirror moved during the call: look again at once
        old = self._holds.get(name)
        length = HOLD_FIRST if old is None or old[0] != seq else min(HOLD_MAX, old[2] * 2)
        self._holds[name] = (seq, self.clock.now() + length, length)

    def waittime(self, name: str) -> float | None:
        if self.mode != CLUSTER:
            return self.local.waittime(name)
        t = self.mirror.table(name)
        if t is None:
            return None
        now = self.clock.now()
        wait = t.waittime(now)
        hold = self._holds.get(name)
        if wait is None or hold is None:
            return wait
        if hold[0] != self.mirror.seq.get(name, 0):
            del self._holds[name]
            return wait
        return max(wait, hold[1] - now)

    def size(self, name: str) -> int:
        if self.mode != CLUSTER:
            return self.local.size(name)
        t = self.mirror.table(name)
        return 0 if t is None else len(t)

    def counts(self, name: str) -> QueueCounts:
        if self.mode != CLUSTER:
            return self.local.counts(name)
        t = self.mirror.table(name)
        return QueueCounts(0, 0, 0) if t is None else t.counts()

    def memory(self, name: str) -> int:
        if self.mode != CLUSTER:
            return self.local.memory(name)
        t = self.mirror.table(name)
        return 0 if t is None else t.bytes

    def messages(self, name: str) -> list[StoredMessage]:
        if self.mode != CLUSTER:
            return self.local.messages(name)
        t = self.mirror.table(name)
        return [] if t is None else t.messages()
