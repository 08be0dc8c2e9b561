"""queue_server's actions as :class:`~pylmq.core.manager.QueueManager` calls (docs/queue-server.md).

The listeners (:mod:`pylmq.api.qs_server`) parse bytes into typed requests
(:mod:`pylmq.wire.qs`) and hand them here; this module maps each onto the manager and says what
the answer holds. It keeps no queue rule of its own: delay, ttl, retry interval and at-most-once
are :class:`~pylmq.core.message.PushOptions` the core applies, as for every other API.

The mapping of queue_server's integer ``msg_id`` onto LMQ's per-delivery UUIDs: a message's
``msg_id`` is :func:`~pylmq.core.message.msg_key` of its current UUID (53 bits, exact in every
JSON parser). A produce answers the key of the pushed record; a consume the key of the
delivery's UUID, plus the UUID itself (``uuid``, pylmq's extension) so that the delivery can be
acked over HTTP or MessagePack-RPC; a confirm takes either and acks that delivery.
"""

from __future__ import annotations

import base64
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Final

from pylmq.core.clock import Clock
from pylmq.core.manager import QueueManager
from pylmq.core.message import PushOptions, StoredMessage, StoredMessageType, msg_key, parse_uuid, uuid_text
from pylmq.core.queue import Delivery
from pylmq.errors import InvalidOptions, LMQError, NotFound
from pylmq.wire.items import make_item
from pylmq.wire.qs import (
    CODE_ERROR,
    CODE_OK,
    Confirm,
    Consume,
    Leader,
    ListQueues,
    Monitor,
    Produce,
    QsAction,
    Unsupported,
)

__all__ = ["DEFAULT_TTL", "MAX_LISTED", "MAX_TIME", "QsApi", "QsResult"]

log = logging.getLogger("pylmq.qs")

DEFAULT_TTL: Final = 86400.0
"""Seconds a produced message lives after it is due when the request names no ttl."""
MAX_TIME: Final = float(1 << 32)
"""The latest absolute time a delay or ttl may name (queue_server's times are 32-bit seconds)."""
MAX_LISTED: Final = 1000
"""Queues one list answer names at most; more are flagged ``truncated``."""
TEXT_TYPE: Final = b"text/plain; charset=utf-8"
"""The content type a produced message is stored with: its data is JSON text."""


@dataclass(slots=True)
class QsResult:
    """What an action answers: ``code``, ``reason`` (when not 0), the result fields, and the
    delivery a consume took (put back by the listener if its answer cannot be sent)."""

    code: int
    reason: str | None = None
    results: dict[str, Any] = field(default_factory=dict)
    delivery: Delivery | None = None


_QS_FIELDS: Final = {"'not_before'": "'delay'", "'expires'": "'ttl'", "'interval'": "'retry'"}
_FIELD_NAMES: Final = re.compile("|".join(re.escape(k) for k in _QS_FIELDS))


def _error(reason: str) -> QsResult:
    return QsResult(CODE_ERROR, reason)


