"""The MessagePack-RPC API (docs/lmq-contract.md#messagepack-rpc-api): parse the arguments, call the
manager, encode the result. The server that runs them is :mod:`pylmq.api.rpc_server`.

Methods, as LMQ's ``lmq_api`` (all names and ids are strings; timeouts are seconds, float ok):

- ``push(name, content)``: ``content`` is re-packed to msgpack and stored with content-type
  ``application/x-msgpack``; replies ``"ok"``, ``"packing started"`` or ``"packed"``.
- ``pull(name[, timeout])``, ``pull_any(regexp[, timeout])``: a map ``{queue, id, type, retry,
  content}`` or ``"empty"``. No timeout (or nil, or ``"infinity"``) waits forever; 0 answers at
  once. ``type`` is ``"normal"`` or ``"package"`` (compound: ``content`` is the array of pushed
  items); ``retry`` is an integer or ``"infinity"``.
- ``push_all(regexp, content)``: to every existing matching queue, stored as ``push`` does; ``"ok"``.
- ``done``/``retain``/``release(name, id)``: ``"ok"``.
- ``reply_many(name, reply, [id, ...])`` (a pylmq extension): ``reply`` is ``"ack"``, ``"nack"``
  or ``"ext"`` for every id, with one group commit; a map ``{"ok": [ids answered], "not_found":
  [ids that name no message in processing]}``, ids as given. At most 10,000 ids.
- ``claim(name, [id, ...])`` (a pylmq extension): take messages back by the id of their last
  delivery (in processing, or available again under that id: nacked, or past its deadline and
  not pulled since); each is delivered again with the same id and a new deadline (one not held
  spends a retry, see docs/spark.md). A map ``{"messages": [pull maps], "not_found": [ids],
  "later": [ids left alone once the answer reached 16 MiB]}``. At most 10,000 ids.
  ``claim(name, {"holder": tag})`` takes back, likewise, every message a ``pull_many`` with
  that holder tag was given and that is still claimable (``not_found`` is empty).
- ``delete(name)``: ``"ok"``, also for a queue that does not exist (as LMQ).
- pylmq's extensions (LMQ has none): ``push_many(name, [content, ...])`` pushes each content as
  ``push`` does, with one store commit for all, and replies the count; ``pull_many(name, count[,
  timeout[, holder]])`` replies an array of up to ``count`` pull maps (empty when none came
  within ``timeout``); ``holder``, a tag of 1 to 64 printable ASCII characters, makes the node
  remember whom they went to (see ``claim``). At most 10,000 messages a call (and 16 MiB of pulled payload).
- ``update_props(name, props)`` merges into the queue's own properties, ``update_props(name)``
  resets them; ``set_default_props([[regexp, props], ...])``; ``get_default_props()``. Props keys
  are ``pack`` (LMQ's accum; ``accum`` is accepted too), ``retry``, ``timeout``, in seconds.

pylmq's extensions for per-message options, dead letters, peek and virtual queues
(docs/http-api-extensions.md; an LMQ call without them is answered as LMQ answers it):

- ``push(name, content, options)``: ``options`` is a map of ``delay``, ``ttl``, ``retry``,
  ``interval``, ``priority``, ``once`` (seconds from now); the reply is then ``{"id": uuid}``,
  or ``{"queues": {queue: uuid}}`` for a virtual queue. An empty map is a plain push that
  answers its id.
- A pull map of a record with pylmq's fields adds ``attempts``, and for a dead letter ``dead``
  (``{origin, failures, last_delivery, reason}``); LMQ's records get LMQ's five keys.
- ``peek(name[, after[, n[, body]]])``: an array of peek maps (:mod:`pylmq.api.peek`), bodies
  as bin when asked, until they reach 16 MiB as a batch pull (a shorter page whose sizes add
  up to that was cut: go on ``after`` its last id). ``requeue(dlq[, n[, to]])``: the count
  moved. ``virtual_get([name])``: ``{name: [queues]}`` or one name's queues;
  ``virtual_set(name, [queues])`` and ``virtual_delete(name)``: ``"ok"``.

Content on pull: an item stored as ``application/x-msgpack`` is sent back as the msgpack value it
holds (byte for byte what was pushed over RPC, so top-level true/false/nil round-trip); any other
item (pushed over HTTP with another content-type, or x-msgpack bytes that do not decode) is sent
as its body in the old spec's raw type, as LMQ's server packs binaries (current clients read it as
str), or as bin when the body is not UTF-8 (no current client could decode it as str).

Errors go in the error slot as ``[reason, detail]`` (see :mod:`pylmq.wire.msgpack_rpc`), e.g.
``["not_found", "..."]`` for an unknown or expired id, ``["queue_not_found", ...]``,
``["invalid_regex", ...]``, ``["invalid_props", ...]``, ``["bad_request", ...]`` for wrong
argument types or counts, ``["unknown_method", ...]``, ``["bad_message", ...]`` for a frame that
is msgpack but not a request, ``["too_large", ...]``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import msgpack

from pylmq.api._putback import Deliveries
from pylmq.api.options import push_options
from pylmq.api.peek import DEFAULT_PEEK, MAX_PEEK, dead_fields, raw_page
from pylmq.core.manager import MAX_BATCH, QueueManager, validate_name
from pylmq.core.message import Item, PushOptions, StoredMessageType, content_type_of, make_item, uuid_text
from pylmq.core.props import RawProps, export_props, parse_default_list, parse_props
from pylmq.core.queue import Delivery
from pylmq.errors import BadRequest, InvalidQueueName, InvalidRegex, NotFound, QueueNotFound
from pylmq.wire.msgpack_rpc import pack

__all__ = ["METHODS", "OUTCOME", "Handler", "Reply", "arity_error", "encode_deliveries", "encode_delivery", "outcome"]

MSGPACK_CONTENT_TYPE: Final = b"application/x-msgpack"

_OK: Final = pack("ok")
_EMPTY: Final = pack("empty")
_PUSH_REPLY: Final = {"no": _OK, "new": pack("packing started"), "yes": pack("packed")}
OUTCOME: Final = {_OK: "ok", _EMPTY: "empty", _PUSH_REPLY["new"]: "packing started", _PUSH_REPLY["yes"]: "packed"}
_K_QUEUE, _K_ID, _K_TYPE, _K_RETRY, _K_CONTENT = (pack(k) for k in ("queue", "id", "type", "retry", "content"))
_T_NORMAL: Final = pack("normal")
_T_PACKAGE: Final = pack("package")
_INFINITY: Final = pack("infinity")

Reply = bytes | Deliveries
"""What a method returns: its encoded result, or the message(s) to deliver."""

Handler = Callable[[QueueManager, Sequence[Any]], Awaitable[Reply]]


# -- arguments ------------------------------------------------------------------------------------


def _name(x: Any) -> str:
    if type(x) is not str and type(x) is not bytes:
        raise InvalidQueueName(f"queue name must be a string, got {type(x).__name__}")
    name = validate_name(x)
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidQueueName("queue name is not valid UTF-8") from None
    return name


def _regex(x: Any) -> str | bytes:
    if type(x) is not str and type(x) is not bytes:
        raise InvalidRegex(f"regexp must be a string, got {type(x).__name__}")
    return x


def _id(x: Any) -> str | bytes:
    if type(x) is not str and type(x) is not bytes:
        raise BadRequest(f"message id must be a string, got {type(x).__name__}")
    return x


def _timeout(params: Sequence[Any]) -> float | None:
    """Seconds to wait (LMQ's RPC pull takes seconds too); None waits forever."""
    if len(params) < 2:
        return None
    t = params[1]
    if t is None or t in ("infinity", b"infinity"):
        return None
    if isinstance(t, bool) or not isinstance(t, int | float) or math.isnan(t) or t < 0:
        raise BadRequest(f"timeout must be a number of seconds >= 0 or nil, got {t!r}")
    return None if math.isinf(t) else float(t)


def _props(x: Any) -> Any:
    """LMQ's RPC accepts ``accum`` as well as ``pack``; parse_props knows one name."""
    if isinstance(x, dict):
        for alias in ("accum", b"accum"):
            if alias in x and "pack" not in x and b"pack" not in x:
                x = dict(x)
                x["pack"] = x.pop(alias)
    return x


def _content(x: Any) -> bytes:
    try:
        return pack(x)
    except (TypeError, ValueError, OverflowError) as e:
        raise BadRequest(f"content cannot be stored as msgpack: {e}") from None


# -- results ---------------------------------------------------------------------------------------


def _is_msgpack(item: Item) -> bool:
    ct = content_type_of(item)
    if ct == MSGPACK_CONTENT_TYPE:
        return True
    return ct.split(b";", 1)[0].strip().lower() == MSGPACK_CONTENT_TYPE


def _raw(body: bytes) -> bytes:
    """``body`` as LMQ's RPC server packs every binary: msgpack-erlang's old-spec raw type
    (fixraw, raw16, raw32), which current clients read as str. Only for valid UTF-8: other bytes
    go as bin, since a current client could not decode a str holding them."""
    if not body.isascii():
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return pack(body)
    n = len(body)
    if n < 32:
        return bytes((0xA0 | n,)) + body
    if n < 0x10000:
        return b"\xda" + n.to_bytes(2, "big") + body
    return b"\xdb" + n.to_bytes(4, "big") + body


def _item_value(item: Item) -> bytes:
    """The item as a msgpack value: its own bytes when it holds exactly one msgpack value."""
    body = item[1]
    if _is_msgpack(item):
        try:
            # Only checks that the bytes are one whole value before splicing them into a reply.
            msgpack.unpackb(body, raw=False, use_list=False, strict_map_key=False, unicode_errors="surrogateescape")
        except Exception:
            return _raw(body)
        return body
    return _raw(body)


def _array_header(n: int) -> bytes:
    if n < 16:
        return bytes((0x90 | n,))
    if n < 0x10000:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


_K_ATTEMPTS, _K_DEAD = pack("attempts"), pack("dead")


def encode_delivery(d: Delivery) -> bytes:
    """The pull reply map ``{queue, id, type, retry, content}`` (keys in LMQ's order), then
    ``attempts`` and ``dead`` for a record that has pylmq's fields."""
    m = d.message
    compound = m.type is StoredMessageType.COMPOUND
    ext = m.ext
    extra = b""
    if ext is not None:
        extra = _K_ATTEMPTS + pack(ext.attempts)
        if ext.dead is not None:
            extra += _K_DEAD + pack(dead_fields(ext.dead))
    parts = [
        b"\x85" if ext is None else b"\x86" if ext.dead is None else b"\x87",
        _K_QUEUE,
        pack(d.queue),
        _K_ID,
        pack(uuid_text(m.uuid)),
        _K_TYPE,
        _T_PACKAGE if compound else _T_NORMAL,
        _K_RETRY,
        _INFINITY if m.retry is None else pack(m.retry),
        _K_CONTENT,
    ]
    if compound:
        items = m.items()
        parts.append(_array_header(len(items)))
        parts.extend(_item_value(i) for i in items)
    else:
        parts.append(_item_value(m.items()[0]))
    parts.append(extra)
    return b"".join(parts)


def encode_deliveries(reply: Deliveries) -> bytes:
    """A pull's map, or a pull-many's array of them (empty when none came)."""
    if isinstance(reply, tuple):
        return _array_header(len(reply)) + b"".join(encode_delivery(d) for d in reply)
    return encode_delivery(reply)


def outcome(reply: Deliveries) -> str:
    if isinstance(reply, tuple):
        return f"delivered {len(reply)} messages"
    return "delivered " + uuid_text(reply.message.uuid)


# -- methods -----------------------------------------------------------------------------------------


def _options(m: QueueManager, method: str, x: Any) -> PushOptions | None:
    """The options map of a push (checked before anything is pushed); None when it names none."""
    if not isinstance(x, dict):
        detail = f"{method}'s third argument is a map of delay, ttl, retry, interval, priority, once; got {x!r:.60}"
        raise BadRequest(detail)
    return push_options(x, m.clock.now())


async def _push(m: QueueManager, p: Sequence[Any]) -> Reply:
    name = _name(p[0])
    if len(p) < 3:
        return _PUSH_REPLY[await m.push(name, make_item(_content(p[1]), MSGPACK_CONTENT_TYPE))]
    options = _options(m, "push", p[2])
    pushed = await m.push_with(name, make_item(_content(p[1]), MSGPACK_CONTENT_TYPE), options)
    if len(pushed) == 1 and pushed[0][0] == name:
        return pack({"id": uuid_text(pushed[0][1])})
    return pack({"queues": {q: uuid_text(u) for q, u in pushed}})  # a virtual queue: each queue's id


async def _pull(m: QueueManager, p: Sequence[Any]) -> Reply:
    name = _name(p[0])
    d = await m.pull(name, _timeout(p))
    return _EMPTY if d is None else d


async def _push_all(m: QueueManager, p: Sequence[Any]) -> Reply:
    regex = _regex(p[0])
    await m.push_all(regex, make_item(_content(p[1]), MSGPACK_CONTENT_TYPE))
    return _OK


async def _pull_any(m: QueueManager, p: Sequence[Any]) -> Reply:
    regex = _regex(p[0])
    d = await m.pull_any(regex, _timeout(p))
    return _EMPTY if d is None else d


def _batch(x: Any) -> list[Any]:
    if not isinstance(x, list | tuple):
        raise BadRequest(f"push_many takes an array of contents, got {type(x).__name__}")
    if len(x) > MAX_BATCH:
        raise BadRequest(f"a batch holds at most {MAX_BATCH} messages, got {len(x)}")
    return list(x)


def _count(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= MAX_BATCH:
        raise BadRequest(f"count must be a whole number of messages from 1 to {MAX_BATCH}, got {x!r:.40}")
    return x


async def _push_many(m: QueueManager, p: Sequence[Any]) -> Reply:
    name = _name(p[0])
    items = [make_item(_content(c), MSGPACK_CONTENT_TYPE) for c in _batch(p[1])]
    return pack(len(await m.push_many(name, items)))


async def _pull_many(m: QueueManager, p: Sequence[Any]) -> Reply:
    name, count = _name(p[0]), _count(p[1])
    holder = _text(p[3]) if len(p) > 3 and p[3] is not None else None
    return tuple(await m.pull_many(name, count, _timeout(p[1:]), holder=holder))


def _text(x: Any) -> Any:
    """A msgpack raw as text (old clients send strings as raw bytes); else as it came, for
    the manager to refuse."""
    return x.decode("latin-1") if type(x) is bytes else x


async def _done(m: QueueManager, p: Sequence[Any]) -> Reply:
    await m.ack(_name(p[0]), _id(p[1]))
    return _OK


async def _retain(m: QueueManager, p: Sequence[Any]) -> Reply:
    await m.ext(_name(p[0]), _id(p[1]))
    return _OK


async def _release(m: QueueManager, p: Sequence[Any]) -> Reply:
    await m.nack(_name(p[0]), _id(p[1]))
    return _OK


async def _reply_many(m: QueueManager, p: Sequence[Any]) -> Reply:
    name, reply, ids = _name(p[0]), p[1], p[2]
    if type(reply) is bytes:
        reply = reply.decode("utf-8", "replace")
    if type(reply) is not str:
        raise BadRequest(f"reply must be ack, nack or ext, got {type(reply).__name__}")
    if not isinstance(ids, list | tuple):
        raise BadRequest(f"ids must be an array of message ids, got {type(ids).__name__}")
    outcome = await m.reply_many(name, reply, [_id(i) for i in ids])
    return pack({"ok": outcome.ok, "not_found": outcome.not_found})


_K_MESSAGES, _K_NOT_FOUND, _K_LATER = pack("messages"), pack("not_found"), pack("later")


async def _claim(m: QueueManager, p: Sequence[Any]) -> Reply:
    name, ids = _name(p[0]), p[1]
    if isinstance(ids, dict):
        keys = [_text(k) for k in ids]
        if keys != ["holder"]:
            raise BadRequest('claim takes an array of message ids or a map {"holder": tag}')
        outcome = await m.claim_holder(name, _text(next(iter(ids.values()))))
    elif not isinstance(ids, list | tuple):
        raise BadRequest(f"ids must be an array of message ids, got {type(ids).__name__}")
    else:
        outcome = await m.claim(name, [_id(i) for i in ids])
    messages = [encode_delivery(d) for d in outcome.delivered]
    return b"".join(
        [
            b"\x83",
            _K_MESSAGES,
            _array_header(len(messages)),
            *messages,
            _K_NOT_FOUND,
            pack(outcome.not_found),
            _K_LATER,
            pack(outcome.later),
        ]
    )


async def _delete(m: QueueManager, p: Sequence[Any]) -> Reply:
    # LMQ answers "ok" whether or not the queue existed.
    with contextlib.suppress(QueueNotFound):
        await m.delete(_name(p[0]))
    return _OK


async def _update_props(m: QueueManager, p: Sequence[Any]) -> Reply:
    name = _name(p[0])
    raw = parse_props(_props(p[1]), accum_key="pack") if len(p) > 1 else None
    await m.update_props(name, raw)
    return _OK


async def _set_default_props(m: QueueManager, p: Sequence[Any]) -> Reply:
    obj = p[0]
    if isinstance(obj, tuple):
        obj = list(obj)
    if isinstance(obj, list):
        obj = [[e[0], _props(e[1])] if isinstance(e, list | tuple) and len(e) == 2 else e for e in obj]
    await m.set_default_props(parse_default_list(obj, accum_key="pack"))
    return _OK


def _export_rpc_props(raw: RawProps) -> dict[str, Any]:
    out = export_props(raw, accum_key="pack")
    if "pack" in out:
        out["pack"] = float(out["pack"])  # LMQ divides milliseconds by 1000: always a float
    return out


async def _get_default_props(m: QueueManager, p: Sequence[Any]) -> Reply:
    return pack([[regex, _export_rpc_props(raw)] for regex, raw in m.default_props()])


def _optional(p: Sequence[Any], i: int) -> Any:
    return p[i] if len(p) > i else None


def _limit(x: Any, default: int, top: int) -> int:
    if x is None:
        return default
    if isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= top:
        raise BadRequest(f"n must be a whole number of messages from 1 to {top}, got {x!r:.40}")
    return x


async def _peek(m: QueueManager, p: Sequence[Any]) -> Reply:
    name, after = _name(p[0]), _optional(p, 1)
    if after is not None:
        after = _text(_id(after))
    count, body = _limit(_optional(p, 2), DEFAULT_PEEK, MAX_PEEK), _optional(p, 3)
    if body is not None and not isinstance(body, bool):
        raise BadRequest(f"body must be true, false or nil, got {body!r:.40}")
    records = await m.peek(name, after, count)
    return pack(raw_page(records, body=bool(body)))


async def _requeue(m: QueueManager, p: Sequence[Any]) -> Reply:
    name, count, to = _name(p[0]), _limit(_optional(p, 1), DEFAULT_PEEK, MAX_BATCH), _optional(p, 2)
    return pack(await m.requeue(name, count, None if to is None else _name(to)))


async def _virtual_get(m: QueueManager, p: Sequence[Any]) -> Reply:
    if not p:
        return pack(dict(sorted(m.virtual_queues().items())))
    name = _name(p[0])
    members = m.virtual_members(name)
    if members is None:
        raise NotFound(f"no virtual queue named {name!r}")
    return pack(members)


async def _virtual_set(m: QueueManager, p: Sequence[Any]) -> Reply:
    name, queues = _name(p[0]), p[1]
    if not isinstance(queues, list | tuple):
        raise BadRequest(f"virtual_set takes an array of queue names, got {type(queues).__name__}")
    await m.set_virtual(name, [_text(q) for q in queues])
    return _OK


async def _virtual_delete(m: QueueManager, p: Sequence[Any]) -> Reply:
    name = _name(p[0])
    if not await m.delete_virtual(name):
        raise NotFound(f"no virtual queue named {name!r}")
    return _OK


# name -> (handler, min args, max args, waits for a message)
METHODS: Final[dict[str, tuple[Handler, int, int, bool]]] = {
    "push": (_push, 2, 3, False),
    "pull": (_pull, 1, 2, True),
    "push_all": (_push_all, 2, 2, False),
    "pull_any": (_pull_any, 1, 2, True),
    "done": (_done, 2, 2, False),
    "retain": (_retain, 2, 2, False),
    "release": (_release, 2, 2, False),
    "reply_many": (_reply_many, 3, 3, False),
    "claim": (_claim, 2, 2, False),
    "delete": (_delete, 1, 1, False),
    "update_props": (_update_props, 1, 2, False),
    "set_default_props": (_set_default_props, 1, 1, False),
    "get_default_props": (_get_default_props, 0, 0, False),
    # pylmq's extensions: LMQ has no batch forms.
    "push_many": (_push_many, 2, 2, False),
    "pull_many": (_pull_many, 2, 4, True),
    # pylmq's extensions: peek, dead letters, virtual queues (docs/http-api-extensions.md).
    "peek": (_peek, 1, 4, False),
    "requeue": (_requeue, 1, 3, False),
    "virtual_get": (_virtual_get, 0, 1, False),
    "virtual_set": (_virtual_set, 2, 2, False),
    "virtual_delete": (_virtual_delete, 1, 1, False),
}


def arity_error(method: str, lo: int, hi: int, n: int) -> BadRequest:
    want = str(lo) if lo == hi else f"{lo} or {hi}"
    return BadRequest(f"{method} takes {want} argument{'s' if hi != 1 else ''}, got {n}")
