"""The HTTP API of LMQ (LMQ-FACTS section 3) on aiohttp.

Every handler parses the request, makes one call on the :class:`QueueManager` and encodes the
answer; queue semantics live in ``pylmq.core``. :class:`HttpApi` routes a request by its path
segments (one table, below), turns :class:`LMQError` into ``{"error": reason, "detail": ...}``
with the error's status, and writes the access log (logger ``pylmq.access``, info level, one
line per request).

Routes (also under LMQ's older prefixes ``/msgs`` and ``/props``)::

    GET    /messages/:name?t=&cf=     pull            POST /messages/:name       push
    GET    /messages?qre=&t=&cf=      pull-any        POST /messages?qre=        fan-out push
    POST   /messages/:name/:id?reply=ack|nack|ext
    DELETE /queues/:name
    GET|PUT|DELETE   /properties      default list    GET|PATCH|DELETE /properties/:name
    GET    /stats

A node serves the API with :func:`create_server`: aiohttp's low-level server (its C parser, its
requests and responses) calling :meth:`HttpApi.handle` directly, because the Application's
router and middleware chain cost more per request than pylmq's own work on push, pull and ack.
:func:`create_app` mounts the same API in an ``aiohttp.web.Application`` for embedding.

Request bodies are limited to :data:`DEFAULT_MAX_BODY` (64 MiB, adjustable); a larger body is
answered 413. A message taken for a client that is gone before its response is fully written
is put back with its retry intact.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol
from urllib.parse import unquote, unquote_to_bytes

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11
from aiohttp.web_protocol import RequestHandler
from multidict import CIMultiDict

from pylmq.api.compound import (
    MSGPACK_CONTENT_TYPE,
    encode_msgpack,
    encode_multipart,
    item_headers,
    multipart_content_type,
)
from pylmq.core.manager import QueueManager
from pylmq.core.message import Item, MessageType, Metadata, make_item, uuid_text
from pylmq.core.props import export_props, parse_default_list, parse_props
from pylmq.core.queue import Delivery
from pylmq.errors import BadRequest, InvalidQueueName, InvalidRegex, LMQError
from pylmq.metrics import HistogramStats, MeterRates, QueueStats

__all__ = [
    "DEFAULT_MAX_BODY",
    "MANAGER",
    "STATS",
    "HttpApi",
    "StatsConfig",
    "StatsSource",
    "create_app",
    "create_server",
    "delivery_response",
    "parse_timeout",
    "stats_document",
]

log = logging.getLogger("pylmq.http")
access_log = logging.getLogger("pylmq.access")

DEFAULT_MAX_BODY = 64 * 1024 * 1024
"""Largest request body accepted: well above LMQ's 8-10 MB messages, small enough for memory."""


class StatsSource(Protocol):
    """Per-queue meters for ``/stats`` (push/pull counts and rates, retention figures);
    :class:`pylmq.metrics.QueueMetrics` is one."""

    def stats(self, queue: str) -> QueueStats | None: ...


# A queue nobody pushed to or pulled from yet (on this node) shows zero meters, same shape.
_NO_RATES = MeterRates(count=0, one=0.0, five=0.0, fifteen=0.0, day=0.0)
_NO_STATS = QueueStats(_NO_RATES, _NO_RATES, HistogramStats())


@dataclass(frozen=True, slots=True)
class StatsConfig:
    metrics: StatsSource | None
    node_name: str


MANAGER = web.AppKey("manager", QueueManager)
STATS = web.AppKey("stats", StatsConfig)

_dumps = partial(json.dumps, separators=(",", ":"))
_JSON = "application/json"


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=_dumps(obj).encode(), content_type=_JSON)


def _no_content() -> web.Response:
    return web.Response(status=204)


# -- request parsing ---------------------------------------------------------------------------

_T_RE = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def parse_timeout(value: str | None) -> float | None:
    """``t``: absent waits forever (None), ``0`` answers at once, else float seconds."""
    if value is None:
        return None
    t = float(value) if _T_RE.fullmatch(value) else math.nan
    if not math.isfinite(t):
        raise BadRequest(f"t must be a non-negative number of seconds, got {value!r}")
    return t


