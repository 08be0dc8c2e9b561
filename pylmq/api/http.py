"""The HTTP API of LMQ (docs/lmq-contract.md#http-api): parse, call the queue manager, answer.

Every handler parses the request, makes one call on the :class:`QueueManager` and encodes the
answer; queue semantics live in ``pylmq.core``. :class:`HttpApi` routes a request by its path
segments (one table, below), turns :class:`LMQError` into ``{"error": reason, "detail": ...}``
with the error's status, and writes the access log (logger ``pylmq.access``, info level, one
line per request).

Routes (also under LMQ's older prefixes ``/msgs`` and ``/props``)::

    GET    /messages/:name?t=&cf=     pull            POST /messages/:name       push
    GET    /messages?qre=&t=&cf=      pull-any        POST /messages?qre=        fan-out push
    POST   /messages/:name/:id?reply=ack|nack|ext
    POST   /replies/:name             ack, nack or ext of many ids (pylmq extension)
    POST   /claims/:name              take messages back by id (pylmq extension); a body
                                      {"holder": TAG} takes back all a ?holder=TAG pull-many got
    DELETE /queues/:name
    GET|PUT|DELETE   /properties      default list    GET|PATCH|DELETE /properties/:name
    GET    /stats
    POST   /batch/:name               push many       GET  /batch/:name?n=&t=    pull many
    GET    /peek/:name?after=&n=&body=&preview=        list records without delivering them
    POST   /purge/:name                                drop every message, keep the queue
    POST   /requeue/:name?n=&to=                       move dead letters back to their origin
    GET    /virtual                   virtual queues  GET|PUT|DELETE /virtual/:name

``/batch`` is pylmq's extension (LMQ has no batch forms): see :mod:`pylmq.wire.batch`. So are
the push options (``?delay=&ttl=&retry=&interval=&priority=&once=`` on a push, fan-out push or
batch push), the delivery headers ``x-lmq-attempts`` and ``x-lmq-dead-*``, peek, purge, requeue
and virtual queues: docs/http-api-extensions.md. A request without them is answered as LMQ does.

This module knows nothing of sockets: :class:`Request` is a parsed request (method, raw target,
headers, whole body) and :class:`Response` an answer with its header block already encoded.
:mod:`pylmq.api.http_server` is the HTTP/1.1 server that reads the one and writes the other.
A delivery's response carries the delivery, so that the server puts the message back when the
response cannot be written.
"""

from __future__ import annotations

import asyncio
import heapq
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol
from urllib.parse import parse_qsl, unquote, unquote_to_bytes, urlsplit

import msgpack

from pylmq.api._putback import Deliveries
from pylmq.api.batch import encode_deliveries
from pylmq.api.options import push_all_with, push_many_with, push_options
from pylmq.api.peek import DEFAULT_PEEK, MAX_PEEK, MAX_PREVIEW, json_page
from pylmq.core.manager import MAX_BATCH, QueueManager
from pylmq.core.message import Item, MessageExt, Metadata, PushOptions, StoredMessageType, make_item, uuid_text
from pylmq.core.props import export_props, parse_default_list, parse_props
from pylmq.core.queue import Delivery
from pylmq.errors import (
    BadRequest,
    InvalidQueueName,
    InvalidRegex,
    LMQError,
    MessageTooLarge,
    NotFound,
    Unauthorized,
    shown_detail,
)
from pylmq.log import info_line
from pylmq.metrics import HistogramStats, MeterRates, QueueStats
from pylmq.wire.batch import BAD_HEADER_CHARS, decode_pushes
from pylmq.wire.compound import (
    MSGPACK_CONTENT_TYPE,
    encode_msgpack,
    encode_multipart,
    item_headers,
    multipart_content_type,
)
from pylmq.wire.numbers import whole_number

__all__ = [
    "CONSOLE_PREFIX",
    "DEFAULT_MAX_BODY",
    "MAX_REPLY_BODY",
    "Authenticator",
    "ConsoleResponder",
    "Handler",
    "HttpApi",
    "Request",
    "Response",
    "StatsSource",
    "delivery_response",
    "error_response",
    "parse_timeout",
    "stats_body",
    "stats_document",
]

log = logging.getLogger("pylmq.http")
access_log = logging.getLogger("pylmq.access")

