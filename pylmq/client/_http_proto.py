"""The HTTP API as data: requests to send and decoders for what comes back, without I/O.

Each operation of docs/lmq-contract.md#http-api is a function returning an :class:`HttpRequest`: the
method, the target (path and query, already percent-encoded), body and headers, how long the
server may legitimately take, and the decoder that turns an :class:`HttpResponse` into the
operation's result or raises. The asyncio (aiohttp) and blocking (http.client) transports only
move bytes, so both clients behave the same by construction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote, urlencode

import msgpack

from pylmq import errors
from pylmq.client._errors import error_from_http
from pylmq.client._message import (
    DEFAULT_CONTENT_TYPE,
    ClaimResult,
    Message,
    MessageType,
    Part,
    PullFormat,
    ReplyMany,
    ReplyResult,
)
from pylmq.client._options import DeadLetterInfo, PushOptions
from pylmq.errors import LMQError, ProtocolError
from pylmq.wire import batch, compound
from pylmq.wire.items import Item

__all__ = [
    "HttpRequest",
    "HttpResponse",
    "PulledMessages",
    "ack",
    "bearer_header",
    "claim",
    "decode_msgpack_parts",
    "decode_multipart",
    "delete_default_props",
    "delete_queue",
    "delete_virtual",
    "ext",
    "get_default_props",
    "get_props",
    "get_virtual",
    "nack",
    "peek",
    "pull",
    "pull_any",
    "pull_many",
    "purge",
    "push",
    "push_all",
    "push_many",
    "push_with",
    "reply_many",
    "requeue",
    "reset_props",
    "set_default_props",
    "set_virtual",
    "stats",
    "update_props",
    "virtual_queues",
]

T = TypeVar("T")
Body = bytes | str
DefaultProps = list[tuple[str, dict[str, Any]]]


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: Mapping[str, str]
    """Lower-case header names."""
    body: bytes


@dataclass(frozen=True, slots=True)
class HttpRequest(Generic[T]):
    method: str
    target: str
    decode: Callable[[HttpResponse], T]
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    server_wait: float | None = 0.0
    """How long the server may hold the request before answering (a pull's ``t``);
    ``None``: as long as it likes (a pull without ``t``)."""


# -- helpers ------------------------------------------------------------------------------------


_TOKEN68 = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def bearer_header(token: str | None) -> dict[str, str]:
    """The ``Authorization`` header that carries ``token`` (the node's ``http_auth``); none
    without one. A token that could not travel in a header is refused without quoting it."""
    if token is None:
        return {}
    if not isinstance(token, str) or not _TOKEN68.fullmatch(token):
        raise errors.BadRequest("a token is made of A-Z a-z 0-9 - . _ ~ + / (then =)")
    return {"Authorization": f"Bearer {token}"}


def _q(name: str) -> str:
    # A queue name may hold '/', '?', '%'...: one opaque path segment.
    return quote(name, safe="")


def _seconds(value: float) -> str:
    if value < 0:
        raise errors.BadRequest(f"timeout must be >= 0, got {value!r}")
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _body(body: Body, content_type: str | None) -> tuple[bytes, dict[str, str]]:
    if isinstance(body, str):
        body = body.encode("utf-8")
        if content_type is None:
            content_type = "text/plain; charset=utf-8"
    elif not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"a message body is bytes or str, got {type(body).__name__}")
    return bytes(body), ({"Content-Type": content_type} if content_type is not None else {})


def _json(resp: HttpResponse) -> Any:
    try:
        return json.loads(resp.body)
    except ValueError as e:
        raise ProtocolError(f"HTTP {resp.status}: body is not JSON: {resp.body[:200]!r}") from e


def _check(resp: HttpResponse, not_found: type[LMQError] = errors.NotFound) -> None:
    if not 200 <= resp.status < 300:
        raise error_from_http(resp.status, resp.body, not_found)


def _accum(value: Any) -> str:
    if isinstance(value, dict) and isinstance(value.get("accum"), str):
        return str(value["accum"])
    raise ProtocolError(f"expected {{'accum': 'no'|'new'|'yes'}}, got {value!r}")


def _no_content(not_found: type[LMQError] = errors.NotFound) -> Callable[[HttpResponse], None]:
    def decode(resp: HttpResponse) -> None:
        _check(resp, not_found)

    return decode


def _json_result(resp: HttpResponse) -> Any:
    _check(resp)
    return _json(resp)


# -- compound bodies -----------------------------------------------------------------------------


def _boundary(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key.strip().lower() == "boundary":
            return value.strip().strip('"')
    raise ProtocolError(f"multipart content-type without a boundary: {content_type!r}")


def _parts(items: list[Item]) -> tuple[Part, ...]:
    return tuple(Part({k.decode("latin-1"): v.decode("latin-1") for k, v in md}, body) for md, body in items)


def decode_multipart(content_type: str, body: bytes) -> tuple[Part, ...]:
    """The parts of a ``multipart/mixed`` compound body (the server's own encoding, inverted)."""
    try:
        return _parts(compound.decode_multipart(_boundary(content_type).encode("latin-1"), body))
    except errors.BadRequest as e:
        raise ProtocolError(f"bad multipart body: {e.detail}") from e


def decode_msgpack_parts(body: bytes) -> tuple[Part, ...]:
    """The parts of an ``application/x-msgpack`` compound body: ``[[{headers}, body], ...]``."""
    try:
        return _parts(compound.decode_msgpack(body))
    except errors.BadRequest as e:
        raise ProtocolError(f"bad msgpack compound body: {e.detail}") from e


def _message(resp: HttpResponse) -> Message | None:
    if resp.status == 204:
        return None
    _check(resp)
    h = resp.headers
    try:
        queue = h["x-lmq-queue-name"]
        msg_id = h["x-lmq-message-id"]
        kind = h.get("x-lmq-message-type", "normal")
        retry_text = h.get("x-lmq-retry-remaining", "infinity")
    except KeyError as e:
        raise ProtocolError(f"pull answer without the {e.args[0]} header") from None
    if kind not in ("normal", "compound"):
        raise ProtocolError(f"unknown message type {kind!r}")
    message_type: MessageType = "compound" if kind == "compound" else "normal"
    retry: int | None
    if retry_text == "infinity":
        retry = None
    else:
        try:
            retry = int(retry_text)
        except ValueError:
            raise ProtocolError(f"bad x-lmq-retry-remaining {retry_text!r}") from None
    content_type = h.get("content-type", DEFAULT_CONTENT_TYPE)
    parts: tuple[Part, ...] = ()
    if message_type == "compound":
        media = content_type.split(";", 1)[0].strip().lower()
        if media == "multipart/mixed":
            parts = decode_multipart(content_type, resp.body)
        elif media == "application/x-msgpack":
            parts = decode_msgpack_parts(resp.body)
        else:
            raise ProtocolError(f"compound message with content-type {content_type!r}")
    return Message(queue, msg_id, message_type, retry, content_type, resp.body, parts, *_ext_headers(h))


def _ext_headers(h: Mapping[str, str]) -> tuple[int | None, DeadLetterInfo | None]:
    """``x-lmq-attempts`` and the ``x-lmq-dead-*`` headers (pylmq's), where the node sent them."""
    try:
        attempts = int(h["x-lmq-attempts"]) if "x-lmq-attempts" in h else None
        dead = None
        if "x-lmq-dead-origin" in h:
            last = h.get("x-lmq-dead-last-delivery")
            dead = DeadLetterInfo(
                h["x-lmq-dead-origin"],
                int(h.get("x-lmq-dead-failures", "0")),
                float(last) if last else None,
                h.get("x-lmq-dead-reason", ""),
            )
    except ValueError as e:
        raise ProtocolError(f"bad x-lmq-attempts or x-lmq-dead-* header: {e}") from None
    return attempts, dead


# -- operations ----------------------------------------------------------------------------------


def push(queue: str, body: Body, content_type: str | None = None) -> HttpRequest[str]:
    data, headers = _body(body, content_type)

    def decode(resp: HttpResponse) -> str:
        _check(resp)
        return _accum(_json(resp))

    return HttpRequest("POST", f"/messages/{_q(queue)}", decode, data, headers)


def _pushed_ids(doc: Any) -> dict[str, str]:
    """``{"accum": "no", "id": ID}`` (a queue) or ``{"queues": {Q: {"accum": "no", "id": ID}}}``
    (a virtual queue) as ``{queue: id}``; the queue of the first form is filled in by the caller."""
    if isinstance(doc, dict) and isinstance(doc.get("id"), str):
        return {"": doc["id"]}
    queues = doc.get("queues") if isinstance(doc, dict) else None
    if isinstance(queues, dict) and all(isinstance(v, dict) and isinstance(v.get("id"), str) for v in queues.values()):
        return {str(q): v["id"] for q, v in queues.items()}
    raise ProtocolError(f"expected {{'accum': ..., 'id': ...}} or {{'queues': {{...}}}}, got {doc!r:.200}")


def push_with(
    queue: str, body: Body, content_type: str | None = None, options: PushOptions | None = None
) -> HttpRequest[dict[str, str]]:
    """A push with per-message options (pylmq's extension): ``{queue: id}``, one entry per queue
    pushed (a virtual queue pushes to each of its queues)."""
    data, headers = _body(body, content_type)
    query = (options or PushOptions()).query()

    def decode(resp: HttpResponse) -> dict[str, str]:
        _check(resp)
        ids = _pushed_ids(_json(resp))
        return {queue: ids[""]} if "" in ids else ids

    target = f"/messages/{_q(queue)}" + (f"?{urlencode(query)}" if query else "")
    return HttpRequest("POST", target, decode, data, headers)


def peek(
    queue: str, after: str | None = None, n: int | None = None, body: bool = False, preview: int | None = None
) -> HttpRequest[list[dict[str, Any]]]:
    """``GET /peek/:name`` (pylmq's): up to ``n`` records after the id ``after``, in order,
    without delivering them; see docs/http-api-extensions.md for each entry's fields.
    ``preview``: only the first that many bytes of each body (implies ``body``)."""
    query: dict[str, str] = {}
    if after is not None:
        query["after"] = after
    if n is not None:
        query["n"] = str(n)
    if body:
        query["body"] = "1"
    if preview is not None:
        query["preview"] = str(preview)

    def decode(resp: HttpResponse) -> list[dict[str, Any]]:
        doc = _json_result(resp)
        if not isinstance(doc, list) or not all(isinstance(e, dict) for e in doc):
            raise ProtocolError(f"expected a list of peek entries, got {doc!r:.200}")
        return doc

    return HttpRequest("GET", f"/peek/{_q(queue)}" + (f"?{urlencode(query)}" if query else ""), decode)


def purge(queue: str) -> HttpRequest[int]:
    """``POST /purge/:name`` (pylmq's): drop every message, keep the queue and its own props;
    the count of records dropped."""

    def decode(resp: HttpResponse) -> int:
        _check(resp, errors.QueueNotFound)
        doc = _json(resp)
        if not isinstance(doc, dict) or isinstance(doc.get("purged"), bool) or not isinstance(doc.get("purged"), int):
            raise ProtocolError(f"expected {{'purged': n}}, got {doc!r:.200}")
        return int(doc["purged"])

    return HttpRequest("POST", f"/purge/{_q(queue)}", decode)


def requeue(dlq: str, n: int | None = None, to: str | None = None) -> HttpRequest[int]:
    """``POST /requeue/:dlq`` (pylmq's): move up to ``n`` dead letters back to their origin
    queue (or ``to``); the count moved."""
    query: dict[str, str] = {}
    if n is not None:
        query["n"] = str(n)
    if to is not None:
        query["to"] = to

    def decode(resp: HttpResponse) -> int:
        doc = _json_result(resp)
        if (
            not isinstance(doc, dict)
            or isinstance(doc.get("requeued"), bool)
            or not isinstance(doc.get("requeued"), int)
        ):
            raise ProtocolError(f"expected {{'requeued': n}}, got {doc!r:.200}")
        return int(doc["requeued"])

    return HttpRequest("POST", f"/requeue/{_q(dlq)}" + (f"?{urlencode(query)}" if query else ""), decode)


def _names(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(q, str) for q in value):
        raise ProtocolError(f"expected a list of queue names, got {value!r:.200}")
    return value


def virtual_queues() -> HttpRequest[dict[str, list[str]]]:
    """``GET /virtual`` (pylmq's): every virtual queue and the queues it binds."""

    def decode(resp: HttpResponse) -> dict[str, list[str]]:
        doc = _json_result(resp)
        if not isinstance(doc, dict):
            raise ProtocolError(f"expected {{name: [queues]}}, got {doc!r:.200}")
        return {str(k): _names(v) for k, v in doc.items()}

    return HttpRequest("GET", "/virtual", decode)


def get_virtual(name: str) -> HttpRequest[list[str]]:
    """``GET /virtual/:name``: the queues it binds (:class:`~pylmq.errors.NotFound` if none)."""

    def decode(resp: HttpResponse) -> list[str]:
        doc = _json_result(resp)
        return _names(doc.get("queues") if isinstance(doc, dict) else None)

    return HttpRequest("GET", f"/virtual/{_q(name)}", decode)


def set_virtual(name: str, queues: Sequence[str]) -> HttpRequest[None]:
    """``PUT /virtual/:name`` with ``{"queues": [...]}``: bind (or rebind) a virtual queue."""
    body = json.dumps({"queues": list(queues)}).encode()
    return HttpRequest("PUT", f"/virtual/{_q(name)}", _no_content(), body, dict(_JSON))


def delete_virtual(name: str) -> HttpRequest[None]:
    return HttpRequest("DELETE", f"/virtual/{_q(name)}", _no_content())


def push_all(regex: str, body: Body, content_type: str | None = None) -> HttpRequest[dict[str, str]]:
    data, headers = _body(body, content_type)

    def decode(resp: HttpResponse) -> dict[str, str]:
        _check(resp)
        doc = _json(resp)
        if not isinstance(doc, dict):
            raise ProtocolError(f"expected {{queue: {{'accum': ...}}}}, got {doc!r:.200}")
        return {str(name): _accum(result) for name, result in doc.items()}

    return HttpRequest("POST", "/messages?" + urlencode({"qre": regex}), decode, data, headers)


def _pull_query(timeout: float | None, cf: PullFormat) -> dict[str, str]:
    query: dict[str, str] = {}
    if timeout is not None:
        query["t"] = _seconds(timeout)
    if cf != "multipart":
        if cf != "msgpack":
            raise errors.BadRequest(f"cf must be 'multipart' or 'msgpack', got {cf!r}")
        query["cf"] = cf
    return query


def pull(queue: str, timeout: float | None = None, cf: PullFormat = "multipart") -> HttpRequest[Message | None]:
    query = _pull_query(timeout, cf)
    target = f"/messages/{_q(queue)}" + (f"?{urlencode(query)}" if query else "")
    return HttpRequest("GET", target, _message, server_wait=timeout)


def pull_any(regex: str, timeout: float | None = None, cf: PullFormat = "multipart") -> HttpRequest[Message | None]:
    query = {"qre": regex, **_pull_query(timeout, cf)}
    return HttpRequest("GET", "/messages?" + urlencode(query), _message, server_wait=timeout)


def push_many(queue: str, messages: Sequence[Body | tuple[str | None, Body]]) -> HttpRequest[int]:
    """pylmq's batch push: each message is a body or ``(content_type, body)``, a str body
    going as UTF-8 text as :func:`push` sends it; the answer is the count pushed."""
    entries: list[batch.BatchEntry] = []
    for m in messages:
        ct, body = m if isinstance(m, tuple) else (None, m)
        data, headers = _body(body, ct)
        entries.append((headers["Content-Type"], data) if headers else data)

    def decode(resp: HttpResponse) -> int:
        _check(resp)
        doc = _json(resp)
        if not isinstance(doc, dict) or not isinstance(doc.get("pushed"), int):
            raise ProtocolError(f"expected {{'pushed': n}}, got {doc!r:.200}")
        return int(doc["pushed"])

    target = f"/batch/{_q(queue)}"
    return HttpRequest("POST", target, decode, batch.encode_pushes(entries), {"Content-Type": "application/x-msgpack"})


def _pulled(doc: Mapping[str, Any]) -> Message:
    try:
        retry = doc["retry"]
        kind = doc["type"]
        left = None if retry == "infinity" else retry
        attempts = doc.get("attempts")
        dead = doc.get("dead")
        info = None if dead is None else DeadLetterInfo(
            dead["origin"], int(dead["failures"]), dead["last_delivery"], dead["reason"]
        )  # fmt: skip
        if kind == "compound":
            parts = tuple(Part({"content-type": ct}, body) for ct, body in doc["parts"])
            return Message(doc["queue"], doc["id"], "compound", left, "", b"", parts, attempts, info)
        if kind != "normal":
            raise ProtocolError(f"unknown message type {kind!r:.40}")
        return Message(doc["queue"], doc["id"], "normal", left, doc["content_type"], doc["body"], (), attempts, info)
    except (KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"bad message map in a pull-many answer: {e!r:.200}") from None


class PulledMessages(list[Message]):
    """The messages of a pull-many, and ``queue_size``: how many the queue held after it
    (waiting or in processing; ``None`` when the node did not say)."""

    queue_size: int | None = None


def pull_many(
    queue: str, count: int, timeout: float | None = None, holder: str | None = None
) -> HttpRequest[list[Message]]:
    """pylmq's batch pull: up to ``count`` messages (waiting up to ``timeout`` for the first);
    a compound message has its ``parts`` and an empty ``body`` and ``content_type``. A
    ``holder`` tag makes the node remember whom they went to (see :func:`claim`)."""
    query = {"n": str(count)}
    if timeout is not None:
        query["t"] = _seconds(timeout)
    if holder is not None:
        query["holder"] = holder

    def decode(resp: HttpResponse) -> list[Message]:
        _check(resp)
        try:
            docs = batch.decode_pulled(resp.body)
        except Exception as e:
            raise ProtocolError(f"bad pull-many answer: {e}") from None
        out = PulledMessages(_pulled(d) for d in docs)
        size = resp.headers.get("x-lmq-queue-size", "")
        out.queue_size = int(size) if size.isdigit() else None
        return out

    return HttpRequest("GET", f"/batch/{_q(queue)}?{urlencode(query)}", decode, server_wait=timeout)


def _reply(queue: str, msg_id: str, reply: str) -> HttpRequest[None]:
    target = f"/messages/{_q(queue)}/{_q(msg_id)}?reply={reply}"
    return HttpRequest("POST", target, _no_content(errors.MessageNotFound))


def ack(queue: str, msg_id: str) -> HttpRequest[None]:
    return _reply(queue, msg_id, "ack")


def nack(queue: str, msg_id: str) -> HttpRequest[None]:
    return _reply(queue, msg_id, "nack")


def ext(queue: str, msg_id: str) -> HttpRequest[None]:
    return _reply(queue, msg_id, "ext")


def _ids(doc: Any, key: str) -> tuple[str, ...]:
    ids = doc.get(key) if isinstance(doc, dict) else None
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ProtocolError(f"expected {{'ok': [ids], 'not_found': [ids]}}, got {doc!r:.200}")
    return tuple(ids)


def reply_many(queue: str, reply: ReplyMany, ids: Sequence[str]) -> HttpRequest[ReplyResult]:
    """``POST /replies/:name`` (a pylmq extension): ``reply`` for every id in one request."""

    def decode(resp: HttpResponse) -> ReplyResult:
        doc = _json_result(resp)
        return ReplyResult(_ids(doc, "ok"), _ids(doc, "not_found"))

    body = json.dumps({"reply": reply, "ids": list(ids)}).encode()
    return HttpRequest("POST", f"/replies/{_q(queue)}", decode, body, dict(_JSON))


def _claimed(doc: Any) -> Message:
    try:
        queue, msg_id, kind, retry, items = (doc[k] for k in ("queue", "id", "type", "retry", "items"))
        pairs = [(dict(h), bytes(b)) for h, b in items]
    except (KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"bad claimed message {doc!r:.200}") from e
    if kind not in ("normal", "compound") or not pairs or not isinstance(queue, str) or not isinstance(msg_id, str):
        raise ProtocolError(f"bad claimed message {doc!r:.200}")
    if retry != "infinity" and not isinstance(retry, int):
        raise ProtocolError(f"bad retry in claimed message {doc!r:.200}")
    left = None if retry == "infinity" else retry
    if kind == "normal":
        headers, body = pairs[0]
        return Message(queue, msg_id, "normal", left, headers.get("content-type", DEFAULT_CONTENT_TYPE), body)
    parts = tuple(Part(h, b) for h, b in pairs)
    raw = msgpack.packb([[h, b] for h, b in pairs], use_bin_type=True)
    return Message(queue, msg_id, "compound", left, compound.MSGPACK_CONTENT_TYPE, raw, parts)


def claim(queue: str, ids: Sequence[str] = (), holder: str | None = None) -> HttpRequest[ClaimResult[Message]]:
    """``POST /claims/:name`` (a pylmq extension): take messages back by id, or with
    ``holder`` (and no ids) all those pull-many calls with that tag were given."""
    if holder is not None and ids:
        raise errors.BadRequest("a claim names ids or a holder, not both")

    def decode(resp: HttpResponse) -> ClaimResult[Message]:
        _check(resp)
        try:
            doc = msgpack.unpackb(resp.body, raw=False)
        except Exception as e:
            raise ProtocolError(f"claim answer is not msgpack: {resp.body[:200]!r}") from e
        if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
            raise ProtocolError(f"expected {{'messages': [...], 'not_found': [...]}}, got {doc!r:.200}")
        later = _ids(doc, "later") if "later" in doc else ()  # a node before the size bound
        return ClaimResult(tuple(_claimed(m) for m in doc["messages"]), _ids(doc, "not_found"), later)

    body = json.dumps({"ids": list(ids)} if holder is None else {"holder": holder}).encode()
    return HttpRequest("POST", f"/claims/{_q(queue)}", decode, body, dict(_JSON))


def delete_queue(queue: str) -> HttpRequest[None]:
    return HttpRequest("DELETE", f"/queues/{_q(queue)}", _no_content(errors.QueueNotFound))


_JSON = {"Content-Type": "application/json"}


def get_props(queue: str) -> HttpRequest[dict[str, Any]]:
    def decode(resp: HttpResponse) -> dict[str, Any]:
        doc = _json_result(resp)
        if not isinstance(doc, dict):
            raise ProtocolError(f"expected a props object, got {doc!r:.200}")
        return doc

    return HttpRequest("GET", f"/properties/{_q(queue)}", decode)


def update_props(queue: str, props: Mapping[str, Any]) -> HttpRequest[None]:
    body = json.dumps(dict(props)).encode()
    return HttpRequest("PATCH", f"/properties/{_q(queue)}", _no_content(), body, dict(_JSON))


def reset_props(queue: str) -> HttpRequest[None]:
    return HttpRequest("DELETE", f"/properties/{_q(queue)}", _no_content())


def get_default_props() -> HttpRequest[DefaultProps]:
    def decode(resp: HttpResponse) -> DefaultProps:
        doc = _json_result(resp)
        ok = isinstance(doc, list) and all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], dict) for e in doc
        )
        if not ok:
            raise ProtocolError(f"expected [[regex, props], ...], got {doc!r:.200}")
        return [(e[0], e[1]) for e in doc]

    return HttpRequest("GET", "/properties", decode)


def set_default_props(defaults: Sequence[tuple[str, Mapping[str, Any]]]) -> HttpRequest[None]:
    body = json.dumps([[regex, dict(props)] for regex, props in defaults]).encode()
    return HttpRequest("PUT", "/properties", _no_content(), body, dict(_JSON))


def delete_default_props() -> HttpRequest[None]:
    return HttpRequest("DELETE", "/properties", _no_content())


def stats() -> HttpRequest[dict[str, Any]]:
    def decode(resp: HttpResponse) -> dict[str, Any]:
        doc = _json_result(resp)
        if not isinstance(doc, dict):
            raise ProtocolError(f"expected a stats object, got {doc!r:.200}")
        return doc

    return HttpRequest("GET", "/stats", decode)