def _compound_format(query: Mapping[str, str]) -> str:
    cf = query.get("cf", "multipart")
    if cf not in ("multipart", "msgpack"):
        raise BadRequest(f"cf must be multipart or msgpack, got {cf!r}")
    return cf


def _qre(request: web.BaseRequest) -> str:
    qre = request.query.get("qre")
    if qre is None:
        raise InvalidRegex("the qre parameter (a regex of queue names) is required")
    return qre


# aiohttp hands header values over as UTF-8 with surrogate escapes; encoding them back gives
# the bytes the client sent, which is what LMQ stores.
_ct_cache: dict[str, bytes] = {}


def _item(request: web.BaseRequest, body: bytes) -> Item:
    ct = request.headers.get(hdrs.CONTENT_TYPE)
    if ct is None:
        return make_item(body)
    raw = _ct_cache.get(ct)
    if raw is None:
        raw = ct.encode("utf-8", "surrogateescape")
        if len(_ct_cache) < 1024:
            _ct_cache[ct] = raw
    return make_item(body, raw)


def _queue_name(segment: str) -> str:
    """A queue name from its raw path segment. A percent-escape that is not UTF-8 ("%E9") is
    refused: taken literally it would alias the queue really named so ("%25E9")."""
    if "%" not in segment:
        return segment
    try:
        return unquote_to_bytes(segment).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidQueueName(f"queue name {segment!r} is not percent-encoded UTF-8") from None


def _message_id(segment: str) -> str:
    # Escapes that are not UTF-8 stay as sent: the manager answers 404 naming what it got.
    if "%" not in segment:
        return segment
    try:
        return unquote_to_bytes(segment).decode("utf-8")
    except UnicodeDecodeError:
        return segment


async def _json_body(request: web.BaseRequest) -> Any:
    data = await request.read()
    try:
        return json.loads(data)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise BadRequest(f"malformed JSON body: {e}") from e


# -- responses for deliveries ------------------------------------------------------------------

# Headers that would change the framing of our response if a stored message carried them.
_FRAMING = frozenset({b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"upgrade"})
_BAD_HEADER_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
_text_cache: dict[bytes, str | None] = {}


def _header_text(value: bytes) -> str | None:
    """A stored header byte string as a response header value; None if it cannot be one."""
    try:
        return _text_cache[value]
    except KeyError:
        pass
    decoded = value.decode("utf-8", "replace")
    text = None if _BAD_HEADER_CHARS.search(decoded) else decoded
    if len(_text_cache) < 4096:
        _text_cache[value] = text
    return text


def _header_name(queue: str) -> str:
    """The queue name as a header value: control characters (never allowed in a header, but
    allowed in a name) percent-escaped, so the queue stays pullable."""
    if _BAD_HEADER_CHARS.search(queue) is None:
        return queue
    return _BAD_HEADER_CHARS.sub(lambda m: f"%{ord(m.group()):02X}", queue)


# Messages share their metadata tuples (make_item), so a node sees few distinct ones.
_stored_cache: dict[Metadata, list[tuple[str, str]]] = {}


def _stored_headers(metadata: Metadata) -> list[tuple[str, str]]:
    """A normal message's stored headers as response headers, content-type always there."""
    pairs = _stored_cache.get(metadata)
    if pairs is None:
        pairs = []
        for k, v in item_headers(metadata):
            name, value = _header_text(k), _header_text(v)
            if name and value is not None and k.lower() not in _FRAMING:
                pairs.append((name, value))
        if not any(name.lower() == "content-type" for name, _ in pairs):
            pairs.append((hdrs.CONTENT_TYPE, "application/octet-stream"))
        if len(_stored_cache) < 1024:
            _stored_cache[metadata] = pairs
    return pairs