MAX_REPLY_BODY = 1024 * 1024
"""Largest body of ``POST /replies/:name`` and ``POST /claims/:name``: room for
:data:`pylmq.core.manager.MAX_REPLY_IDS` ids of LMQ's form (36 characters) several times over."""

DEFAULT_MAX_BODY = 64 * 1024 * 1024
"""Largest request body accepted: well above LMQ's 8-10 MB messages, small enough for memory."""


class StatsSource(Protocol):
    """Per-queue meters for ``/stats`` (push/pull counts and rates, retention figures);
    :class:`pylmq.metrics.QueueMetrics` is one."""

    def stats(self, queue: str) -> QueueStats | None: ...


CONSOLE_PREFIX = "/console"
"""Where the web console lives: ``/console`` and every path under ``/console/``."""


class Authenticator(Protocol):
    """The optional credential check of ``http_auth`` (None: everything is open, as in LMQ).

    :meth:`HttpApi.respond` asks :meth:`protects` about the handler a request is routed to and,
    when it says yes, calls :meth:`check`, which raises :class:`~pylmq.errors.Unauthorized`
    unless the request carries a configured credential. The console checks its own JSON routes."""

    def protects(self, handler: Handler) -> bool: ...

    def check(self, headers: Mapping[bytes, bytes]) -> None: ...


class ConsoleResponder(Protocol):
    """The web console (:class:`pylmq.api.web.WebConsole`): answers what :class:`HttpApi` does
    not route under :data:`CONSOLE_PREFIX`. Errors it raises are answered as the API's are."""

    async def respond(self, request: Request) -> Response: ...


def is_console_path(path: str) -> bool:
    """``/console`` or anything under ``/console/`` (not ``/consoles``)."""
    return path.startswith(CONSOLE_PREFIX) and (len(path) == len(CONSOLE_PREFIX) or path[len(CONSOLE_PREFIX)] == "/")


# A queue nobody pushed to or pulled from yet (on this node) shows zero meters, same shape.
_NO_RATES = MeterRates(count=0, one=0.0, five=0.0, fifteen=0.0, day=0.0)
_NO_STATS = QueueStats(_NO_RATES, _NO_RATES, HistogramStats())


# -- requests and responses --------------------------------------------------------------------


class Request:
    """One HTTP request, whole: ``target`` is the request target as sent (``/path?query``, or
    an absolute URL), ``headers`` maps lower-case names to the raw value of their first line."""

    __slots__ = ("_query", "body", "headers", "method", "target")

    def __init__(self, method: str, target: str, headers: dict[bytes, bytes], body: bytes) -> None:
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self._query: dict[str, str] | None = None

    @property
    def path(self) -> str:
        """The raw (percent-encoded) path; empty when the target has none (``CONNECT
        host:port``, ``OPTIONS *``): no resource is named so."""
        path = self.target.partition("?")[0]
        if not path.startswith("/"):
            if not self.target[:8].lower().startswith(("http://", "https://")):
                return ""
            try:  # an absolute-form target: http://host/path
                path = urlsplit(self.target).path or "/"
            except ValueError:  # http://[bad-ipv6
                return ""
        return path

    @property
    def query(self) -> Mapping[str, str]:
        """Query parameters, decoded; the first of repeated ones wins."""
        if self._query is None:
            query: dict[str, str] = {}
            qs = self.target.partition("?")[2]
            if "%" in qs or "+" in qs:
                for k, v in parse_qsl(qs, keep_blank_values=True):
                    query.setdefault(k, v)
            elif qs:
                # Nothing to decode (t=1, reply=ack): split it as parse_qsl would, at a
                # fraction of its cost on every pull and ack.
                for pair in qs.split("&"):
                    if pair:
                        k, _, v = pair.partition("=")
                        query.setdefault(k, v)
            self._query = query
        return self._query


class Response:
    """An answer: ``head`` holds its header lines (``Name: value\r\n`` each) other than the
    framing ones the server adds (Content-Length, Date, Server, Connection)."""

    __slots__ = ("body", "delivery", "head", "status")

    def __init__(self, status: int, head: bytes = b"", body: bytes = b"", delivery: Deliveries | None = None) -> None:
        self.status = status
        self.head = head
        self.body = body
        self.delivery = delivery  # put back if the response cannot be written


_dumps = partial(json.dumps, separators=(",", ":"))
_JSON_HEAD = b"Content-Type: application/json\r\n"


def _json(obj: Any, status: int = 200) -> Response:
    return Response(status, _JSON_HEAD, _dumps(obj).encode())


