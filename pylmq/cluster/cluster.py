"""Membership of a pylmq node in an Erlang LMQ cluster: join, leave, peers, node-down, fallback.

A :class:`Cluster` owns, on the node's hidden Erlang distribution node:

- the ``lmq_event`` process, which takes part in LMQ's event protocol (docs/lmq-contract.md#the-lmq_event-protocol):
  it accepts ``{notify, {remote, Event}}``; ``{join_node, N}`` adds N to this node's broadcast
  list, a remote ``new_message`` wakes this node's pullers, remote ``queue_created`` /
  ``queue_deleted`` update the queue manager (checked against the mirror, which is the
  authority: an event can be older than what the mirror already knows);
- the mirror's subscriber process: subscribed through ``mnesia_subscr`` (for its own pid, which
  mnesia_subscr links to) on ONE Erlang replica node, so each event arrives once. When that node
  goes down, or the link reports the subscription gone, it re-subscribes on another peer and
  re-scans every table (events in the gap are lost, see :mod:`pylmq.cluster.mirror`);
- the peer list (Mnesia's running db nodes that this node is connected to), refreshed every
  second, and the Python members (other pylmq nodes, found among the cluster's hidden nodes
  with ``lmq_cluster:hello``), for ``lmq-admin status`` and event broadcast.

Erlang nodes' queue processes: an Erlang LMQ node serves a queue only through the queue process
its ``lmq_queue_mgr`` runs, which caches the queue's props. The store's writes are ``lmq_lib``
transactions, which change Mnesia and fire only a *local* ``lmq_event`` on the node that ran them,
so that node would get no queue process and keep stale props (its peers react to the broadcast
remote event). After each such write, before the operation answers, this module therefore hands
every serving Erlang node the remote event an Erlang node would have broadcast, through
``gen_event:sync_notify`` so that it has been handled when the call returns: ``queue_created``
(start the queue process, or reload its props) and ``queue_deleted`` (stop it). A props change
also sets the queue process's raw props (``lmq_queue:props``), and a default props change reloads
every queue process of every node (LMQ reloads only those of the node that set them).

Joining (``lmq-admin join NODE`` or ``{join, Node}`` in app.config): connect and check that
NODE runs Mnesia; announce this node with ``{join_node, Self}`` to every Erlang node's
``lmq_event`` (a pylmq node never asks LMQ to run ``lmq_console:add_new_node`` on it: real LMQ
would record it as a db node whose table copies never load); subscribe and scan; put the Python
side's own messages into the cluster; then serve the cluster's queues (the store switches to
``cluster`` mode, like LMQ's join restarts its application). Leaving stops serving the cluster's
queues: the subscriptions end, and the node starts over on its own, empty, as LMQ's leave does;
messages it had delivered and that are not acked come back elsewhere at their deadline.

Membership survives restarts (:mod:`pylmq.cluster.membership`, ``data/cluster.json``): a node
restarted with a recorded membership refuses queue requests (``cluster_unavailable``, 503) and
rejoins in the background (:meth:`Cluster.restore`), unless the operator chose to serve alone
(:meth:`Cluster.standalone`, also recorded). See docs/mixed-clusters.md.

A peer is gone when its connection drops or when it leaves Mnesia's running db nodes (a
graceful stop ends Mnesia before the node: the disconnect comes later). When the last Erlang
peer is gone the node goes on alone: its local store is seeded from the
mirror (every queue, its props, the default props and every record with its id, state and
deadline) and serves (``standalone``, logged at warning and shown by ``lmq-admin status``).
Several pylmq nodes that lose the cluster together each go on with a full copy (availability
first: a message may then be delivered by each of them; none is lost).

Stalled peers (a suspended Erlang node: connected, silent, see :mod:`pylmq.erlang.connection`):
the store's calls leave them out until they are heard from again and a membership refresh finds
them among the serving node's running Mnesia nodes (a node the others dropped meanwhile holds a
partition's stale copy, which Mnesia never merges back), an Erlang node's queue
processes are brought in line by the asynchronous remote event (handled when it resumes, as
with an Erlang sender), ``lmq-admin status`` lists them as stalled, not active, and when the
mirror's subscription node stalls the mirror re-subscribes on a live peer, as after a node-down.

Re-joining (``lmq-admin join`` to a restarted Erlang node): the cluster wins where it has data
and the Python side fills in what it lacks. Queue props and the default list already in the
cluster are kept; queues only the Python side has are created with its props; every record the
Python side holds whose uuid the cluster does not have is written with its id, state, retry
and content (``mnesia:dirty_write``, the one write outside ``lmq_lib``: no ``lmq_lib`` call keeps
an id). So messages pushed or still unacked during the standalone time go back into the
cluster, and a cluster that came back empty is seeded from the Python side's data.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import zlib
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from pylmq.cluster import membership
from pylmq.cluster.membership import Membership
from pylmq.cluster.mirror import ADMIN_TABLES, LMQ_INFO, QUEUE_INFO, SCHEMA
from pylmq.cluster.mnesia_store import (
    CLUSTER,
    ERLANG_INT_MAX,
    LOCAL,
    STANDALONE,
    MnesiaStore,
    erlang_defaults_problem,
    erlang_props_problem,
    virtual_row,
)
from pylmq.cluster.records import default_list_to_term, message_to_term, name_from_atom, name_to_atom, props_to_term
from pylmq.cluster.runner import QueueRunners
from pylmq.core.manager import QueueManager
from pylmq.erlang import Atom, Node, Process
from pylmq.erlang.terms import Export, Pid, Term
from pylmq.errors import ClusterError, ClusterUnavailable, DistError, RemoteError

__all__ = ["Cluster", "not_connected_yet", "rejoining_error"]

log = logging.getLogger("pylmq.cluster")

A = Atom
NOTIFY, REMOTE = A("notify"), A("remote")
JOIN_NODE, NEW_MESSAGE = A("join_node"), A("new_message")
QUEUE_CREATED, QUEUE_DELETED = A("queue_created"), A("queue_deleted")
SYNC_NOTIFY, EXIT, OK, ERROR = A("sync_notify"), A("EXIT"), A("ok"), A("error")
TABLE, SIMPLE = A("table"), A("simple")
REFRESH_INTERVAL = 1.0
PROBATION = 1.5
"""Seconds a node that stopped serving must be among the running Mnesia nodes before it serves."""
REJOIN_INTERVAL = 2.0
REJOINING = "rejoining"  # a mode of the Cluster only: the store stays local, the APIs answer 503
CALL_TIMEOUT = 15.0
SHARED_FOR = 2.0
"""Seconds after another node's last write to a queue during which its runner uses row locks
and goes to the node of that write."""
SETTLE_FOR = 2.0
"""Seconds (up to twice as many, a random share per runner) a queue's runner stays on its peer
before it may go to another writer's node."""