def delivery_response(d: Delivery, cf: str = "multipart") -> web.Response:
    """The 200 response for a delivered message, headers and body as LMQ sends them."""
    msg = d.message
    headers: CIMultiDict[str] = CIMultiDict()
    if msg.type is MessageType.COMPOUND:
        mid = uuid_text(msg.uuid)
        if cf == "msgpack":
            headers[hdrs.CONTENT_TYPE] = MSGPACK_CONTENT_TYPE
            body = encode_msgpack(msg.items())
        else:
            headers[hdrs.CONTENT_TYPE] = multipart_content_type(mid)
            body = encode_multipart(mid.encode(), msg.items())
    else:
        metadata, body = msg.items()[0]
        headers.extend(_stored_headers(metadata))
        mid = uuid_text(msg.uuid)
    headers["x-lmq-queue-name"] = _header_name(d.queue)
    headers["x-lmq-message-id"] = mid
    headers["x-lmq-message-type"] = msg.type.value
    headers["x-lmq-retry-remaining"] = "infinity" if msg.retry is None else str(msg.retry)
    return web.Response(body=body, headers=headers)


async def _deliver(manager: QueueManager, request: web.BaseRequest, d: Delivery | None, cf: str) -> web.StreamResponse:
    """Write the delivery within the handler, so that a client gone before the response is
    fully written (cancelled handler or closed transport) gets its message put back."""
    if d is None:
        return _no_content()
    resp = delivery_response(d, cf)
    try:
        await resp.prepare(request)
        await resp.write_eof()
    except BaseException as e:
        await asyncio.shield(_put_back(manager, d))
        if isinstance(e, ConnectionError):
            # aiohttp's own finish step meets the same closed transport and drops it quietly.
            return resp
        raise
    return resp


async def _put_back(manager: QueueManager, d: Delivery) -> None:
    log.info("client of %s left before its message was written: putting it back", d.queue)
    try:
        await manager.put_back(d.queue, d.message.uuid)
    except LMQError as e:
        log.warning("could not put back message %s of %s: %s", uuid_text(d.message.uuid), d.queue, e.detail)


# -- handlers ----------------------------------------------------------------------------------

_ACCUM_BODIES = {r: _dumps({"accum": r}).encode() for r in ("no", "new", "yes")}


def stats_document(manager: QueueManager, metrics: StatsSource | None, node: str) -> dict[str, Any]:
    """LMQ's ``/stats`` shape: node lists, then per queue its meters, size, memory, nodes, props
    (as LMQ stores them: accum in milliseconds, unlike GET /properties)."""
    queues: dict[str, Any] = {}
    for q in manager.status():
        entry: dict[str, Any] = {}
        if metrics is not None:
            entry["stats"] = (metrics.stats(q["name"]) or _NO_STATS).to_json()
        entry["size"] = q["size"]
        entry["memory"] = q["memory"]
        entry["nodes"] = [node]
        props = export_props(q["props"])
        # LMQ prints the stored property list here, accum in whole milliseconds.
        props["accum"] = round(q["props"].accum * 1000)
        entry["props"] = props
        queues[q["name"]] = entry
    return {"active_nodes": [node], "all_nodes": [node], "queues": queues}