_MSGPACK_HEAD = b"Content-Type: " + MSGPACK_CONTENT_TYPE.encode() + b"\r\n"
_NO_CONTENT = Response(204)  # immutable in practice: the server only reads responses


def error_response(status: int, reason: str, detail: str, extra_head: bytes = b"") -> Response:
    """``{"error": reason, "detail": detail}`` with ``status``, the detail cut short
    (:func:`pylmq.errors.shown_detail`): it may quote the request."""
    body = _dumps({"error": reason, "detail": shown_detail(detail)}).encode()
    return Response(status, _JSON_HEAD + extra_head, body)


_CHALLENGE = b'WWW-Authenticate: Bearer realm="pylmq"\r\n'

# A credential is only taken from the Authorization header, but users try RFC 6750's
# ?access_token= (or ?token=): the node refuses it, and its logs must not keep the secret.
_QUERY_SECRET = re.compile(r"(?i)((?:^|&)(?:access_)?token=)[^&]*")


def _logged_target(target: str) -> str:
    """``target`` as the logs show it: the values of ``access_token`` and ``token`` in the
    query replaced by ``***`` (no route takes either, so nothing useful is hidden)."""
    path, sep, query = target.partition("?")
    if not sep or "oken=" not in query.lower():  # the common case: one cheap test per request
        return target
    return path + sep + _QUERY_SECRET.sub(r"\1***", query)


def _lmq_error(e: LMQError) -> Response:
    # A 401 says which scheme to use (RFC 6750); Basic is never offered, so that a browser
    # never asks for, and then keeps sending, a credential by itself.
    extra = _CHALLENGE if isinstance(e, Unauthorized) else b""
    return error_response(e.http_status, e.reason, e.detail, extra)


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


DEFAULT_PULL_MANY = 100
"""Messages a ``GET /batch/:name`` takes when it names no ``n``."""


def _count(value: str | None, default: int = DEFAULT_PULL_MANY, top: int = MAX_BATCH) -> int:
    if value is None:
        return default
    n = whole_number(value, 9) or 0
    if not 1 <= n <= top:
        raise BadRequest(f"n must be a whole number of messages from 1 to {top}, got {value!r:.40}")
    return n


def _flag(value: str | None, name: str) -> bool:
    if value in (None, "0", "false"):
        return False
    if value in ("1", "true"):
        return True
    raise BadRequest(f"{name} must be 1, true, 0 or false, got {value!r:.40}")


def _preview(value: str | None) -> int | None:
    """``preview`` of a peek: bytes of each body shown (implies ``body``); None: whole bodies."""
    if value is None:
        return None
    n = whole_number(value, 8) or 0
    if not 1 <= n <= MAX_PREVIEW:
        raise BadRequest(f"preview must be a whole number of bytes from 1 to {MAX_PREVIEW}, got {value!r:.40}")
    return n


def _compound_format(query: Mapping[str, str]) -> str:
    cf = query.get("cf", "multipart")
    if cf not in ("multipart", "msgpack"):
        raise BadRequest(f"cf must be multipart or msgpack, got {cf!r}")
    return cf


def _qre(request: Request) -> str:
    qre = request.query.get("qre")
    if qre is None:
        raise InvalidRegex("the qre parameter (a regex of queue names) is required")
    return qre


def _item(request: Request) -> Item:
    # The content-type's bytes as the client sent them: what LMQ stores.
    return make_item(request.body, request.headers.get(b"content-type"))


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


MAX_JSON_DEPTH = 32
"""Deepest nesting of arrays and objects in a JSON body (properties need 3): json.loads recurses
once per level, and a body nested 100,000 deep would exhaust the stack."""
_JSON_NESTING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def _json_depth_over(body: bytes, limit: int) -> bool:
    """Whether ``body`` nests arrays and objects deeper than ``limit`` (brackets inside
    strings do not count). Without that many opening brackets it cannot: scanning is skipped."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    depth = 0
    for m in _JSON_NESTING.finditer(body):
        token = m.group()
        if token in (b"[", b"{"):
            depth += 1
            if depth > limit:
                return True
        elif token in (b"]", b"}"):
            depth -= 1
    return False


def _json_body(request: Request) -> Any:
    if _json_depth_over(request.body, MAX_JSON_DEPTH):
        raise BadRequest(f"JSON body nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(request.body)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        raise BadRequest(f"malformed JSON body: {e}") from e
    except RecursionError:  # the depth check should make this unreachable; a 400 if not
        raise BadRequest("JSON body nested too deep") from None


def _ids_body(request: Request, keys: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object body of a request on many ids: exactly ``keys``, ``ids`` an array of
    strings (their number is bounded by the manager)."""
    if len(request.body) > MAX_REPLY_BODY:
        raise MessageTooLarge(f"the body holds at most {MAX_REPLY_BODY} bytes, got {len(request.body)}")
    doc = _json_body(request)
    if not isinstance(doc, dict) or set(doc) != set(keys):
        shape = ", ".join(f'"{k}": ...' for k in keys)
        raise BadRequest(f"the body must be a JSON object {{{shape}}}, with exactly those keys")
    ids = doc["ids"]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise BadRequest("ids must be an array of message id strings")
    return doc