class QsApi:
    """The actions of queue_server's protocol on one node's manager. ``address`` is this node's
    queue_server address, which action 8 answers (there is no leader: every node serves)."""

    def __init__(self, manager: QueueManager, clock: Clock, address: tuple[str, int], node_id: int = 1) -> None:
        self.manager = manager
        self.clock = clock
        self.address = address
        self.node_id = node_id
        # The msg_id of the last message produced into each queue through this node (monitor's
        # max_id); forgotten with the queue.
        self._max_id: dict[str, int] = {}

    async def handle(self, action: QsAction) -> QsResult:
        try:
            self.manager.check_available()
            t = type(action)
            if t is Produce:
                return await self._produce(action)  # type: ignore[arg-type]
            if t is Consume:
                return await self._consume(action)  # type: ignore[arg-type]
            if t is Confirm:
                return await self._confirm(action)  # type: ignore[arg-type]
            if t is Monitor:
                return self._monitor(action)  # type: ignore[arg-type]
            if t is ListQueues:
                return self._list(action)  # type: ignore[arg-type]
            if t is Leader:
                return QsResult(CODE_OK, results=self._leader())
            assert isinstance(action, Unsupported)
            return _error(f"not supported: action {action.action} (use the HTTP API or lmq-admin)")
        except LMQError as e:
            return _error(e.detail)

    # -- produce -----------------------------------------------------------------------------------

    def push_options(self, req: Produce) -> PushOptions | QsResult:
        """queue_server's times and retry as push options, or the error answer. ``delay`` and
        ``ttl`` are absolute; a past delay means now; the default ttl is a day after the message
        is due; ``retry`` 0 is one delivery, never repeated; N is a redelivery every N seconds
        until ttl."""
        now = self.clock.now()
        for name, v in (("delay", req.delay), ("ttl", req.ttl)):
            if v is not None and not 0 <= v < MAX_TIME:
                return _error(f"time error: {name} must be absolute Unix seconds below {int(MAX_TIME)}")
        due = now if req.delay is None or req.delay <= now else float(req.delay)
        ttl = due + DEFAULT_TTL if req.ttl is None else float(req.ttl)
        if due >= ttl:
            return _error("time error: delay must be before ttl")
        not_before = due if due > now else None
        if req.retry == 0:
            # One delivery whatever the ttl (by queue_server's rule an expired message never
            # delivered is delivered once): no expiry, so that it is plain LMQ retry 0 data that
            # an Erlang node of a mixed cluster serves too.
            return PushOptions(not_before=not_before, retry=0, once=True, priority=req.priority)
        return PushOptions(
            not_before=not_before, expires=ttl, interval=float(req.retry), retry=None, priority=req.priority
        )

    async def _produce(self, req: Produce) -> QsResult:
        opts = self.push_options(req)
        if isinstance(opts, QsResult):
            return opts
        try:
            body = req.data.encode("utf-8")
        except UnicodeEncodeError:
            return _error("field error: data is not valid Unicode (a lone surrogate)")
        try:
            pushed = await self.manager.push_with(req.queue, make_item(body, TEXT_TYPE), opts)
        except InvalidOptions as e:
            # The core names its own fields; the client knows them by queue_server's names.
            return _error(_FIELD_NAMES.sub(lambda m: _QS_FIELDS[m.group()], e.detail))
        if len(self._max_id) > 2 * len(self.manager.queue_names()) + 1024:
            self._max_id = {q: k for q, k in self._max_id.items() if self.manager.get(q) is not None}
        ids = {q: msg_key(u) for q, u in pushed}
        for q, key in ids.items():
            self._max_id[q] = key
        results: dict[str, Any] = {"msg_id": ids[pushed[-1][0]]}
        if self.manager.virtual_members(req.queue) is not None:
            results["msg_ids"] = ids
        return QsResult(CODE_OK, results=results)

    # -- consume and confirm -----------------------------------------------------------------------

    async def _consume(self, req: Consume) -> QsResult:
        d = await self.manager.pull(req.queue, 0)
        if d is None:
            return QsResult(CODE_OK)
        msg = d.message
        if msg.type is StoredMessageType.COMPOUND:
            # Its parts have headers of their own that queue_server's answer cannot carry.
            await self.manager.put_back(d.queue, msg.uuid)
            return _error("the first message is a compound message: use HTTP or MessagePack-RPC to pull it")
        return QsResult(CODE_OK, results=delivery_fields(msg), delivery=d)

    async def _confirm(self, req: Confirm) -> QsResult:
        if isinstance(req.msg_id, str):
            u = parse_uuid(req.msg_id)
            if u is None:
                return _error("field error: msg_id must be a positive integer or a message UUID")
        else:
            u = self.manager.resolve_key(req.queue, req.msg_id)
        if u is None or self.manager.get(req.queue) is None:
            # queue_server answers 0 for an id it does not hold; so does this, saying so.
            return QsResult(CODE_OK, results={"confirmed": False})
        try:
            await self.manager.ack(req.queue, u)
        except NotFound:
            return QsResult(CODE_OK, results={"confirmed": False})
        return QsResult(CODE_OK, results={"confirmed": True})

    # -- monitor, list, leader ------------------------------------------------------------------------

    def _server_info(self) -> dict[str, Any]:
        return {"node_id": self.node_id, "leader_node_id": self.node_id, "trans_id": 0}

    def _wait_status(self, name: str) -> int:
        # queue_server sums how long its first due messages waited; pylmq's store says only
        # whether the first one is due: 1 when a message waits for a consumer, else 0.
        wait = self.manager.store.waittime(name)
        return 1 if wait is not None and wait <= 0 else 0

    def _monitor(self, req: Monitor) -> QsResult:
        name = req.queue
        if self.manager.virtual_members(name) is not None:
            return _error(f"{name!r} is a virtual queue: monitor its queues")
        exists = self.manager.get(name) is not None
        if not exists:
            self._max_id.pop(name, None)
        results = {
            "size": self.manager.store.size(name) if exists else 0,
            "max_size": None,
            "max_id": self._max_id.get(name, 0),
            "wait_status": self._wait_status(name) if exists else 0,
        }
        results.update(self._server_info())
        return QsResult(CODE_OK, results=results)

    def _list(self, req: ListQueues) -> QsResult:
        names = sorted(n for n in self.manager.queue_names() if req.pattern in n)
        store = self.manager.store
        listed = [{"size": store.size(n), "wait_status": self._wait_status(n), "name": n} for n in names[:MAX_LISTED]]
        results: dict[str, Any] = {"queue_count": len(names), "queue_list": listed}
        if len(names) > MAX_LISTED:
            results["truncated"] = True
        results.update(self._server_info())
        return QsResult(CODE_OK, results=results)

    def _leader(self) -> dict[str, Any]:
        host, port = self.address
        return {"leader_node_id": self.node_id, "leader_host": host, "leader_port": port}


def delivery_fields(msg: StoredMessage) -> dict[str, Any]:
    """A consume's result fields: ``msg_id`` and ``data``, pylmq's ``uuid``, ``data_encoding``
    for a body that is not UTF-8 text (base64), and a dead letter's provenance."""
    assert isinstance(msg.content, tuple)
    body = msg.content[1]
    out: dict[str, Any] = {"msg_id": msg_key(msg.uuid), "uuid": uuid_text(msg.uuid)}
    try:
        out["data"] = body.decode("utf-8")
    except UnicodeDecodeError:
        out["data"] = base64.b64encode(body).decode("ascii")
        out["data_encoding"] = "base64"
    ext = msg.ext
    if ext is not None and ext.dead is not None:
        out["origin"] = ext.dead.origin
        out["failures"] = ext.dead.failures
        out["last_delivery"] = ext.dead.last_at
    return out
