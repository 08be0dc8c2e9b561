"""A pylmq node: one store, one queue manager, the HTTP and MessagePack-RPC servers.

This is the assembly point that the entry point (`python -m pylmq`), the release scripts and the
tests use. Each server is owned here: started in :meth:`LMQNode.start`, stopped in
:meth:`LMQNode.stop` (in-flight requests finish, waiting pulls end, the store is flushed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pylmq.api._limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_MIN_RECEIVE_RATE,
    BufferBudget,
    default_max_buffered,
)
from pylmq.core.clock import Clock, SystemClock
from pylmq.core.manager import QueueManager
from pylmq.core.queue import QueueObserver
from pylmq.core.store import (
    DEFAULT_DATA_DIR,
    DEFAULT_DISK_RESERVE_BYTES,
    DEFAULT_FSYNC,
    DEFAULT_FSYNC_INTERVAL,
    DEFAULT_JOURNAL_MAX_BYTES,
    DEFAULT_PG_POOL_SIZE,
    DEFAULT_PG_TIMEOUT,
    DEFAULT_STORE,
    FSYNC_POLICIES,
    STORE_KINDS,
    Store,
)
from pylmq.errors import ConfigError
from pylmq.metrics import QueueMetrics
from pylmq.wire.ports import DEFAULT_HTTP_PORT, DEFAULT_RPC_PORT
from pylmq.wire.qs import DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_REQUEST, DEFAULT_UDP_MAX
from pylmq.wire.sqs import MAX_IN_FLIGHT

if TYPE_CHECKING:
    from pylmq.api.http_server import HttpServer
    from pylmq.api.qs_server import QsServer
    from pylmq.api.sqs import SqsApi

__all__ = ["LMQNode", "NodeOptions", "make_store", "parse_hostport"]

log = logging.getLogger("pylmq.node")

_CANCEL_GRACE = 1.0  # seconds for cancelled HTTP requests to end (puts back included) at a stop


def parse_hostport(text: str, default_host: str = "0.0.0.0") -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT``; IPv6 hosts in brackets (``[::1]:9980``)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = default_host, text
    host = host.strip("[]") or default_host
    try:
        p = int(port)
    except ValueError:
        raise ConfigError(f"bad address {text!r}: port must be a number") from None
    if not 0 <= p <= 65535:
        raise ConfigError(f"bad address {text!r}: port out of range")
    return host, p


async def _listen(
    start: Callable[[str, int], Awaitable[tuple[str, int]]], host: str, port: int, what: str
) -> tuple[str, int]:
    """Start a listener; an address that cannot be had (taken, not this host's) is a setting to
    fix, so a ConfigError naming the protocol and the address, not a bare OSError."""
    try:
        return await start(host, port)
    except OSError as e:
        raise ConfigError(f"cannot listen for {what} on {host}:{port}: {e.strerror or e}") from e


@dataclass
class NodeOptions:
    http: tuple[str, int] | None = ("0.0.0.0", DEFAULT_HTTP_PORT)
    rpc: tuple[str, int] | None = ("0.0.0.0", DEFAULT_RPC_PORT)
    store: str = DEFAULT_STORE
    data_dir: Path = field(default_factory=lambda: Path(DEFAULT_DATA_DIR))
    fsync: str = DEFAULT_FSYNC
    fsync_interval: float = DEFAULT_FSYNC_INTERVAL  # seconds between fsyncs with fsync="interval"
    shutdown_timeout: float = 10.0
    # The durable store's limits (pylmq.store.durable.DurableStore): past them it refuses
    # pushes with 503 store_full rather than let its journal grow or the disk fill.
    journal_max_bytes: int = DEFAULT_JOURNAL_MAX_BYTES
    disk_reserve_bytes: int = DEFAULT_DISK_RESERVE_BYTES
    # The PostgreSQL store (pylmq.pgstore): its database (a libpq URI or key=value string; several
    # hosts for failover), connections kept to it, and seconds one statement may take.
    dsn: str | None = None
    pg_pool_size: int = DEFAULT_PG_POOL_SIZE
    pg_timeout: float = DEFAULT_PG_TIMEOUT
    # Open connections each API accepts (None: from the descriptor limit), HTTP read timeouts.
    max_connections: int | None = None
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    # Bytes of requests partly received both APIs hold together (None: from the memory), and
    # the rate a body or frame being received must keep (pylmq.api._limits).
    max_buffered_bytes: int | None = None
    min_receive_rate: int = DEFAULT_MIN_RECEIVE_RATE
    node_name: str = "nonode@nohost"  # what /stats lists as this node (its Erlang name, if any)
    # Virtual queues of app.config: bound at start, except names the store already holds (a
    # change made over the API persists and wins).
    virtual_queues: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # queue_server's JSON protocol, TCP and UDP on one port (pylmq.api.qs_server); None: off.
    # Off unless asked here; an operator's node (Settings) serves it by default.
    qs: tuple[str, int] | None = None
    qs_max_request: int = DEFAULT_MAX_REQUEST
    qs_udp_max: int = DEFAULT_UDP_MAX
    qs_idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    # Amazon SQS's API over HTTP (pylmq.api.sqs); None: off. Off unless asked here, as qs.
    sqs: tuple[str, int] | None = None
    # Access key id -> secret: when given, only requests SigV4-signed by one of them are served.
    sqs_access_keys: Mapping[str, str] = field(default_factory=dict)
    # In-flight messages per standard SQS queue before a receive is answered OverLimit (SQS's).
    sqs_max_in_flight: int = MAX_IN_FLIGHT


def make_store(opts: NodeOptions, clock: Clock) -> Store:
    if opts.store == "memory":
        from pylmq.store.memory import MemoryStore

        return MemoryStore(clock)
    if opts.store == "durable":
        if opts.fsync not in FSYNC_POLICIES:
            raise ConfigError(f"fsync must be one of {', '.join(FSYNC_POLICIES)}, got {opts.fsync!r}")
        from pylmq.store.durable import DurableStore

        return DurableStore(
            opts.data_dir,
            fsync=opts.fsync,
            clock=clock,
            fsync_interval=opts.fsync_interval,
            journal_max_bytes=opts.journal_max_bytes,
            disk_reserve_bytes=opts.disk_reserve_bytes,
        )
    if opts.store == "postgres":
        if not opts.dsn:
            raise ConfigError('store postgres needs a database: --dsn postgresql://... or {pg_dsn, "..."}')
        from pylmq.pgstore import PostgresStore

        return PostgresStore(opts.dsn, clock=clock, pool_size=opts.pg_pool_size, timeout=opts.pg_timeout)
    raise ConfigError(f"store must be one of {', '.join(STORE_KINDS)}, got {opts.store!r}")


class LMQNode:
    def __init__(
        self,
        opts: NodeOptions | None = None,
        *,
        clock: Clock | None = None,
        store: Store | None = None,
        observer: QueueObserver | None = None,
    ) -> None:
        self.opts = opts or NodeOptions()
        self.clock = clock or SystemClock()
        self.store = store or make_store(self.opts, self.clock)
        # Push/pull meters and retention for /stats, unless the caller observes queues itself.
        self.metrics: QueueMetrics | None = QueueMetrics(clock=self.clock) if observer is None else None
        if isinstance(observer, QueueMetrics):
            self.metrics = observer
        self.manager = QueueManager(self.store, self.clock, observer or self.metrics, virtual=self.opts.virtual_queues)
        if self.store.kind == "postgres":
            from pylmq.pgstore import PostgresStore

            if isinstance(self.store, PostgresStore):
                # Other nodes sharing the database create, delete and change queues too.
                self.store.follow(self.manager)
        self._http: HttpServer | None = None
        self._rpc: object | None = None
        self._budget: BufferBudget | None = None
        self.http_address: tuple[str, int] | None = None
        self.rpc_address: tuple[str, int] | None = None
        self._qs: QsServer | None = None
        self.qs_address: tuple[str, int] | None = None
        self._sqs: HttpServer | None = None
        self.sqs_api: SqsApi | None = None
        self.sqs_address: tuple[str, int] | None = None

    async def start(self) -> None:
        await self.store.open()
        await self.manager.start()
        if self.metrics is not None:
            self.metrics.start()
        try:
            self._check_virtual_queues()
            if self.opts.http is not None:
                await self._start_http(*self.opts.http)
            if self.opts.rpc is not None:
                await self._start_rpc(*self.opts.rpc)
            if self.opts.qs is not None:
                await self._start_qs(*self.opts.qs)
            if self.opts.sqs is not None:
                await self._start_sqs(*self.opts.sqs)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "pylmq node started: store=%s http=%s rpc=%s qs=%s sqs=%s",
            self.store.kind,
            self.http_address,
            self.rpc_address,
            self.qs_address,
            self.sqs_address,
        )

    def _check_virtual_queues(self) -> None:
        """A virtual queue of app.config (the manager binds them) whose name is a queue the
        store holds would shadow it: the start stops, naming it."""
        queues = set(self.manager.queue_names())
        for name in self.opts.virtual_queues:
            if name in queues:
                raise ConfigError(f"virtual_queues {name!r}: a queue has that name; a virtual queue needs its own")

    def budget(self) -> BufferBudget:
        """The one budget for requests partly received, shared by the HTTP and RPC servers."""
        if self._budget is None:
            size = self.opts.max_buffered_bytes or default_max_buffered()
            self._budget = BufferBudget(size, log, time.monotonic)
        return self._budget

    def _in_process(self) -> bool:
        """Whether the store now answers without remote calls, so that requests may start
        eagerly (pylmq.api._eager). A store joined to a cluster is "mnesia" while it is."""
        return self.store.kind in ("memory", "durable")

    async def _start_http(self, host: str, port: int) -> None:
        from pylmq.api.http import HttpApi
        from pylmq.api.http_server import HttpServer

        api = HttpApi(self.manager, metrics=self.metrics, node_name=self.opts.node_name)
        opts = self.opts
        server = HttpServer(
            api,
            eager=self._in_process,
            max_connections=opts.max_connections,
            header_timeout=opts.header_timeout,
            body_timeout=opts.body_timeout,
            min_receive_rate=opts.min_receive_rate,
            budget=self.budget(),
        )
        self.http_address = await _listen(server.start, host, port, "HTTP")
        self._http = server

    def _close_http_listener(self) -> None:
        """Accept no more HTTP connections; close those idle between requests (the others close
        once their request is answered)."""
        if self._http is not None:
            self._http.begin_stop()

    async def _start_rpc(self, host: str, port: int) -> None:
        from pylmq.api.rpc_server import RpcServer

        opts = self.opts
        rpc = RpcServer(
            self.manager,
            eager=self._in_process,
            max_connections=opts.max_connections,
            frame_timeout=opts.body_timeout,
            min_receive_rate=opts.min_receive_rate,
            budget=self.budget(),
        )
        self.rpc_address = await _listen(rpc.start, host, port, "MessagePack-RPC")
        self._rpc = rpc

    async def _start_qs(self, host: str, port: int) -> None:
        from pylmq.api.qs import QsApi
        from pylmq.api.qs_server import QsServer

        opts = self.opts
        server = QsServer(
            QsApi(self.manager, self.clock, (host, port)),
            max_request=opts.qs_max_request,
            udp_max=opts.qs_udp_max,
            idle_timeout=opts.qs_idle_timeout,
            max_connections=opts.max_connections,
            budget=self.budget(),
            eager=self._in_process,
        )
        self.qs_address = await _listen(server.start, host, port, "queue_server's protocol")
        self._qs = server

    async def _start_sqs(self, host: str, port: int) -> None:
        from pylmq.api.http_server import HttpServer
        from pylmq.api.sqs import SqsApi
        from pylmq.api.sqs import too_large as sqs_too_large
        from pylmq.wire.sqs import DEFAULT_MAX_BODY

        opts = self.opts
        api = SqsApi(
            self.manager,
            self.clock,
            (host, port),
            access_keys=opts.sqs_access_keys,
            max_in_flight=opts.sqs_max_in_flight,
        )
        server = HttpServer(
            api,
            eager=self._in_process,
            max_body=DEFAULT_MAX_BODY,
            max_connections=opts.max_connections,
            header_timeout=opts.header_timeout,
            body_timeout=opts.body_timeout,
            min_receive_rate=opts.min_receive_rate,
            budget=self.budget(),
            name="SQS",
            too_large=sqs_too_large,
        )
        self.sqs_address = await _listen(server.start, host, port, "the SQS API")
        if port == 0:
            api.address = self.sqs_address
        self._sqs = server
        self.sqs_api = api

    async def stop(self) -> None:
        """Graceful: stop accepting, let in-flight requests finish, end waits, flush the store.

        Both listeners close first, and idle HTTP keep-alive connections with them, so nothing
        new arrives while the queues close: a request let in after that could start a wait no
        one ends, holding the stop for ``shutdown_timeout``. Waiting pulls then end (answered
        empty); other requests still running get ``shutdown_timeout`` seconds, then they are
        cancelled (a message taken for one is put back). The store is flushed last."""
        self._close_http_listener()
        if self._sqs is not None:
            self._sqs.begin_stop()
        if self._rpc is not None:
            # Imported only when an RPC server was started: a node without one does not need it.
            from pylmq.api.rpc_server import RpcServer

            if isinstance(self._rpc, RpcServer):
                await self._rpc.close()
        self._rpc = None
        if self._qs is not None:
            await self._qs.close()
            self._qs = None
        await self.manager.close()
        if self._http is not None and not await self._http.drain(self.opts.shutdown_timeout):
            log.warning("HTTP requests still running after %ss: cancelling them", self.opts.shutdown_timeout)
        if self._http is not None:
            await self._http.close(_CANCEL_GRACE)
            self._http = None
        if self._sqs is not None:
            if not await self._sqs.drain(self.opts.shutdown_timeout):
                log.warning("SQS requests still running after %ss: cancelling them", self.opts.shutdown_timeout)
            await self._sqs.close(_CANCEL_GRACE)
            self._sqs = None
        await self.store.close()
        if self.metrics is not None:
            await self.metrics.stop()
        log.info("pylmq node stopped")