def _holder_claim(request: Request) -> Any:
    """The tag of a claim whose body is ``{"holder": TAG}`` (checked by the manager), else
    None: the body must then be ``{"ids": [...]}``, and :func:`_ids_body` says what is wrong."""
    if len(request.body) > MAX_REPLY_BODY or b'"holder"' not in request.body:
        return None
    doc = _json_body(request)
    if not isinstance(doc, dict) or set(doc) != {"holder"}:
        return None
    return doc["holder"]


# -- responses for deliveries ------------------------------------------------------------------

# Headers that would change the framing of our response if a stored message carried them.
_FRAMING = frozenset({b"content-length", b"transfer-encoding", b"connection", b"keep-alive", b"upgrade"})
_BAD_HEADER_CHARS = BAD_HEADER_CHARS
_BAD_HEADER_BYTES = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f:]")


def _header_value(value: bytes) -> bytes | None:
    """A stored header byte string as a response header value (UTF-8, undecodable bytes
    replaced); None if it cannot be one (control characters)."""
    decoded = value.decode("utf-8", "replace")
    return None if _BAD_HEADER_CHARS.search(decoded) else decoded.encode()


def _header_name(queue: str) -> bytes:
    """The queue name as a header value: control characters (never allowed in a header, but
    allowed in a name) percent-escaped, so the queue stays pullable."""
    if _BAD_HEADER_CHARS.search(queue) is not None:
        queue = _BAD_HEADER_CHARS.sub(lambda m: f"%{ord(m.group()):02X}", queue)
    return queue.encode()


# Messages share their metadata tuples (make_item), so a node sees few distinct ones.
_stored_cache: dict[Metadata, bytes] = {}


def _stored_head(metadata: Metadata) -> bytes:
    """A normal message's stored headers as response header lines, content-type always there."""
    head = _stored_cache.get(metadata)
    if head is None:
        lines = []
        for k, v in item_headers(metadata):
            value = _header_value(v)
            if k and not _BAD_HEADER_BYTES.search(k) and value is not None and k.lower() not in _FRAMING:
                lines.append(k + b": " + value + b"\r\n")
        head = b"".join(lines)
        if len(_stored_cache) < 1024:
            _stored_cache[metadata] = head
    return head


def delivery_response(d: Delivery, cf: str = "multipart") -> Response:
    """The 200 response for a delivered message, headers and body as LMQ sends them."""
    msg = d.message
    mid = uuid_text(msg.uuid)
    if msg.type is StoredMessageType.COMPOUND:
        if cf == "msgpack":
            head = b"Content-Type: " + MSGPACK_CONTENT_TYPE.encode() + b"\r\n"
            body = encode_msgpack(msg.items())
        else:
            head = b"Content-Type: " + multipart_content_type(mid).encode() + b"\r\n"
            body = encode_multipart(mid.encode(), msg.items())
    else:
        metadata, body = msg.items()[0]
        head = _stored_head(metadata)
    retry = b"infinity" if msg.retry is None else str(msg.retry).encode()
    head += (
        b"x-lmq-queue-name: " + _header_name(d.queue) + b"\r\nx-lmq-message-id: " + mid.encode()
        + b"\r\nx-lmq-message-type: " + msg.type.value.encode() + b"\r\nx-lmq-retry-remaining: " + retry + b"\r\n"
    )  # fmt: skip
    if msg.ext is not None:
        head += _ext_head(msg.ext)
    return Response(200, head, body, d)