class HttpApi:
    """The HTTP API over one queue manager: :meth:`handle` answers any request.

    It knows which connections have a request in progress, for a graceful stop
    (:meth:`begin_stop`, :meth:`drain`)."""

    def __init__(
        self, manager: QueueManager, *, metrics: StatsSource | None = None, node_name: str = "nonode@nohost"
    ) -> None:
        self.manager = manager
        self.metrics = metrics
        self.node_name = node_name
        self._busy: set[object] = set()  # connections (aiohttp protocols) with a request in progress
        self._stopping = False
        self._drained: asyncio.Event | None = None

    def begin_stop(self, connections: Iterable[RequestHandler]) -> None:
        """Close the connections that have no request in progress; every later answer closes
        its connection after it is written. Connections busy with a request are not closed:
        aiohttp drops what a closing connection receives, and the rest of a request's body
        would never arrive."""
        self._stopping = True
        self._drained = asyncio.Event()
        if not self._busy:
            self._drained.set()
        for conn in connections:
            if conn not in self._busy:
                conn.force_close()

    async def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for the requests in progress to be answered; whether
        they all were."""
        if self._drained is None:
            raise RuntimeError("drain() before begin_stop()")
        try:
            await asyncio.wait_for(self._drained.wait(), timeout)
        except TimeoutError:
            return False
        return True

    async def push(self, request: web.BaseRequest, name: str) -> web.StreamResponse:
        item = _item(request, await request.read())
        result = await self.manager.push(_queue_name(name), item)
        return web.Response(body=_ACCUM_BODIES[result], content_type=_JSON)

    async def push_all(self, request: web.BaseRequest) -> web.StreamResponse:
        regex = _qre(request)
        item = _item(request, await request.read())
        result = await self.manager.push_all(regex, item)
        return _json({name: {"accum": r} for name, r in result.items()})

    async def pull(self, request: web.BaseRequest, name: str) -> web.StreamResponse:
        query = request.query
        timeout, cf = parse_timeout(query.get("t")), _compound_format(query)
        d = await self.manager.pull(_queue_name(name), timeout)
        return await _deliver(self.manager, request, d, cf)

    async def pull_any(self, request: web.BaseRequest) -> web.StreamResponse:
        query = request.query
        regex, timeout, cf = _qre(request), parse_timeout(query.get("t")), _compound_format(query)
        d = await self.manager.pull_any(regex, timeout)
        return await _deliver(self.manager, request, d, cf)

    async def reply(self, request: web.BaseRequest, name: str, id_: str) -> web.StreamResponse:
        op = request.query.get("reply")
        name, id_ = _queue_name(name), _message_id(id_)
        if op == "ack":
            await self.manager.ack(name, id_)
        elif op == "nack":
            await self.manager.nack(name, id_)
        elif op == "ext":
            await self.manager.ext(name, id_)
        else:
            raise BadRequest(f"reply must be ack, nack or ext, got {op!r}")
        return _no_content()

    async def delete_queue(self, request: web.BaseRequest, name: str) -> web.StreamResponse:
        await self.manager.delete(_queue_name(name))
        return _no_content()

    async def get_default_props(self, request: web.BaseRequest) -> web.StreamResponse:
        return _json([[regex, export_props(props)] for regex, props in self.manager.default_props()])

    async def set_default_props(self, request: web.BaseRequest) -> web.StreamResponse:
        defaults = parse_default_list(await _json_body(request))
        await self.manager.set_default_props(defaults)
        return _no_content()

    async def reset_default_props(self, request: web.BaseRequest) -> web.StreamResponse:
        await self.manager.set_default_props([])
        return _no_content()

    async def get_props(self, request: web.BaseRequest, name: str) -> web.StreamResponse:
        return _json(export_props(await self.manager.get_props(_queue_name(name))))

    async def update_props(self, request: web.BaseRequest, name: str) -> web.StreamResponse:
        props = parse_props(await _json_body(request))
        await self.manager.update_props(_queue_name(name), props, merge=True)
        return _no_content()

    async def reset_props(self, request: web.BaseRequest, name: str) -> web.StreamResponse:
        await self.manager.update_props(_queue_name(name), None)
        return _no_content()

    async def stats(self, request: web.BaseRequest) -> web.StreamResponse:
        return _json(stats_document(self.manager, self.metrics, self.node_name))

    # -- one request: route, expect, errors, access log ------------------------------------------

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """The answer to any request (aiohttp's low-level handler signature)."""
        start = time.perf_counter()
        status = 500
        conn = request.protocol
        self._busy.add(conn)
        try:
            # Routing inline, not in a coroutine of its own: this runs for every request.
            target = request.raw_path
            path = target.partition("?")[0] if "?" in target else target
            if not path.startswith("/"):  # an absolute-form target: http://host/path
                path = request.rel_url.raw_path
            found = _resolved.get(path) or _resolve(path)
            resp: web.StreamResponse
            if found is None:
                resp = _error(404, "not_found", f"no such resource: {request.path}")
            elif (handler := found[0].methods.get(request.method)) is None:
                allow = found[0].allow
                detail = f"{request.method} not allowed here; allowed: {allow}"
                resp = _error(405, "method_not_allowed", detail, {"Allow": allow})
            else:
                if hdrs.EXPECT in request.headers:
                    await _expect(request)
                resp = await handler(self, request, *found[1])
            status = resp.status
        except LMQError as e:
            status = e.http_status
            resp = _error(status, e.reason, e.detail)
        except web.HTTPException as e:  # from aiohttp itself: 413 on a body over the limit
            status = e.status
            if status < 400:
                raise
            resp = _http_error(e)
        except asyncio.CancelledError:
            status = 499  # the client went away (nginx's code for it)
            raise
        except Exception:
            log.exception("%s %s failed", request.method, request.raw_path)
            resp = _error(500, "internal_error", "the server failed; see its log")
        finally:
            self._busy.discard(conn)
            if self._stopping:
                self._stopped_one()
            if access_log.isEnabledFor(logging.INFO):
                access_log.info(
                    "%s %s %d %.1fms", request.method, request.raw_path, status, (time.perf_counter() - start) * 1000
                )
        if self._stopping:
            resp.force_close()  # the node is stopping: no next request on this connection
        return resp

    def _stopped_one(self) -> None:
        if not self._busy and self._drained is not None:
            self._drained.set()


async def _expect(request: web.BaseRequest) -> None:
    """``Expect: 100-continue``: tell the client to send its body (as aiohttp's router does)."""
    expect = request.headers[hdrs.EXPECT]
    if request.version != HttpVersion11:
        return
    if expect.lower() != "100-continue":
        raise web.HTTPExpectationFailed(text=f"unknown Expect: {expect}")
    await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    request.writer.output_size = 0  # the response proper has not started


# -- routes ------------------------------------------------------------------------------------

Handler = Callable[..., Awaitable[web.StreamResponse]]
"""An :class:`HttpApi` method: ``(api, request, *path_parameters)``."""

# (method, path under the messages prefix or the properties prefix, handler). The same table is
# served under the current prefixes and under LMQ's older ``/msgs`` and ``/props``.
_MESSAGE_ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "", HttpApi.pull_any),
    ("POST", "", HttpApi.push_all),
    ("GET", "/{name}", HttpApi.pull),
    ("POST", "/{name}", HttpApi.push),
    ("POST", "/{name}/{id}", HttpApi.reply),
)
_PROPERTY_ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "", HttpApi.get_default_props),
    ("PUT", "", HttpApi.set_default_props),
    ("DELETE", "", HttpApi.reset_default_props),
    ("GET", "/{name}", HttpApi.get_props),
    ("PATCH", "/{name}", HttpApi.update_props),
    ("DELETE", "/{name}", HttpApi.reset_props),
)
_PREFIXES = (("/messages", "/properties"), ("/msgs", "/props"))
_OTHER_ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("DELETE", "/queues/{name}", HttpApi.delete_queue),
    ("GET", "/stats", HttpApi.stats),
)


