"""A pylmq node as an operator runs it: settings in, everything wired, one ``stopped`` event.

:class:`Service` owns, in start order: the StatsD emitter, the queue metrics (shared by the
queues, ``/stats`` and ``lmq-admin stats``), the :class:`~pylmq.node.LMQNode` (store, manager,
HTTP, MessagePack-RPC), the size/memory gauges every ``stats_interval`` ms, and the hidden
Erlang distribution node with the ``lmq_console`` functions the admin tools call. It stops them
in reverse order. Logging is the caller's business (:func:`pylmq.log.configure_logging`), so
that configuration errors can still be reported before any file exists.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable
from pathlib import Path

from pylmq.cluster import Cluster, membership
from pylmq.cluster.cluster import not_connected_yet, rejoining_error
from pylmq.cluster.membership import Membership
from pylmq.cluster.mnesia_store import MnesiaStore
from pylmq.config import Settings
from pylmq.core.clock import SystemClock
from pylmq.erlang import Atom, Node, erl_string, start_node
from pylmq.errors import ClusterError, ConfigError, DistError
from pylmq.log import NOTICE, pairs
from pylmq.metrics import PeriodicGauges, QueueMetrics, StatsdEmitter
from pylmq.node import console
from pylmq.node.lmq_node import LMQNode, NodeOptions, make_store
from pylmq.store.local import LocalStore

__all__ = ["Service", "node_options"]

log = logging.getLogger(__name__)


def node_options(s: Settings) -> NodeOptions:
    return NodeOptions(
        http=(s.http_host, s.http_port),
        rpc=(s.rpc_host, s.rpc_port),
        store=s.store,
        data_dir=s.data_dir,
        fsync=s.fsync,
        fsync_interval=s.fsync_interval / 1000.0,
        journal_max_bytes=s.journal_max_bytes,
        disk_reserve_bytes=s.disk_reserve_bytes,
        dsn=s.pg_dsn,
        pg_pool_size=s.pg_pool_size,
        pg_timeout=s.pg_timeout / 1000.0,
        max_connections=s.max_connections or None,
        header_timeout=s.header_timeout / 1000.0,
        body_timeout=s.body_timeout / 1000.0,
        max_buffered_bytes=s.max_buffered_bytes or None,
        min_receive_rate=s.min_receive_rate,
        node_name=s.node_name or "nonode@nohost",
        virtual_queues=s.virtual_queues,
        qs=(s.qs_host, s.qs_port) if s.qs_enabled else None,
        qs_max_request=s.qs_max_request,
        qs_udp_max=s.qs_udp_max,
        qs_idle_timeout=s.qs_idle_timeout / 1000.0,
        sqs=(s.http_host if s.sqs_host is None else s.sqs_host, s.sqs_port) if s.sqs_enabled else None,
        sqs_access_keys=s.sqs_access_keys,
        console=s.console,
        http_tokens=s.http_tokens,
        http_protect=s.http_protect,
    )


def _local_store(opts: NodeOptions) -> LocalStore:
    store = make_store(opts, SystemClock())
    assert isinstance(store, LocalStore)
    return store


class Service:
    def __init__(self, settings: Settings, *, pid_file: Path | None = None, statsd: bool = True) -> None:
        """``statsd=False`` sends no StatsD datagrams at all (LMQ always sends them)."""
        self.settings = settings
        self.pid_file = pid_file
        self.statsd = StatsdEmitter(settings.statsd_host, settings.statsd_port) if statsd else None
        self.metrics = QueueMetrics(self.statsd)
        opts = node_options(settings)
        if opts.store == "postgres" and settings.join:
            raise ConfigError(
                "store postgres shares its queues through the database: a node on it cannot join an Erlang cluster"
            )
        # A node with an Erlang name can join a mixed cluster: its store can switch to Mnesia.
        # A node on PostgreSQL keeps its store: its peers are the other nodes on that database.
        self.store = (
            MnesiaStore(_local_store(opts), rpc_timeout=settings.rpc_timeout / 1000.0)
            if settings.node_name is not None and opts.store != "postgres"
            else None
        )
        self.node = LMQNode(opts, observer=self.metrics, store=self.store)
        self.cluster: Cluster | None = None
        self.gauges = (
            PeriodicGauges(self.statsd, settings.stats_interval, self._sizes) if self.statsd is not None else None
        )
        self.dist: Node | None = None
        self.membership_file = settings.data_dir / membership.FILE_NAME
        self.membership: Membership | None = None
        self.join_at_start: Membership | None = None  # app.config's {join, Node}, never joined yet
        self.stopped = asyncio.Event()  # set when the node is asked to stop (signal or lmq_console:stop)

    @property
    def node_name(self) -> str:
        return self.settings.node_name or "nonode@nohost"

    def _sizes(self) -> dict[str, tuple[int, int]]:
        # Not manager.status(): that also gives each queue's props, which after a restart or a
        # change of the default list means searching the default regexes for every queue at once.
        store = self.node.manager.store
        return {n: (store.size(n), store.memory(n)) for n in self.node.manager.queue_names()}

    async def start(self) -> None:
        s = self.settings
        for notice in s.notices:
            log.log(NOTICE, "%s", notice)
        if self.statsd is not None:
            await self.statsd.start()
        try:
            if self.store is not None:
                self.membership = membership.load(self.membership_file)
                if self.membership is None and s.join and s.node_name is not None:
                    # app.config's {join, Node} on a node never joined: it is a member to be,
                    # and serving queues of its own meanwhile would split the cluster.
                    self.join_at_start = Membership((s.join,))
                waiting = self.membership or self.join_at_start
                if waiting is not None and not waiting.standalone:
                    # Before the APIs listen: not one request may see this node's own queues.
                    self.node.manager.unavailable = rejoining_error(not_connected_yet(waiting))
            await self.node.start()
            if self.gauges is not None:
                self.gauges.start()
            if s.node_name is not None:
                await self._start_dist(s.node_name)
        except BaseException:
            await self._shutdown()
            raise
        if self.pid_file is not None:
            self.pid_file.write_text(f"{os.getpid()}\n")
        log.info(
            "pylmq started %s",
            pairs(
                node=self.node_name,
                http=self.node.http_address,
                rpc=self.node.rpc_address,
                qs=self.node.qs_address,
                sqs=self.node.sqs_address,
            ),
        )

    async def _start_dist(self, name: str) -> None:
        cookie = self.settings.cookie
        if cookie is None:
            raise ConfigError(f"node {name} has no cookie: set -setcookie in vm.args or create ~/.erlang.cookie")
        try:
            self.dist = await start_node(
                name,
                cookie,
                net_ticktime=self.settings.net_ticktime,
                stall_timeout=self.settings.stall_timeout / 1000.0,
            )
        except (DistError, OSError) as e:
            detail = e.detail if isinstance(e, DistError) else str(e)
            raise DistError(f"cannot start distribution as {name}: {detail}") from e
        d = self.dist
        d.register_function(console.MODULE, "status", self._status)
        d.register_function(console.MODULE, "stats", lambda: console.stats_term(self.node.manager, self.metrics))
        console.register_extensions(d, self.node.manager)
        if self.store is not None:
            self.cluster = Cluster(d, self.store, self.node.manager, membership_file=self.membership_file)
            self.node.show_cluster(self.cluster)
            d.register_function(console.MODULE, "join", self._join)
            d.register_function(console.MODULE, "leave", self._leave)
            d.register_function(console.MODULE, "standalone", self._standalone)
            if self.membership is not None:
                # The membership kept from before the restart wins over {join, Node}.
                await self.cluster.restore(self.membership)
            elif self.join_at_start is not None:
                # Joined at once when the node answers; else the node keeps trying, and queue
                # requests get 503 until it succeeds or the operator chooses standalone.
                node = self.join_at_start.nodes[0]
                answer = await self._join(Atom(node))
                if answer is not Atom("ok"):
                    log.error("could not join the cluster at start; retrying %s", pairs(node=node, answer=repr(answer)))
                    await self.cluster.restore(self.join_at_start)
        d.register_function(console.MODULE, "stop", self._stop_requested)
        # What LMQ's nodetool sends for `stop` and `pid`-style queries, so its scripts work too.
        d.register_function("init", "stop", self._stop_requested)
        d.register_function("os", "getpid", lambda: erl_string(str(os.getpid())))

    def _status(self) -> object:
        if self.cluster is None:
            nodes = [self.node_name]
            return console.status_term(self.node.manager, nodes, nodes)
        every, active = self.cluster.status_nodes()
        c = self.cluster
        return console.status_term(
            self.node.manager, every, active, mode=c.mode, mode_detail=c.mode_detail, stalled=c.stalled()
        )

    async def _join(self, node: object) -> object:
        assert self.cluster is not None
        return await _answer(self.cluster.join(node.name if isinstance(node, Atom) else console.text(node)))

    async def _leave(self, *_args: object) -> object:
        assert self.cluster is not None
        return await _answer(self.cluster.leave())

    async def _standalone(self, *_args: object) -> object:
        assert self.cluster is not None
        return await _answer(self.cluster.standalone())

    def _stop_requested(self, *_args: object) -> Atom:
        log.log(NOTICE, "stop requested over distribution")
        self.stopped.set()
        return Atom("ok")

    async def stop(self) -> None:
        """Graceful: API listeners close, in-flight requests finish, the store is flushed."""
        await self._shutdown()
        log.info("pylmq stopped %s", pairs(node=self.node_name))

    async def _shutdown(self) -> None:
        if self.gauges is not None:
            await self.gauges.stop()
        try:
            if self.cluster is not None:
                self.node.show_cluster(None)
                await self.cluster.close()
                self.cluster = None
            await self.node.stop()
        finally:
            if self.dist is not None:
                await self.dist.stop()
                self.dist = None
            if self.statsd is not None:
                self.statsd.close()
            self._remove_pid_file()

    def _remove_pid_file(self) -> None:
        # Only our own: a node that failed to start must not remove the file of one that runs.
        try:
            if self.pid_file is not None and self.pid_file.read_text().strip() == str(os.getpid()):
                self.pid_file.unlink()
        except OSError:
            pass


async def _answer(op: Awaitable[None]) -> object:
    """A cluster command's reply to the admin tools: ok, or {error, {Reason, Detail}}."""
    try:
        await op
    except ClusterError as e:
        return (Atom("error"), (Atom(e.reason), e.detail.encode()))
    return Atom("ok")