def _ext_head(ext: MessageExt) -> bytes:
    """pylmq's delivery headers, for a record that has its extra fields: the attempts so far,
    and where a dead letter came from (an LMQ record gets none of them)."""
    head = b"x-lmq-attempts: %d\r\n" % ext.attempts
    dead = ext.dead
    if dead is not None:
        head += b"x-lmq-dead-origin: " + _header_name(dead.origin) + b"\r\nx-lmq-dead-failures: %d\r\n" % dead.failures
        if dead.last_at is not None:
            head += b"x-lmq-dead-last-delivery: " + repr(dead.last_at).encode() + b"\r\n"
        head += b"x-lmq-dead-reason: " + dead.reason.encode() + b"\r\n"
    return head


_MSGPACK_HEAD = b"Content-Type: " + MSGPACK_CONTENT_TYPE.encode() + b"\r\n"


def _claimed(d: Delivery) -> dict[str, Any]:
    """A message taken back by ``POST /claims/:name``: what a pull's headers say, and its items
    as ``[[{header: value}, body], ...]`` (the ``cf=msgpack`` form of a compound body)."""
    msg = d.message
    items = [
        [{k.decode("latin-1"): v.decode("latin-1") for k, v in item_headers(md)}, body] for md, body in msg.items()
    ]
    return {
        "queue": d.queue,
        "id": uuid_text(msg.uuid),
        "type": msg.type.value,
        "retry": "infinity" if msg.retry is None else msg.retry,
        "items": items,
    }


def _delivered(d: Delivery | None, cf: str) -> Response:
    return _NO_CONTENT if d is None else delivery_response(d, cf)


# -- handlers ----------------------------------------------------------------------------------

_ACCUM_RESPONSES = {r: Response(200, _JSON_HEAD, _dumps({"accum": r}).encode()) for r in ("no", "new", "yes")}


def _queue_entry(
    manager: QueueManager, metrics: StatsSource | None, nodes: list[str], name: str
) -> dict[str, Any] | None:
    """One queue's entry of ``/stats``; None for a queue deleted since its name was taken."""
    q = manager.get(name)
    if q is None:
        return None
    entry: dict[str, Any] = {}
    if metrics is not None:
        entry["stats"] = (metrics.stats(name) or _NO_STATS).to_json()
    entry["size"] = manager.store.size(name)
    entry["memory"] = manager.store.memory(name)
    entry["nodes"] = nodes
    props = export_props(q.props)
    # LMQ prints the stored property list here, accum in whole milliseconds.
    props["accum"] = round(q.props.accum * 1000)
    entry["props"] = props
    return entry


def stats_document(manager: QueueManager, metrics: StatsSource | None, node: str) -> dict[str, Any]:
    """LMQ's ``/stats`` shape: node lists, then per queue its meters, size, memory, nodes, props
    (as LMQ stores them: accum in milliseconds, unlike GET /properties). In one step: the HTTP
    API encodes it with :func:`stats_body`.

    In a cluster the node lists are the cluster's, as every Erlang node reports them: all and
    running db nodes, and per queue the running ones (LMQ keeps a copy of every queue table on
    every db node). Alone, the node lists itself."""
    every, active = _node_lists(manager, node)
    queues: dict[str, Any] = {}
    for name in sorted(manager.queue_names()):
        entry = _queue_entry(manager, metrics, active, name)
        if entry is not None:
            queues[name] = entry
    return {"active_nodes": active, "all_nodes": every, "queues": queues}


def _node_lists(manager: QueueManager, node: str) -> tuple[list[str], list[str]]:
    """All and active nodes for ``/stats``: the cluster's, or this node alone."""
    return manager.store.cluster_nodes() or ([node], [node])


STATS_STEP = 32
"""Queues that :func:`stats_body` encodes between two yields to the loop: one queue's entry is
mostly its retention figures and JSON, and a whole document of many queues in one step held the
loop for seconds (docs/decisions/stats-at-scale.md)."""
STATS_SLICE = 0.002
"""Seconds of work after which :func:`stats_body` yields before a step is full: a queue whose
props must be looked up again (the default list changed, or the node restarted) may search
every default regex, a few milliseconds at worst (:data:`pylmq.core.props.MAX_DEFAULTS_PROGRAM`)."""
_encode = json.JSONEncoder(separators=(",", ":")).encode  # what _dumps calls, minus a layer per call