def _route_table() -> list[tuple[str, str, Handler]]:
    table: list[tuple[str, str, Handler]] = []
    for msgs, props in _PREFIXES:
        for prefix, routes in ((msgs, _MESSAGE_ROUTES), (props, _PROPERTY_ROUTES)):
            for method, path, handler in routes:
                table.append((method, prefix + path, handler))
                if not path:  # LMQ's router ignores a trailing slash: /properties/ too
                    table.append((method, prefix + "/", handler))
    return table + list(_OTHER_ROUTES)


@dataclass(frozen=True, slots=True)
class _Resource:
    """One path template: its segments (None where a parameter goes) and its methods. There is
    no implicit HEAD: a HEAD must not pull a message and throw it away."""

    segments: tuple[str | None, ...]
    methods: dict[str, Handler]
    allow: str  # the Allow header of a 405


def _resource_index() -> dict[tuple[str, int], list[_Resource]]:
    """Resources by (first segment, number of segments): a request looks at one short list."""
    methods: dict[str, dict[str, Handler]] = {}
    for method, path, handler in _route_table():
        methods.setdefault(path, {})[method] = handler
    index: dict[tuple[str, int], list[_Resource]] = {}
    for path, by_method in methods.items():
        parts = path.split("/")[1:]
        segments = tuple(None if p.startswith("{") else p for p in parts)
        resource = _Resource(segments, by_method, ", ".join(sorted(by_method)))
        index.setdefault((parts[0], len(parts)), []).append(resource)
    return index


