"""The MessagePack-RPC API as data: calls to make and decoders for their results, without I/O.

Framing (requests, responses, the streaming decoder) is :mod:`pylmq.wire.msgpack_rpc`, shared
with the server. This module knows LMQ's methods (docs/lmq-contract.md#messagepack-rpc-api): their parameters, what
their results look like and how long the server may hold each one.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pylmq.client._message import ClaimResult, MessageType, ReplyMany, ReplyResult, RpcMessage
from pylmq.client._options import DeadLetterInfo, PushOptions
from pylmq.errors import BadRequest, ProtocolError

__all__ = [
    "RpcCall",
    "claim",
    "delete",
    "delete_virtual",
    "done",
    "get_default_props",
    "get_virtual",
    "peek",
    "pull",
    "pull_any",
    "pull_many",
    "push",
    "push_all",
    "push_many",
    "push_with",
    "release",
    "reply_many",
    "requeue",
    "retain",
    "set_default_props",
    "set_virtual",
    "update_props",
    "virtual_queues",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RpcCall(Generic[T]):
    method: str
    params: list[Any]
    decode: Callable[[Any], T]
    server_wait: float | None = 0.0
    """How long the server may hold the call (a pull's timeout); ``None``: without limit."""


def _text(value: Any, what: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    raise ProtocolError(f"{what} must be a string, got {value!r:.100}")


def _ok(result: Any) -> None:
    if result not in ("ok", b"ok"):
        raise ProtocolError(f"expected 'ok', got {result!r:.200}")


def _message_id(value: Any) -> str:
    if isinstance(value, bytes) and len(value) == 16:
        return str(uuid.UUID(bytes=value))
    return _text(value, "message id")


def _retry(value: Any) -> int | None:
    if value is None or value in ("infinity", b"infinity"):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ProtocolError(f"retry must be an integer or 'infinity', got {value!r:.100}")


def _message(result: Any) -> RpcMessage | None:
    if result in ("empty", b"empty"):
        return None
    if not isinstance(result, Mapping):
        raise ProtocolError(f"expected a message map or 'empty', got {result!r:.200}")
    fields = {(k.decode() if isinstance(k, bytes) else k): v for k, v in result.items()}
    try:
        queue, msg_id, kind, retry, content = (fields[k] for k in ("queue", "id", "type", "retry", "content"))
    except KeyError as e:
        raise ProtocolError(f"message map without {e.args[0]!r}: {sorted(map(str, fields))}") from None
    kind_text = _text(kind, "message type")
    if kind_text not in ("normal", "package", "compound"):
        raise ProtocolError(f"unknown message type {kind_text!r}")
    message_type: MessageType = "normal" if kind_text == "normal" else "compound"
    if message_type == "compound" and isinstance(content, tuple):
        content = list(content)
    attempts, dead = fields.get("attempts"), fields.get("dead")
    return RpcMessage(
        _text(queue, "queue name"), _message_id(msg_id), message_type, _retry(retry), content,
        attempts if isinstance(attempts, int) and not isinstance(attempts, bool) else None,
        _dead(dead) if dead is not None else None,
    )  # fmt: skip


def _dead(value: Any) -> DeadLetterInfo:
    """The ``dead`` map of a delivered dead letter (pylmq's)."""
    if not isinstance(value, Mapping):
        raise ProtocolError(f"expected a dead-letter map, got {value!r:.200}")
    d = {_text(k, "key"): v for k, v in value.items()}
    try:
        last = d.get("last_delivery")
        return DeadLetterInfo(
            _text(d["origin"], "origin"), int(d["failures"]), None if last is None else float(last),
            _text(d["reason"], "reason"),
        )  # fmt: skip
    except (KeyError, TypeError, ValueError) as e:
        raise ProtocolError(f"bad dead-letter map {value!r:.200}") from e


def _timeout(timeout: float | None) -> list[Any]:
    if timeout is None:
        return []
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
        raise BadRequest(f"timeout must be a number >= 0 or None, got {timeout!r}")
    return [timeout]


def push(queue: str, content: Any) -> RpcCall[str]:
    return RpcCall("push", [queue, content], lambda r: _text(r, "push result"))


def push_with(queue: str, content: Any, options: PushOptions | None = None) -> RpcCall[dict[str, str]]:
    """``push`` with its third argument, the options map (pylmq's): ``{queue: id}``, one entry
    per queue pushed (a virtual queue pushes to each of its queues)."""

    def decode(result: Any) -> dict[str, str]:
        if isinstance(result, Mapping):
            fields = {_text(k, "key"): v for k, v in result.items()}
            if "id" in fields:
                return {queue: _message_id(fields["id"])}
            queues = fields.get("queues")
            if isinstance(queues, Mapping):
                return {_text(q, "queue name"): _message_id(i) for q, i in queues.items()}
        raise ProtocolError(f"expected {{'id': ...}} or {{'queues': {{...}}}}, got {result!r:.200}")

    return RpcCall("push", [queue, content, (options or PushOptions()).params()], decode)


def peek(
    queue: str, after: str | None = None, n: int | None = None, body: bool = False
) -> RpcCall[list[dict[str, Any]]]:
    """``peek(name, after, n, body)`` (pylmq's): records in order after the id ``after``, as
    maps (bodies as bytes when asked), without delivering them."""

    def decode(result: Any) -> list[dict[str, Any]]:
        if not isinstance(result, list | tuple) or not all(isinstance(e, Mapping) for e in result):
            raise ProtocolError(f"expected an array of peek maps, got {result!r:.200}")
        return [{_text(k, "key"): v for k, v in e.items()} for e in result]

    return RpcCall("peek", [queue, after, n, body], decode)


def _count(result: Any) -> int:
    if isinstance(result, bool) or not isinstance(result, int):
        raise ProtocolError(f"expected a count, got {result!r:.200}")
    return result


def requeue(dlq: str, n: int | None = None, to: str | None = None) -> RpcCall[int]:
    """``requeue(dlq, n, to)`` (pylmq's): dead letters moved back to their origin (or ``to``)."""
    return RpcCall("requeue", [dlq, n, to], _count)


def _names(value: Any) -> list[str]:
    if not isinstance(value, list | tuple):
        raise ProtocolError(f"expected an array of queue names, got {value!r:.200}")
    return [_text(q, "queue name") for q in value]


def virtual_queues() -> RpcCall[dict[str, list[str]]]:
    """``virtual_get()`` (pylmq's): every virtual queue and its queues."""

    def decode(result: Any) -> dict[str, list[str]]:
        if not isinstance(result, Mapping):
            raise ProtocolError(f"expected a map of virtual queues, got {result!r:.200}")
        return {_text(k, "name"): _names(v) for k, v in result.items()}

    return RpcCall("virtual_get", [], decode)


def get_virtual(name: str) -> RpcCall[list[str]]:
    return RpcCall("virtual_get", [name], _names)


def set_virtual(name: str, queues: Sequence[str]) -> RpcCall[None]:
    return RpcCall("virtual_set", [name, list(queues)], _ok)


def delete_virtual(name: str) -> RpcCall[None]:
    return RpcCall("virtual_delete", [name], _ok)


def push_all(regex: str, content: Any) -> RpcCall[str]:
    return RpcCall("push_all", [regex, content], lambda r: _text(r, "push_all result"))


def pull(queue: str, timeout: float | None = None) -> RpcCall[RpcMessage | None]:
    return RpcCall("pull", [queue, *_timeout(timeout)], _message, timeout)


def pull_any(regex: str, timeout: float | None = None) -> RpcCall[RpcMessage | None]:
    return RpcCall("pull_any", [regex, *_timeout(timeout)], _message, timeout)


def push_many(queue: str, contents: Sequence[Any]) -> RpcCall[int]:
    """pylmq's batch push: each content stored as :func:`push` stores it; the count pushed."""

    def decode(result: Any) -> int:
        if isinstance(result, bool) or not isinstance(result, int):
            raise ProtocolError(f"expected the count pushed, got {result!r:.200}")
        return result

    return RpcCall("push_many", [queue, list(contents)], decode)


def _messages(result: Any) -> list[RpcMessage]:
    if not isinstance(result, list | tuple):
        raise ProtocolError(f"expected an array of message maps, got {result!r:.200}")
    out = []
    for m in result:
        msg = _message(m)
        if msg is None:
            raise ProtocolError("'empty' inside a pull_many answer")
        out.append(msg)
    return out


def pull_many(
    queue: str, count: int, timeout: float | None = None, holder: str | None = None
) -> RpcCall[list[RpcMessage]]:
    """pylmq's batch pull: up to ``count`` messages, waiting up to ``timeout`` for the first;
    a ``holder`` tag makes the node remember whom they went to (see :func:`claim`)."""
    params: list[Any] = [queue, count, *_timeout(timeout)]
    if holder is not None:
        params += [None, holder] if timeout is None else [holder]
    return RpcCall("pull_many", params, _messages, timeout)


def done(queue: str, msg_id: str) -> RpcCall[None]:
    return RpcCall("done", [queue, msg_id], _ok)


def retain(queue: str, msg_id: str) -> RpcCall[None]:
    return RpcCall("retain", [queue, msg_id], _ok)


def release(queue: str, msg_id: str) -> RpcCall[None]:
    return RpcCall("release", [queue, msg_id], _ok)


def _ids(result: Any, key: str) -> tuple[str, ...]:
    ids = None
    if isinstance(result, Mapping):
        ids = result.get(key, result.get(key.encode()))
    if not isinstance(ids, list | tuple):
        raise ProtocolError(f"expected {{'ok': [ids], 'not_found': [ids]}}, got {result!r:.200}")
    return tuple(_message_id(i) for i in ids)


def _reply_result(result: Any) -> ReplyResult:
    return ReplyResult(_ids(result, "ok"), _ids(result, "not_found"))


def reply_many(queue: str, reply: ReplyMany, ids: Sequence[str]) -> RpcCall[ReplyResult]:
    """``reply_many`` (a pylmq extension): ``reply`` for every id in one call."""
    return RpcCall("reply_many", [queue, reply, list(ids)], _reply_result)


def _claim_result(result: Any) -> ClaimResult[RpcMessage]:
    messages = result.get("messages", result.get(b"messages")) if isinstance(result, Mapping) else None
    if not isinstance(messages, list | tuple):
        raise ProtocolError(f"expected {{'messages': [...], 'not_found': [...]}}, got {result!r:.200}")
    got = [_message(m) for m in messages]
    has_later = "later" in result or b"later" in result  # not from a node before the size bound
    later = _ids(result, "later") if has_later else ()
    return ClaimResult(tuple(m for m in got if m is not None), _ids(result, "not_found"), later)


def claim(queue: str, ids: Sequence[str] = (), holder: str | None = None) -> RpcCall[ClaimResult[RpcMessage]]:
    """``claim`` (a pylmq extension): take messages back by id, or with ``holder`` (and no
    ids) all those pull-many calls with that tag were given."""
    if holder is not None:
        if ids:
            raise BadRequest("a claim names ids or a holder, not both")
        return RpcCall("claim", [queue, {"holder": holder}], _claim_result)
    return RpcCall("claim", [queue, list(ids)], _claim_result)


def delete(queue: str) -> RpcCall[None]:
    return RpcCall("delete", [queue], _ok)


def update_props(queue: str, props: Mapping[str, Any] | None = None) -> RpcCall[None]:
    return RpcCall("update_props", [queue] if props is None else [queue, dict(props)], _ok)


def set_default_props(defaults: Sequence[tuple[str, Mapping[str, Any]]]) -> RpcCall[None]:
    return RpcCall("set_default_props", [[[regex, dict(props)] for regex, props in defaults]], _ok)


def _default_list(result: Any) -> list[tuple[str, dict[str, Any]]]:
    ok = isinstance(result, list | tuple) and all(
        isinstance(e, list | tuple) and len(e) == 2 and isinstance(e[1], Mapping) for e in result
    )
    if not ok:
        raise ProtocolError(f"expected [[regexp, props], ...], got {result!r:.200}")
    return [(_text(regex, "regexp"), {_text(k, "property"): v for k, v in props.items()}) for regex, props in result]


def get_default_props() -> RpcCall[list[tuple[str, dict[str, Any]]]]:
    return RpcCall("get_default_props", [], _default_list)