async def stats_body(manager: QueueManager, metrics: StatsSource | None, node: str, step: int = STATS_STEP) -> bytes:
    """:func:`stats_document` encoded, byte for byte, without holding the loop: the names are
    sorted in runs of ``16 * step`` and merged lazily, and the loop runs other requests after
    every ``step`` queues (a queue created meanwhile may be missing, one deleted is left out)."""
    names = manager.queue_names()
    run = 16 * step
    runs: list[list[str]] = []
    for i in range(0, len(names), run):
        runs.append(sorted(names[i : i + run]))
        await asyncio.sleep(0)
    every, active = _node_lists(manager, node)
    # JSON as json.dumps writes it is ASCII: each batch is encoded once, the pieces joined once.
    parts = [f'{{"active_nodes":{_encode(active)},"all_nodes":{_encode(every)},"queues":{{'.encode()]
    batch: list[str] = []
    clock = time.perf_counter
    until = clock() + STATS_SLICE
    for name in heapq.merge(*runs):
        entry = _queue_entry(manager, metrics, active, name)
        if entry is not None:
            batch.append(_encode(name) + ":" + _encode(entry))
        if len(batch) >= step:
            parts += (",".join(batch).encode(), b",")
            batch = []
            await asyncio.sleep(0)
            until = clock() + STATS_SLICE
        elif clock() > until:
            await asyncio.sleep(0)
            until = clock() + STATS_SLICE
    if batch:
        parts.append(",".join(batch).encode())
    elif len(parts) > 1:
        parts.pop()  # the comma after the last full batch
    parts.append(b"}}")
    return b"".join(parts)