_RESOURCES = _resource_index()


# Resolved paths with at most a queue name in them: a node sees the same few again and again
# (message ids make every ack path new: those are not kept).
_resolved: dict[str, tuple[_Resource, tuple[str, ...]]] = {}
_RESOLVED_MAX = 4096


def _resolve(path: str) -> tuple[_Resource, tuple[str, ...]] | None:
    """The resource for a raw path and its raw (still percent-encoded) parameters. Fixed
    segments compare decoded; a parameter is never empty."""
    parts = path.split("/")[1:]
    head = unquote(parts[0]) if "%" in parts[0] else parts[0]
    for resource in _RESOURCES.get((head, len(parts)), ()):
        args: list[str] = []
        for want, got in zip(resource.segments[1:], parts[1:], strict=True):
            if want is None:
                if not got:
                    break
                args.append(got)
            elif want != (unquote(got) if "%" in got else got):
                break
        else:
            found = resource, tuple(args)
            if len(args) <= 1 and len(_resolved) < _RESOLVED_MAX:
                _resolved[path] = found
            return found
    return None


# -- errors ------------------------------------------------------------------------------------


def _error(status: int, reason: str, detail: str, headers: Mapping[str, str] | None = None) -> web.Response:
    body = _dumps({"error": reason, "detail": detail}).encode()
    return web.Response(status=status, body=body, content_type=_JSON, headers=headers)


def _http_error(e: web.HTTPException) -> web.Response:
    reason = (e.reason or "error").lower().replace(" ", "_")
    return _error(e.status, reason, e.text or e.reason)


# -- serving -----------------------------------------------------------------------------------


def create_server(api: HttpApi, *, client_max_size: int = DEFAULT_MAX_BODY, **kwargs: Any) -> web.Server:
    """The HTTP API as aiohttp's low-level server (run it with ``web.ServerRunner``). A handler
    whose client disconnects is cancelled, so a long poll puts back the message it may have
    taken (LMQ does the same with a monitor). ``kwargs`` go to aiohttp's request handler."""
    # aiohttp's own factory, with our body limit (its default is 1 MiB).
    request_factory = partial(web.BaseRequest, loop=asyncio.get_running_loop(), client_max_size=client_max_size)
    return web.Server(api.handle, request_factory=request_factory, handler_cancellation=True, access_log=None, **kwargs)


async def _no_expect_handling(request: web.Request) -> None:
    """HttpApi.handle answers Expect itself, once the route is known to exist."""


def create_app(
    manager: QueueManager,
    *,
    metrics: StatsSource | None = None,
    node_name: str = "nonode@nohost",
    client_max_size: int = DEFAULT_MAX_BODY,
) -> web.Application:
    """The HTTP API as an ``aiohttp.web.Application`` (one catch-all route to
    :meth:`HttpApi.handle`). ``metrics`` adds push/pull/retention figures to ``/stats``;
    ``node_name`` is what ``/stats`` lists as this node (Erlang's name for a node outside
    distribution by default)."""
    api = HttpApi(manager, metrics=metrics, node_name=node_name)
    app = web.Application(client_max_size=client_max_size)
    app[MANAGER] = manager
    app[STATS] = StatsConfig(metrics, node_name)
    app.router.add_route("*", "/{path:.*}", api.handle, expect_handler=_no_expect_handling)
    return app
