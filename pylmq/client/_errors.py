"""Errors a node sends back, turned into the one pylmq exception tree.

A pylmq node names every error by the ``reason`` of a :mod:`pylmq.errors` class (JSON body
``{"error": reason, "detail": ...}`` over HTTP, the error slot over MessagePack-RPC), so the
reason picks the class. An Erlang LMQ node sends no reason over HTTP; there the status picks
it, with the operation's own idea of what a 404 means (unknown message vs unknown queue).
"""

from __future__ import annotations

import json
from typing import Any

from pylmq import errors
from pylmq.errors import LMQError
from pylmq.wire.msgpack_rpc import error_parts

__all__ = ["error_from_http", "error_from_rpc"]


def _reason_table() -> dict[str, type[LMQError]]:
    # Breadth first: a subclass that reuses its parent's reason (MessageNotFound's
    # "not_found") wins, since it is the more precise statement.
    table: dict[str, type[LMQError]] = {}
    level: list[type[LMQError]] = [LMQError]
    while level:
        nxt: list[type[LMQError]] = []
        for cls in level:
            if cls.__module__ == errors.__name__:
                table[cls.reason] = cls
            nxt.extend(cls.__subclasses__())
        level = nxt
    return table


_BY_REASON = _reason_table()


def _make(cls: type[LMQError], detail: str, reason: str | None = None) -> LMQError:
    try:
        err = cls(detail)
    except TypeError:  # a class with its own constructor (ConfigSyntaxError): keep the base
        err = LMQError(detail)
        err.reason = cls.reason
    if reason is not None and reason != err.reason:
        err.reason = reason
    return err


def error_from_rpc(error: Any) -> LMQError:
    """The exception for a MessagePack-RPC error slot (``[reason, detail]`` or a bare reason)."""
    reason, detail = error_parts(error)
    cls = _BY_REASON.get(reason)
    if cls is None:
        return _make(LMQError, detail, reason)
    return _make(cls, detail)


def _status_class(status: int, not_found: type[LMQError]) -> type[LMQError]:
    if status == 404:
        return not_found
    if 400 <= status < 500:
        return errors.BadRequest
    if status == 503:
        return errors.StoreError
    return LMQError


def error_from_http(status: int, body: bytes, not_found: type[LMQError] = errors.NotFound) -> LMQError:
    """The exception for a non-2xx answer: the JSON reason when there is one, else the status."""
    reason: str | None = None
    detail = ""
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), str):
        reason = doc["error"]
        detail = str(doc.get("detail", reason))
    elif body:
        detail = body[:500].decode("utf-8", "replace")
    detail = f"HTTP {status}: {detail}" if detail else f"HTTP {status}"
    cls = _BY_REASON.get(reason) if reason is not None else None
    if cls is not None and reason == errors.NotFound.reason:
        cls = not_found  # the plain "not_found" means what is missing for this operation
    if cls is None or not _status_agrees(cls, status):
        err = _make(_status_class(status, not_found), detail)
        if reason is not None:
            err.reason = reason
        return err
    return _make(cls, detail)


def _status_agrees(cls: type[LMQError], status: int) -> bool:
    # A reason whose class maps to another status is not trusted to pick the class.
    return cls.http_status == status or (cls.http_status >= 500 and status >= 500)