def not_connected_yet(m: Membership) -> str:
    return f"not connected yet to {', '.join(m.nodes)}"


def rejoining_error(detail: str) -> ClusterUnavailable:
    """What queue requests get while a restarted member rejoins its cluster."""
    return ClusterUnavailable(f"rejoining the cluster: {detail}; lmq-admin standalone serves alone meanwhile")


class Cluster:
    def __init__(
        self,
        dist: Node,
        store: MnesiaStore,
        manager: QueueManager,
        *,
        refresh_interval: float = REFRESH_INTERVAL,
        membership_file: Path | None = None,
        rejoin_interval: float = REJOIN_INTERVAL,
    ) -> None:
        self.dist = dist
        self.store = store
        self.manager = manager
        self.refresh_interval = refresh_interval
        self.membership_file = membership_file  # None: the membership is not kept across restarts
        self.rejoin_interval = rejoin_interval
        self.mode_detail = ""  # why the node is rejoining or standalone, for lmq-admin status
        self._rejoiner: asyncio.Task[None] | None = None
        self._recorded: tuple[str, ...] = ()  # the Erlang nodes a restarted node rejoins
        self.sub_node: str | None = None
        self.db_nodes: set[str] = set()  # every Erlang db node seen since the join
        self.cluster_db_nodes: list[str] = []  # Mnesia's db_nodes at the last refresh, sorted
        self.running: list[str] = []  # Erlang peers serving: running db nodes we are connected to
        self.python_nodes: dict[str, bool] = {}  # other pylmq members -> connected
        self.event_nodes: set[str] = set()  # nodes that announced themselves with join_node
        self._not_pylmq: set[str] = set()
        self._sync_lock = asyncio.Lock()
        self._op_lock = asyncio.Lock()
        # One membership refresh at a time: two would each connect, announce and lose the same
        # peers.
        self._refresh_lock = asyncio.Lock()
        # Erlang peers that stopped serving (down, out of Mnesia, or stalled and heard from
        # again) -> since when refreshes have found them among the running Mnesia nodes without
        # a gap (None: not listed at the last refresh). They serve again once listed for
        # PROBATION seconds: just after the others drop a node, Mnesia may still list it for
        # some milliseconds while its transactions already go on without it (seen on a loaded
        # host), and a node back from such a partition holds a stale copy.
        self._probation: dict[str, float | None] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pushed: set[str] = set()  # queues pushed to since the last new_message broadcast
        self._refresher: asyncio.Task[None] | None = None
        self._subscriber: Process | None = None
        self._events = dist.spawn("lmq_event", self._on_event)
        self.runners = QueueRunners(dist)  # the queues' runners on the Erlang peers
        store.mirror.listener = self
        store.mirror.own_writer = self.runners.owns
        dist.register_function("lmq_cluster", "hello", self._hello)
        self._cancel_monitor = dist.monitor_node("*", self._on_nodedown)
        self._cancel_stalls = dist.monitor_stalls(self._on_stall)

    # ------------------------------------------------------------------ state

    @property
    def mode(self) -> str:
        return REJOINING if self._rejoiner is not None else self.store.mode

    def status_nodes(self) -> tuple[list[str], list[str]]:
        """(all nodes, active nodes), Erlang and Python, this node included."""
        me = self.dist.name
        every = self.db_nodes | set(self.python_nodes) | {me}
        active = {me}
        if self.mode == CLUSTER:
            active |= set(self.running) | {n for n, up in self.python_nodes.items() if up}
        return sorted(every), sorted(active - set(self.dist.stalled_nodes()))

    def members(self) -> list[dict[str, Any]]:
        """Every node of the cluster as the web console lists it, this node included: name,
        runtime (``python`` for this node and the pylmq members, ``erlang`` for the others),
        ``self``, state (``active``, ``stalled``: connected but silent, ``inactive``: not serving)
        and ``silent_for`` (seconds, for a stalled node; else None). Sorted by name."""
        me = self.dist.name
        every, active = self.status_nodes()
        stalled = self.stalled()
        out: list[dict[str, Any]] = []
        for n in every:
            silent = stalled.get(n)
            state = "stalled" if silent is not None else "active" if n in active else "inactive"
            out.append({
                "name": n,
                "runtime": "python" if n == me or n in self.python_nodes else "erlang",
                "self": n == me,
                "state": state,
                "silent_for": None if silent is None else round(silent, 1),
            })  # fmt: skip
        return out

    def node_lists(self) -> tuple[list[str], list[str]]:
        """What an Erlang node's ``/stats`` lists: Mnesia's db nodes and the running ones (those
        this node reaches; a node down leaves at once, see :meth:`_on_nodedown`)."""
        return list(self.cluster_db_nodes), sorted(self.running)

    # ------------------------------------------------------------------ PeerLink (for the store)

    def peers(self) -> list[str]:
        stalled = self.dist.stalled_nodes()
        return [n for n in self.running if n not in stalled]

    def stalled(self) -> dict[str, float]:
        """Stalled members (Erlang or Python) -> seconds since anything came from them."""
        members = set(self.running) | self.db_nodes | set(self.python_nodes)
        return {n: s for n, s in self.dist.stalled_nodes().items() if n in members}

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        # In a process spawned for the call, whose pid this node learns before it runs (rex
        # would run it in a process of its own choosing): the queue table rows it writes (a
        # push around a held-up runner, a call sent again after NotRun) are then this node's
        # in the mirror, not another node's, which would turn the runner's table lock off and
        # could send it elsewhere (see queue_peers).
        spawned: list[Pid] = []
        given_up = False

        def adopt(pid: Pid) -> None:
            self.runners.adopt(pid)
            if given_up:  # its spawn reply came after the call was given up: it runs anyway
                self.runners.retire(pid)
            else:
                spawned.append(pid)

        try:
            return await self.dist.spawn_call(peer, module, function, args, timeout, spawned=adopt)
        finally:
            given_up = True
            for pid in spawned:
                self.runners.retire(pid)

    def _other_writer(self, queue: str) -> str | None:
        """The node of another node's last write to ``queue`` if it was within SHARED_FOR
        seconds (``""`` when that write named no node); None while nobody else writes it."""
        mirror = self.store.mirror
        last = mirror.foreign_writes.get(queue)
        if last is None or mirror.clock() - last > SHARED_FOR:
            return None
        return mirror.foreign_nodes.get(queue, "")

    def queue_peers(self, queue: str) -> list[str]:
        peers = self.peers()
        current = self.runners.peer_of(queue)
        writer = self._other_writer(queue)
        # A shared queue's runner goes to the node whose processes write it too (LMQ's queue
        # processes there, or another pylmq node's runner). A transaction that asks a remote
        # node's lock manager for a lock loses the race for it to the batches of a runner
        # beside that lock manager, and Mnesia restarts the loser after a random sleep that
        # grows with each restart: the Erlang clients of the other node got 0.28-0.31 of the
        # queue's cycles against 0.39-0.43 with the runner beside them (measured in one run, 3
        # rounds). A runner on the same node lets its queue processes in (erlang:yield() after
        # each batch). It stays SETTLE_FOR seconds (up to twice that) before it moves again, so
        # that writers on several nodes move it at most that often.
        if writer in peers and writer != current and self.runners.settled(queue, SETTLE_FOR):
            head = [writer, current] if current in peers else [writer]
            return head + [p for p in peers if p not in head]
        if current in peers:
            return [current] + [p for p in peers if p != current]
        # A new runner goes on a serving peer other than the mirror's subscription node when
        # there is one: that node also sends this node the table events of every queue, and a
        # runner there made the whole cycle about half as fast (measured in one run: 432-467
        # against 877 cycles/s). Among several others, the queue name's crc32 picks one, so that
        # queues spread over them and a queue's runner comes back to the same peer.
        others = sorted(p for p in peers if p != self.sub_node)
        if not others:
            return peers
        first = others[zlib.crc32(queue.encode()) % len(others)]
        return [first] + [p for p in others if p != first] + [p for p in peers if p not in others]

    async def run(self, queue: str, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        # The runner's batches lock the queue's whole table while no other node has written it
        # for SHARED_FOR seconds: one lock round trip instead of one per row, the Erlang nodes'
        # CPU per cycle down by about a third. Others' transactions would then wait for every
        # batch, even an enqueue of a row of their own; they get row locks back meanwhile.
        table_lock = self._other_writer(queue) is None
        return await self.runners.call(queue, peer, module, function, args, timeout, table_lock=table_lock)

    def runner_wait(self, queue: str) -> float:
        return self.runners.oldest_wait(queue)

    def pushed(self, name: str) -> None:
        # One new_message per queue and pass of the event loop: the pushes answered together
        # wake the same waiters, and each notification costs every Erlang node a gen_event call.
        if not self._pushed:
            asyncio.get_running_loop().call_soon(self._announce_pushes)
        self._pushed.add(name)

    def _announce_pushes(self) -> None:
        names, self._pushed = self._pushed, set()
        for name in names:
            self._broadcast((NEW_MESSAGE, name_to_atom(name)))

    async def queue_created(self, name: str, props: Term | None) -> None:
        atom = name_to_atom(name)
        await self._on_erlang_nodes(
            f"queue_created of {name}", lambda node: self._settle_queue(node, atom, props), (QUEUE_CREATED, atom)
        )

    async def queue_deleted(self, name: str) -> None:
        self.runners.stop(name)
        event = (QUEUE_DELETED, name_to_atom(name))
        await self._on_erlang_nodes(
            f"queue_deleted of {name}", lambda node: self._sync_notify(node, (REMOTE, event)), event
        )

    async def defaults_changed(self) -> None:
        await self._on_erlang_nodes("default props", self._reload_all)

    async def _on_erlang_nodes(
        self, what: str, step: Callable[[str], Awaitable[None]], event: Term | None = None
    ) -> None:
        """Run step on every serving Erlang node at once; a node that fails is logged, not fatal:
        the change is committed in Mnesia, and that node is most likely going down. A stalled
        node is not waited for: it gets the remote ``event`` (if any) asynchronously."""
        nodes = self.peers()
        for n in self.running:
            if n not in nodes:  # stalled
                # What an Erlang node would broadcast; handled once it resumes.
                if event is not None:
                    self.dist.send((A("lmq_event"), A(n)), (NOTIFY, (REMOTE, event)))
                log.warning("Erlang node %s is stalled: not waiting for it to take the %s", n, what)
        results = await asyncio.gather(*(step(n) for n in nodes), return_exceptions=True)
        for node, r in zip(nodes, results, strict=True):
            if isinstance(r, DistError | TimeoutError | ClusterError):
                log.warning("Erlang node %s did not take the %s: %s", node, what, r)
            elif isinstance(r, BaseException):
                raise r

    async def _sync_notify(self, node: str, event: Term) -> None:
        """The event handled by the node's lmq_event as if another node had broadcast it, but
        before the call returns (gen_event:sync_notify; lmq_event:notify_remote is async)."""
        r = await self.dist.rpc(node, "gen_event", "sync_notify", [A("lmq_event"), event], self._settle_timeout)
        if r is not OK:
            raise ClusterError(f"lmq_event on {node} answered {r!r:.200}")

    async def _settle_queue(self, node: str, atom: Atom, props: Term | None) -> None:
        # A remote queue_created makes LMQ's handler start the node's queue process if it has
        # none (and offer the queue to waiting pull-any) or reload the props it caches. The
        # node that ran lmq_lib:create only fired a local event, which does neither.
        await self._sync_notify(node, (REMOTE, (QUEUE_CREATED, atom)))
        if props is None:
            return
        # The queue process also keeps the raw props it last stored and skips a props change
        # equal to them (lmq_queue's {props, P}): give it the props now in Mnesia, or a later
        # PATCH/reset on that node back to its stale raw props would store nothing.
        pid = await self.dist.rpc(node, "lmq_queue_mgr", "get", [atom], self._settle_timeout)
        if isinstance(pid, Pid):
            r = await self.dist.rpc(node, "lmq_queue", "props", [pid, props], self._settle_timeout)
            if r is not OK:
                raise ClusterError(f"lmq_queue:props on {node} answered {r!r:.200}")

    async def _reload_all(self, node: str) -> None:
        # What lmq_queue_mgr:set_default_props does on the node that ran it, on every node.
        found = await self.dist.rpc(node, "lmq_queue_mgr", "match", [b""], self._settle_timeout)
        pids = [x[1] for x in found if type(x) is tuple and len(x) == 2] if isinstance(found, list) else []
        reload = Export(A("lmq_queue"), A("reload_properties"), 1)
        await self.dist.rpc(node, "lists", "foreach", [reload, pids], self._settle_timeout)

    @property
    def _settle_timeout(self) -> float:
        # Part of an operation a client waits for: bounded as its lmq_lib call is.
        return self.store.rpc_timeout

    def _broadcast(self, event: Term) -> None:
        connected = set(self.dist.connected_nodes())
        targets = (set(self.running) | self.event_nodes | set(self.python_nodes)) & connected
        msg = (NOTIFY, (REMOTE, event))
        for node in targets:
            self.dist.send((A("lmq_event"), A(node)), msg)

    # ------------------------------------------------------------------ join / leave

    async def join(self, node: str) -> None:
        async with self._op_lock:
            rejoining = self._rejoiner is not None
            await self._stop_rejoiner()  # the operator's choice of node replaces the recorded ones
            try:
                await self._join(node)
            except BaseException:
                if rejoining:  # that node failed: go on trying the recorded ones (still 503)
                    self.db_nodes |= set(self._recorded)
                    self._start_rejoiner()
                raise

    async def _join(self, node: str) -> None:
        if self.store.mode == CLUSTER:
            raise ClusterError(f"already in the cluster of {self.sub_node}; leave first")
        await self._check_joinable(node)
        self._forget_members()
        self.sub_node = node
        async with self._refresh_lock:
            await self._refresh_members()
        await self._resync()
        problem = self._unservable_seed()
        if problem is not None:
            self._end_subscriber()
            self._forget_members()
            raise ClusterError(f"cannot join {node}: {problem}")
        seeded = await self._seed_cluster()
        await self.store.clear_local()
        self.store.become_cluster(self)
        self.manager.unavailable = None
        self.mode_detail = ""
        self._record()
        await self._sync_manager()
        self._refresher = asyncio.get_running_loop().create_task(self._refresh_loop(), name="cluster-refresh")
        log.warning(
            "joined the LMQ cluster of %s: Erlang nodes %s, %d queues, %d messages of this node put in",
            node,
            ", ".join(self.running),
            len(self.store.mirror.queue_props),
            seeded,
        )

    def _forget_members(self) -> None:
        self.sub_node, self.running, self.cluster_db_nodes = None, [], []
        self._probation.clear()
        self.db_nodes.clear()
        self.python_nodes.clear()

    async def _check_joinable(self, node: str) -> None:
        """NODE must be another node, reachable, and an Erlang node running Mnesia; the error says
        which of these failed and why (the reason the connection gave, not just "unreachable")."""
        if node == self.dist.name:
            raise ClusterError(f"node {node} is this node itself: join an Erlang node of the cluster")
        try:
            await self.dist.connect(node)
        except DistError as e:
            raise ClusterError(f"node {node} is not reachable: {e.detail}") from e
        if not await self.dist.ping(node):
            raise ClusterError(f"node {node} is not reachable: it does not answer pings")
        try:
            running = await self.dist.rpc(node, "mnesia", "system_info", [A("is_running")], CALL_TIMEOUT)
        except RemoteError as e:
            if await self._is_pylmq(node):
                raise ClusterError(
                    f"node {node} is a pylmq node, not an Erlang LMQ node: join an Erlang node of its cluster"
                ) from e
            raise ClusterError(f"node {node} does not run Mnesia: it is not an Erlang LMQ node ({e.detail})") from e
        except (DistError, TimeoutError) as e:
            raise ClusterError(f"cannot ask {node} about Mnesia: {e}") from e
        if running is not A("yes"):
            state = running.name if isinstance(running, Atom) else repr(running)
            raise ClusterError(f"node {node} does not run Mnesia (mnesia:system_info(is_running) is {state})")

    async def _is_pylmq(self, node: str) -> bool:
        # Every pylmq node with a name answers the admin tools' status; no Erlang node has Mnesia
        # missing, so a node with both traits is one of ours.
        try:
            status = await self.dist.rpc(node, "lmq_console", "status", [], 5.0)
        except (DistError, TimeoutError):
            return False
        return isinstance(status, list)

    async def leave(self) -> None:
        async with self._op_lock:
            if self.mode == LOCAL:
                raise ClusterError("not in a cluster")
            await self._stop_rejoiner()
            await self._stop_refresher()
            self._end_subscriber()
            self.runners.close()
            await self.store.become_local()
            self._forget_members()
            self.manager.unavailable = None
            self.mode_detail = ""
            if self.membership_file is not None:
                membership.forget(self.membership_file)
            await self._sync_manager()
            log.warning("left the LMQ cluster: serving this node's own queues only")

    # ------------------------------------------------------------------ membership across restarts

    def _record(self) -> None:
        """Record the cluster joined: the subscription node first, then every other one known."""
        first = [self.sub_node] if self.sub_node else []
        self._save_membership(tuple(dict.fromkeys([*first, *sorted(self.db_nodes | set(self.running))])))

    def _save_membership(self, nodes: tuple[str, ...], standalone: bool = False) -> None:
        if self.membership_file is not None and nodes:
            membership.save(self.membership_file, Membership(nodes, standalone))

    def _unavailable(self, detail: str) -> None:
        self.mode_detail = detail
        self.manager.unavailable = rejoining_error(detail)

    async def restore(self, m: Membership) -> None:
        """At start, with a recorded membership: serve alone if the operator chose it, else
        rejoin in the background (the APIs answer 503 meanwhile: never a split)."""
        if m.standalone:
            self.db_nodes = set(m.nodes)
            await self._serve_chosen_standalone(m.nodes)
            log.warning("serving standalone, as chosen before the restart; lmq-admin join NODE rejoins")
            return
        self._unavailable(not_connected_yet(m))
        self.db_nodes = set(m.nodes)
        self._recorded = m.nodes
        self._start_rejoiner()

    def _start_rejoiner(self) -> None:
        self._rejoiner = asyncio.get_running_loop().create_task(self._rejoin_loop(), name="cluster-rejoin")

    async def _rejoin_loop(self) -> None:
        recorded = self._recorded
        last = ""
        while True:
            failures = []
            async with self._op_lock:
                # The recorded nodes first, then any other the cluster was known to have.
                for node in dict.fromkeys([*recorded, *sorted(self.db_nodes)]):
                    try:
                        await self._join(node)
                    except (ClusterError, DistError, TimeoutError) as e:
                        failures.append(e.detail if isinstance(e, ClusterError | DistError) else f"{node}: {e!r}")
                        self.db_nodes |= set(recorded)  # a failed attempt starts from a clean list
                        continue
                    self._rejoiner = None
                    return
            detail = "; ".join(failures)
            self._unavailable(detail)
            if detail != last:
                log.warning("rejoining the cluster: %s; queue operations answer 503 until one answers", detail)
                last = detail
            await asyncio.sleep(self.rejoin_interval)

    async def _stop_rejoiner(self) -> None:
        task, self._rejoiner = self._rejoiner, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def standalone(self) -> None:
        """The operator's choice for a node that cannot reach its cluster after a restart: serve
        what this node holds, alone, until ``join``; kept across restarts."""
        async with self._op_lock:
            if self._rejoiner is None:
                if self.store.mode == CLUSTER:
                    raise ClusterError(f"in the cluster of {self.sub_node}: leave it to serve alone")
                if self.store.mode == STANDALONE:
                    raise ClusterError("already standalone")
                raise ClusterError("not in a cluster: this node serves its own queues already")
            await self._stop_rejoiner()
            nodes = tuple(sorted(self.db_nodes))
            self._save_membership(nodes, standalone=True)
            await self._serve_chosen_standalone(nodes)
            log.warning("serving standalone by the operator's choice; lmq-admin join NODE rejoins the cluster")

    async def _serve_chosen_standalone(self, nodes: tuple[str, ...]) -> None:
        """Serve the local store alone, as the operator chose (now or before a restart) while the
        cluster of ``nodes`` was unreachable."""
        self.store.resume_standalone()
        self.mode_detail = f"chosen by the operator while the cluster of {', '.join(nodes)} was unreachable"
        self.manager.unavailable = None
        await self._sync_manager()

    async def close(self) -> None:
        """Stop the tasks (the node is stopping); the cluster keeps the data."""
        await self._stop_rejoiner()
        await self._stop_refresher()
        for t in list(self._tasks):
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._end_subscriber()
        self.runners.close()
        self._cancel_monitor()
        self._cancel_stalls()

    async def _stop_refresher(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> None:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster task %s failed", task.get_name(), exc_info=task.exception())

    async def _sync_manager(self) -> None:
        """Make the manager's queues those of the store (after a mode switch)."""
        names = set(self.store.queue_names())
        for name in self.manager.queue_names():
            if name not in names:
                await self.manager.on_remote_queue_deleted(name)
        for name in sorted(names):
            self.manager.on_remote_queue_created(name)
        self.manager.refresh_props()
        self._refresh_virtual()

    # ------------------------------------------------------------------ seeding the cluster

    def _unservable_seed(self) -> str | None:
        """Props :meth:`_seed_cluster` would write that the Erlang nodes cannot serve (retry
        infinity): the join is refused before anything is written, and the operator sets them
        right here first. Props the cluster already has for a queue win and are not checked."""
        local, mirror = self.store.local, self.store.mirror
        if not mirror.defaults and (problem := erlang_defaults_problem(local.default_props())) is not None:
            return f"this node's {problem}"
        for name in local.queue_names():
            if name not in mirror.queue_props:
                problem = erlang_props_problem(local.queue_props(name) or {})
                if problem is not None:
                    return f"this node's queue {name!r:.60}: {problem}"
        return None

    async def _seed_cluster(self) -> int:
        """The Python side's data into the cluster: what the cluster lacks (module docstring)."""
        node = self.sub_node
        assert node is not None
        local, mirror = self.store.local, self.store.mirror
        if not mirror.defaults and local.default_props():
            term = default_list_to_term(local.default_props())
            await self.dist.rpc(node, "lmq_lib", "set_lmq_info", [A("default_props"), term], CALL_TIMEOUT)
            await self.defaults_changed()
        written = clamped = stripped = 0
        for name in local.queue_names():
            atom = name_to_atom(name)
            if name not in mirror.queue_props:
                props = props_to_term(local.queue_props(name) or {})
                await self.dist.rpc(node, "lmq_lib", "create", [atom, props], CALL_TIMEOUT)
                await self.queue_created(name, props)
            t = mirror.table(name)
            have = {m.id[1] for m in t.rows.values()} if t is not None else set()
            for msg in local.messages(name):
                if msg.id[1] in have:
                    continue
                if msg.ext is not None:
                    stripped += 1
                if msg.retry is None:
                    # Pushed with retry infinity, which an Erlang node cannot deliver; as many
                    # retries as it can hold never run out either.
                    msg = dataclasses.replace(msg, retry=ERLANG_INT_MAX)
                    clamped += 1
                result = await self.dist.rpc(node, "mnesia", "dirty_write", [atom, message_to_term(msg)], CALL_TIMEOUT)
                if result is not OK:
                    raise ClusterError(
                        f"could not put message {msg.id[1].hex()} of {name} into the cluster: {result!r}"
                    )
                written += 1
            if local.messages(name):
                self.pushed(name)  # records written behind the queue processes' backs: wake pullers
        if clamped:
            log.warning("%d messages with retry infinity put into the cluster with retry %d", clamped, ERLANG_INT_MAX)
        if stripped:
            # A row holds LMQ's fields only; their key time (a delay) and retry go in, the rest
            # (expiry, interval, priority, delivery counts, dead-letter provenance) cannot.
            log.warning(
                "%d messages put into the cluster without their expiry, interval, priority or"
                " dead-letter data, which the Erlang nodes cannot hold",
                stripped,
            )
        for vname, queues in local.virtual_queues().items():
            if vname in mirror.virtual:
                continue  # the cluster's binding wins, as its props do
            if vname in mirror.queue_props:
                log.warning("virtual queue %r not put into the cluster: the cluster has a queue of that name", vname)
                continue
            result = await self.dist.rpc(
                node, "mnesia", "dirty_write", [LMQ_INFO, virtual_row(vname, queues)], CALL_TIMEOUT
            )
            if result is not OK:
                raise ClusterError(f"could not put virtual queue {vname!r} into the cluster: {result!r}")
        return written

    # ------------------------------------------------------------------ membership

    async def _refresh_loop(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_interval)
            await self._refresh_or_log()
            stopped = self.runners.stop_idle()
            if stopped:
                log.debug("stopped the queue runners of %d idle queues", len(stopped))

    async def _refresh_or_log(self) -> None:
        try:
            async with self._refresh_lock:
                await self._refresh_members()
        except (DistError, TimeoutError, ClusterError) as e:
            log.info("cluster membership refresh failed: %s", e)

    async def _refresh_members(self) -> None:
        node = self.sub_node
        if node is None:
            return
        names: set[str] = set()
        # A node whose Mnesia stopped (a graceful stop: Mnesia ends before the node does) still
        # answers; it no longer lists itself as running, so ask the next serving peer instead.
        for asked in dict.fromkeys([node, *self.running]):
            running = await self.dist.rpc(asked, "mnesia", "system_info", [A("running_db_nodes")], CALL_TIMEOUT)
            db = await self.dist.rpc(asked, "mnesia", "system_info", [A("db_nodes")], CALL_TIMEOUT)
            if not isinstance(running, list) or not isinstance(db, list):
                raise ClusterError(f"{asked} answered running_db_nodes {running!r}, db_nodes {db!r}")
            known = len(self.db_nodes)
            self.cluster_db_nodes = sorted(n.name for n in db if isinstance(n, Atom))
            self.db_nodes |= set(self.cluster_db_nodes)
            if len(self.db_nodes) != known and self.store.mode == CLUSTER:
                self._record()
            names = {x.name for x in running if isinstance(x, Atom)}
            if asked in names:
                node = asked
                break
            names = set()
        serving = []
        for n in sorted(names):
            if n not in self.running:
                if n in self._probation:
                    now = asyncio.get_running_loop().time()
                    since = self._probation[n]
                    if since is None:
                        self._probation[n] = since = now
                    if now - since < PROBATION:
                        continue
                try:
                    await self.dist.connect(n)
                except DistError as e:
                    log.info("cannot reach Erlang node %s: %s", n, e.detail)
                    continue
                self._announce(n)
                self._probation.pop(n, None)
                log.info("Erlang node %s serves the cluster", n)
            serving.append(n)
        for n in self._probation:
            if n not in names:
                self._probation[n] = None
        # A peer that stopped serving while this refresh awaited (down, or a stalled one heard
        # from again) is on probation now, whatever the answer said a moment before.
        serving = [n for n in serving if n not in self._probation]
        gone = [p for p in self.running if p not in serving]
        # Keep the subscription node first: it is the one whose events the mirror follows.
        self.running = sorted(serving, key=lambda n: n != self.sub_node)
        for peer in gone:
            # Out of Mnesia's running nodes: as good as disconnected for serving the cluster. The
            # disconnect that follows a graceful stop then finds the peer gone already.
            self._lost(peer, "its Mnesia stopped")
        if self.running:
            await self._find_python_nodes(self.running[0])

    def _announce(self, node: str) -> None:
        self.dist.send((A("lmq_event"), A(node)), (NOTIFY, (REMOTE, (JOIN_NODE, self.dist.atom))))

    async def _find_python_nodes(self, node: str) -> None:
        """Other pylmq nodes: hidden nodes of the cluster that answer ``lmq_cluster:hello`` while
        they serve it; a member that stopped serving (left, standalone, gone) is inactive."""
        hidden = await self.dist.rpc(node, "erlang", "nodes", [A("hidden")], CALL_TIMEOUT)
        candidates = {x.name for x in hidden if isinstance(x, Atom)} if isinstance(hidden, list) else set()
        connected = set(self.dist.connected_nodes())
        candidates |= set(self.python_nodes) & connected
        for n in set(self.python_nodes) - connected:
            self.python_nodes[n] = False
        for n in sorted(candidates - self._not_pylmq - {self.dist.name}):
            try:
                reply = await self.dist.rpc(n, "lmq_cluster", "hello", [self.dist.atom], 2.0)
            except DistError as e:
                if "undef" in e.detail:
                    self._not_pylmq.add(n)
                continue
            except TimeoutError:
                continue
            if reply is OK:
                self._python_member(n)
            elif n in self.python_nodes:
                self.python_nodes[n] = False

    def _python_member(self, node: str) -> None:
        if not self.python_nodes.get(node):
            log.info("pylmq node %s is a member", node)
        self.python_nodes[node] = True
        self.event_nodes.add(node)

    def _hello(self, node: Term) -> Term:
        if not isinstance(node, Atom) or self.mode != CLUSTER:
            return (ERROR, A("not_joined"))
        self._python_member(node.name)
        return OK

    def _on_nodedown(self, peer: str, reason: str) -> None:
        if peer in self.python_nodes:
            self.python_nodes[peer] = False
        if peer not in self.running:
            return
        self.running.remove(peer)
        self._lost(peer, reason)

    def _lost(self, peer: str, reason: str) -> None:
        """``peer`` no longer serves (already out of :attr:`running`): re-subscribe elsewhere,
        or go standalone when it was the last one."""
        if self.mode != CLUSTER:
            return
        self._probation[peer] = None
        log.warning("Erlang node %s is down (%s); %d left", peer, reason, len(self.running))
        if not self.running:
            self._spawn(self._go_standalone(), "cluster-standalone")
        elif peer == self.sub_node:
            self.sub_node = self.running[0]
            self._spawn(self._resync_or_standalone(), "cluster-resync")

    def _on_stall(self, peer: str, stalled: bool) -> None:
        if peer not in self.running or self.mode != CLUSTER:
            return
        live = self.peers()
        if stalled:
            self.runners.stalled(peer)
            log.warning("Erlang node %s is stalled; calls go to %s", peer, ", ".join(live) or "no other node")
        else:
            # Heard from again, but the other Erlang nodes may have dropped it from Mnesia while
            # it was silent (past their net_ticktime): then its tables are a partition's copy
            # that Mnesia never merges back, holding messages acked meanwhile. Calls go to it
            # again only once a refresh finds it among the serving node's running Mnesia nodes.
            log.warning("Erlang node %s is heard from again; serving through it once Mnesia runs it", peer)
            self.running.remove(peer)
            self._probation[peer] = None
            self._spawn(self._refresh_or_log(), "cluster-refresh")
            return
        if stalled and peer == self.sub_node and live:
            # Its table events stop with it: follow Mnesia on a live node (re-scanned), and end
            # the old subscriptions (the stalled node drops them when it resumes).
            log.warning("the mirror re-subscribes on %s", live[0])
            self._end_subscriber()
            self.sub_node = live[0]
            self.running = sorted(self.running, key=lambda n: n != self.sub_node)
            self._spawn(self._resync_or_standalone(), "cluster-resync")

    async def _resync_or_standalone(self) -> None:
        try:
            await self._resync()
        except (DistError, TimeoutError, ClusterError) as e:
            log.error("re-subscribing on %s failed: %s", self.sub_node, e)

    async def _go_standalone(self) -> None:
        async with self._op_lock:
            if self.mode != CLUSTER or self.running:
                return
            await self._stop_refresher()
            self._end_subscriber()
            queues, messages = await self.store.become_standalone()
            self.manager.refresh_props()
            log.warning(
                "every Erlang node of the cluster is gone: continuing standalone with %d messages in %d queues",
                messages,
                queues,
            )

    # ------------------------------------------------------------------ the mirror's subscription

    def _ensure_subscriber(self) -> Process:
        if self._subscriber is None or not self._subscriber.alive:
            proc = self.dist.spawn(None, self._on_table_event)
            proc.trap_exit = True  # mnesia_subscr links to us; its node's death must not kill us
            self._subscriber = proc
        return self._subscriber

    def _end_subscriber(self) -> None:
        if self._subscriber is not None and self._subscriber.alive:
            # Linked mnesia_subscr servers get the exit and drop every subscription of the pid.
            self._subscriber.exit(A("shutdown"))
        self._subscriber = None

    def _on_table_event(self, proc: Process, msg: Term) -> None:
        if self.store.mirror.apply(msg):
            return
        if type(msg) is tuple and len(msg) == 3 and msg[0] is EXIT and isinstance(msg[1], Pid):
            node = msg[1].node.name
            if node == self.sub_node and node in self.dist.connected_nodes() and self.mode == CLUSTER:
                log.warning("mnesia_subscr on %s dropped the mirror's subscriptions; re-subscribing", node)
                self._spawn(self._resync_or_standalone(), "cluster-resync")

    async def _subscribe(self, node: str, table: Atom) -> bool:
        """True when subscribed (or already); False if the table is gone."""
        proc = self._ensure_subscriber()
        for _ in range(50):
            r = await self.dist.rpc(
                node, "mnesia_subscr", "subscribe", [proc.pid, (TABLE, table, SIMPLE)], CALL_TIMEOUT
            )
            if type(r) is tuple and r and r[0] is OK:
                return True
            reason = r[1] if type(r) is tuple and len(r) == 2 and r[0] is ERROR else None
            kind = reason[0] if type(reason) is tuple and reason else reason
            if kind is A("already_exists"):
                return True
            if kind is A("no_exists"):
                return False
            if kind is not A("not_active_local"):
                raise ClusterError(f"subscribing to {table.name} on {node} failed: {r!r}")
            await asyncio.sleep(0.05)  # the table is still loading on that node
        raise ClusterError(f"table {table.name} did not become active on {node}")

    async def _scan(self, node: str, table: Atom) -> list[Term] | None:
        try:
            rows = await self.dist.rpc(node, "ets", "tab2list", [table], CALL_TIMEOUT)
        except DistError:
            return None  # gone between subscribe and scan (badarg)
        return rows if isinstance(rows, list) else None

    async def _resync(self) -> None:
        """Subscribe to everything on the subscription node and scan it (after any gap)."""
        async with self._sync_lock:
            node = self.sub_node
            if node is None:
                return
            mirror = self.store.mirror
            for t in (QUEUE_INFO, LMQ_INFO):
                mirror.begin(t)
            await self._subscribe(node, SCHEMA)
            for t in (QUEUE_INFO, LMQ_INFO):
                await self._subscribe(node, t)
            tables = await self.dist.rpc(node, "mnesia", "system_info", [A("tables")], CALL_TIMEOUT)
            queues = [t for t in tables if isinstance(t, Atom) and t not in ADMIN_TABLES and t is not SCHEMA]
            wanted = {name_from_atom(t) for t in queues}
            for name in list(mirror.tables):
                if name not in wanted:
                    mirror.drop(name_to_atom(name))
            for t in queues:
                mirror.begin(t)
            live = [t for t in queues if await self._subscribe(node, t)]
            for t in (QUEUE_INFO, LMQ_INFO, *live):
                rows = await self._scan(node, t)
                if rows is None:
                    mirror.drop(t)
                else:
                    mirror.load(t, rows)
            for t in queues:
                if t not in live:
                    mirror.drop(t)

    async def _load_table(self, table: Atom) -> None:
        async with self._sync_lock:
            node = self.sub_node
            if node is None or table not in self.store.mirror.loading():
                return
            if not await self._subscribe(node, table):
                self.store.mirror.drop(table)
                return
            rows = await self._scan(node, table)
            if rows is None:
                self.store.mirror.drop(table)
            else:
                self.store.mirror.load(table, rows)

    # ------------------------------------------------------------------ MirrorListener

    def _serving(self) -> bool:
        return self.mode == CLUSTER

    def on_queue_created(self, name: str) -> None:
        if self._serving():
            self.manager.on_remote_queue_created(name)
            self.manager.refresh_props([name])

    def on_queue_props(self, name: str) -> None:
        if self._serving():
            self.manager.refresh_props([name])

    def on_queue_deleted(self, name: str) -> None:
        self.runners.stop(name)  # deleted by another node: its runner has nothing left to do
        if self._serving():
            self._spawn(self.manager.on_remote_queue_deleted(name), f"cluster-delete-{name}")

    def on_messages(self, name: str) -> None:
        if self._serving():
            self.manager.on_remote_new_message(name)

    def on_defaults(self) -> None:
        if self._serving():
            self.manager.refresh_props()

    def on_virtual(self) -> None:
        if self._serving():
            self._refresh_virtual()

    def _refresh_virtual(self) -> None:
        """The manager keeps the virtual queues it was started with; in the cluster they are the
        store's (lmq_info rows, changed by any pylmq node): have it read them again."""
        self.manager.refresh_virtual()

    def on_table_created(self, table: Atom) -> None:
        if self.sub_node is not None:
            self._spawn(self._load_table(table), f"cluster-load-{table.name}")

    # ------------------------------------------------------------------ lmq_event

    def _on_event(self, proc: Process, msg: Term) -> None:
        if type(msg) is not tuple:
            return
        if len(msg) == 2 and msg[0] is NOTIFY:
            event = msg[1]
        elif len(msg) == 3 and type(msg[2]) is tuple and len(msg[2]) == 2 and msg[2][0] is SYNC_NOTIFY:
            event = msg[2][1]
            caller, tag = msg[1] if type(msg[1]) is tuple and len(msg[1]) == 2 else (msg[0], None)
            if isinstance(caller, Pid):
                proc.send(caller, (tag, OK))  # gen_event:sync_notify waits for this
        else:
            return
        if type(event) is tuple and len(event) == 2 and event[0] is REMOTE:
            self._on_remote(event[1])

    def _on_remote(self, event: Term) -> None:
        if type(event) is not tuple or len(event) != 2 or not isinstance(event[1], Atom):
            return
        kind, arg = event
        if kind is JOIN_NODE:
            self.event_nodes.add(arg.name)
            return
        if not self._serving():
            return
        name = name_from_atom(arg)
        mirror = self.store.mirror
        if kind is NEW_MESSAGE:
            self.manager.on_remote_new_message(name)
        elif kind is QUEUE_CREATED and name in mirror.queue_props:
            # The mirror decides whether the queue exists: an event may be older than it.
            self.manager.on_remote_queue_created(name)
            self.manager.refresh_props([name])
        elif kind is QUEUE_DELETED and name not in mirror.queue_props and name in self.manager.queue_names():
            self._spawn(self.manager.on_remote_queue_deleted(name), f"cluster-delete-{name}")