class HttpApi:
    """The HTTP API over one queue manager: :meth:`respond` answers any request."""

    def __init__(
        self,
        manager: QueueManager,
        *,
        metrics: StatsSource | None = None,
        node_name: str = "nonode@nohost",
        auth: Authenticator | None = None,
        console: ConsoleResponder | None = None,
    ) -> None:
        self.manager = manager
        self.metrics = metrics
        self.node_name = node_name
        # Both None: the API answers exactly as LMQ's (no extra header, /console is a 404).
        self.auth = auth
        self.console = console

    def refusal(self, method: str, target: str, headers: Mapping[bytes, bytes]) -> Response | None:
        """The 401 of a request that announces a body without the credential, from its head
        alone: the server asks before it reads a body, so that an anonymous client can neither
        get a 100 Continue nor make the node receive and hold a body, whatever the path (an
        unknown one would be read whole before its 404, an open route before its answer). No
        route needs a body and stays open: they are all reads. None: read on (no credential
        configured, or a good one)."""
        if self.auth is None:
            return None
        try:
            self.auth.check(headers)
        except Unauthorized as e:
            return _lmq_error(e)
        return None

    def allows(self, method: str, path: str) -> bool:
        """Whether a request would reach a handler (the server asks before ``100 Continue``)."""
        found = _resolved.get(path) or _resolve(path)
        return found is not None and method in found[0].methods

    def _options(self, request: Request) -> PushOptions | None:
        """The push options of the query (times from the node's clock); None for LMQ's push.
        Checked before anything is pushed."""
        if "?" not in request.target:
            return None  # LMQ's push: no query to look at
        return push_options(request.query, self.manager.clock.now())

    async def push(self, request: Request, name: str) -> Response:
        options = self._options(request)
        name = _queue_name(name)
        if options is None and self.manager.virtual_members(name) is None:
            return _ACCUM_RESPONSES[await self.manager.push(name, _item(request))]
        pushed = await self.manager.push_with(name, _item(request), options)
        if len(pushed) == 1 and pushed[0][0] == name:
            return _json({"accum": "no", "id": uuid_text(pushed[0][1])})
        # A virtual queue (its members are never itself): each queue's id.
        return _json({"queues": {q: {"accum": "no", "id": uuid_text(u)} for q, u in pushed}})

    async def push_all(self, request: Request) -> Response:
        options = self._options(request)
        if options is None:
            result = await self.manager.push_all(_qre(request), _item(request))
            return _json({name: {"accum": r} for name, r in result.items()})
        pushed = await push_all_with(self.manager, _qre(request), _item(request), options)
        return _json({q: {"accum": "no", "id": uuid_text(u)} for q, u in pushed})

    async def pull(self, request: Request, name: str) -> Response:
        query = request.query
        timeout, cf = parse_timeout(query.get("t")), _compound_format(query)
        return _delivered(await self.manager.pull(_queue_name(name), timeout), cf)

    async def pull_any(self, request: Request) -> Response:
        query = request.query
        regex, timeout, cf = _qre(request), parse_timeout(query.get("t")), _compound_format(query)
        return _delivered(await self.manager.pull_any(regex, timeout), cf)

    async def reply(self, request: Request, name: str, id_: str) -> Response:
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
        return _NO_CONTENT

    async def push_many(self, request: Request, name: str) -> Response:
        ct = request.headers.get(b"content-type", b"").split(b";", 1)[0].strip().lower()
        if ct != MSGPACK_CONTENT_TYPE.encode():
            raise BadRequest(f"a batch push is sent as {MSGPACK_CONTENT_TYPE}, got {ct.decode('latin-1')!r:.100}")
        options = self._options(request)
        if options is None:
            results = await self.manager.push_many(_queue_name(name), decode_pushes(request.body))
            return _json({"pushed": len(results)})
        ids = await push_many_with(self.manager, _queue_name(name), decode_pushes(request.body), options)
        return _json({"pushed": len(ids), "ids": [uuid_text(u) for u in ids]})

    async def pull_many(self, request: Request, name: str) -> Response:
        query = request.query
        count, timeout = _count(query.get("n")), parse_timeout(query.get("t"))
        name = _queue_name(name)
        taken = await self.manager.pull_many(name, count, timeout, holder=query.get("holder"))
        # What the queue still holds (waiting or in processing): a consumer's backlog, for free.
        head = _MSGPACK_HEAD + b"x-lmq-queue-size: %d\r\n" % self.manager.store.size(name)
        return Response(200, head, encode_deliveries(taken), tuple(taken) or None)

    async def reply_many(self, request: Request, name: str) -> Response:
        doc = _ids_body(request, ("reply", "ids"))
        reply = doc["reply"]
        if not isinstance(reply, str):
            raise BadRequest(f"reply must be ack, nack or ext, got {reply!r}")
        outcome = await self.manager.reply_many(_queue_name(name), reply, doc["ids"])
        return _json({"ok": outcome.ok, "not_found": outcome.not_found})

    async def claim(self, request: Request, name: str) -> Response:
        holder = _holder_claim(request)
        if holder is not None:
            # {"holder": TAG}: every message delivered to that tag (a pylmq extension).
            outcome = await self.manager.claim_holder(_queue_name(name), holder)
        else:
            ids = _ids_body(request, ("ids",))["ids"]
            outcome = await self.manager.claim(_queue_name(name), ids)
        doc = {
            "messages": [_claimed(d) for d in outcome.delivered],
            "not_found": outcome.not_found,
            "later": outcome.later,
        }
        return Response(200, _MSGPACK_HEAD, msgpack.packb(doc, use_bin_type=True))

    async def delete_queue(self, request: Request, name: str) -> Response:
        await self.manager.delete(_queue_name(name))
        return _NO_CONTENT

    async def get_default_props(self, request: Request) -> Response:
        return _json([[regex, export_props(props)] for regex, props in self.manager.default_props()])

    async def set_default_props(self, request: Request) -> Response:
        await self.manager.set_default_props(parse_default_list(_json_body(request)))
        return _NO_CONTENT

    async def reset_default_props(self, request: Request) -> Response:
        await self.manager.set_default_props([])
        return _NO_CONTENT

    async def get_props(self, request: Request, name: str) -> Response:
        return _json(export_props(await self.manager.get_props(_queue_name(name))))

    async def update_props(self, request: Request, name: str) -> Response:
        props = parse_props(_json_body(request))
        await self.manager.update_props(_queue_name(name), props, merge=True)
        return _NO_CONTENT

    async def reset_props(self, request: Request, name: str) -> Response:
        await self.manager.update_props(_queue_name(name), None)
        return _NO_CONTENT

    async def stats(self, request: Request) -> Response:
        return Response(200, _JSON_HEAD, await stats_body(self.manager, self.metrics, self.node_name))

    # -- pylmq's extensions: peek, dead letters, virtual queues -------------------------------------

    async def peek(self, request: Request, name: str) -> Response:
        query = request.query
        count = _count(query.get("n"), DEFAULT_PEEK, MAX_PEEK)
        body = _flag(query.get("body"), "body")
        preview = _preview(query.get("preview"))
        if preview is not None:
            if "body" in query and not body:
                raise BadRequest("preview cuts the bodies that body=0 leaves out: drop one of them")
            body = True
        records = await self.manager.peek(_queue_name(name), query.get("after"), count)
        data, cut = json_page(records, body=body, preview=preview)
        head = _JSON_HEAD
        if cut:  # fewer than n shown, more there: the reader goes on after the last one shown
            head += b"x-lmq-peek-cut: true\r\n"
        return Response(200, head, data)

    async def purge(self, request: Request, name: str) -> Response:
        return _json({"purged": await self.manager.purge(_queue_name(name))})

    async def requeue(self, request: Request, name: str) -> Response:
        query = request.query
        count = _count(query.get("n"), DEFAULT_PEEK)
        moved = await self.manager.requeue(_queue_name(name), count, query.get("to"))
        return _json({"requeued": moved})

    async def virtual_queues(self, request: Request) -> Response:
        return _json(dict(sorted(self.manager.virtual_queues().items())))

    async def get_virtual(self, request: Request, name: str) -> Response:
        name = _queue_name(name)
        members = self.manager.virtual_members(name)
        if members is None:
            raise NotFound(f"no virtual queue named {name!r}")
        return _json({"queues": members})

    async def set_virtual(self, request: Request, name: str) -> Response:
        doc = _json_body(request)
        if not isinstance(doc, dict) or set(doc) != {"queues"} or not isinstance(doc["queues"], list):
            raise BadRequest('the body must be a JSON object {"queues": ["queue", ...]}')
        await self.manager.set_virtual(_queue_name(name), doc["queues"])
        return _NO_CONTENT

    async def delete_virtual(self, request: Request, name: str) -> Response:
        name = _queue_name(name)
        if not await self.manager.delete_virtual(name):
            raise NotFound(f"no virtual queue named {name!r}")
        return _NO_CONTENT

    # -- one request: route, errors, access log ------------------------------------------------

    async def respond(self, request: Request) -> Response:
        """The answer to any request. Cancellation (the client left) propagates."""
        start = time.perf_counter()
        status = 500
        try:
            # Routing inline, not in a coroutine of its own: this runs for every request.
            path = request.path
            found = _resolved.get(path) or _resolve(path)
            if not path:
                detail = f"the request target must be a path (/messages/...), got {request.target!r}"
                resp = error_response(400, "bad_request", detail)
            elif found is None:
                if self.console is not None and is_console_path(path):
                    resp = await self.console.respond(request)
                else:
                    resp = error_response(404, "not_found", f"no such resource: {unquote(path)}")
            elif (handler := found[0].methods.get(request.method)) is None:
                allow = found[0].allow
                detail = f"{request.method} not allowed here; allowed: {allow}"
                resp = error_response(405, "method_not_allowed", detail, b"Allow: " + allow.encode() + b"\r\n")
            else:
                if self.auth is not None and self.auth.protects(handler):
                    self.auth.check(request.headers)
                self.manager.check_available()
                resp = await handler(self, request, *found[1])
            status = resp.status
        except LMQError as e:
            resp = _lmq_error(e)
            status = resp.status
        except BaseException as e:
            if not isinstance(e, Exception):
                status = 499  # cancelled: the client went away (nginx's code for it)
                raise
            log.exception("%s %s failed", request.method, _logged_target(request.target))
            resp = error_response(500, "internal_error", "the server failed; see its log")
        finally:
            if access_log.isEnabledFor(logging.INFO):
                ms = (time.perf_counter() - start) * 1000
                info_line(access_log, f"{request.method} {_logged_target(request.target)} {status} {ms:.1f}ms")
        return resp


# -- routes ------------------------------------------------------------------------------------

Handler = Callable[..., Awaitable[Response]]
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
    ("POST", "/batch/{name}", HttpApi.push_many),
    ("GET", "/batch/{name}", HttpApi.pull_many),
    ("POST", "/replies/{name}", HttpApi.reply_many),
    ("POST", "/claims/{name}", HttpApi.claim),
    ("GET", "/peek/{name}", HttpApi.peek),
    ("POST", "/purge/{name}", HttpApi.purge),
    ("POST", "/requeue/{name}", HttpApi.requeue),
    ("GET", "/virtual", HttpApi.virtual_queues),
    ("GET", "/virtual/{name}", HttpApi.get_virtual),
    ("PUT", "/virtual/{name}", HttpApi.set_virtual),
    ("DELETE", "/virtual/{name}", HttpApi.delete_virtual),
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
    if not parts:
        return None  # not a path
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
