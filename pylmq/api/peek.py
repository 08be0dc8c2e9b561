"""What a peek shows of a record, and what a delivery adds about its attempts and dead-letter
origin: the one view the HTTP API (JSON), the MessagePack-RPC API and ``lmq-admin`` share.

A peek entry (docs/http-api-extensions.md#peek)::

    {"id": uuid, "state": "available" | "processing" | "accum", "retry": n | "infinity",
     "attempts": n, "ts": unix seconds (not-before when available, deadline when processing),
     "expires": unix seconds | null, "priority": 0..255, "size": bytes,
     "type": "normal" | "compound", "content_type": text | null (compound),
     "dead": {"origin", "failures", "last_delivery", "reason"}     only for a dead letter
     "body": text | "body_base64": base64                           only when asked (normal)
     "parts": [{"content_type", "body" | "body_base64"}, ...]       only when asked (compound)}

Bodies that are UTF-8 are shown as text, others as base64 under another key, so a reader never
has to guess which it got. A preview (HTTP ``preview=N``) shows the first N bytes of each body
(or part), with ``"truncated": true`` where bytes were left out; a text body cut inside a
character ends before that character, so that it stays text.
"""

from __future__ import annotations

import base64
import codecs
from collections.abc import Callable
from typing import Any, Final

from pylmq.core.message import DeadLetter, Item, StoredMessage, StoredMessageType, content_type_of, uuid_text

__all__ = ["DEFAULT_PEEK", "MAX_PEEK", "MAX_PREVIEW", "dead_fields", "peek_entry"]

DEFAULT_PEEK: Final = 100
"""Records a peek lists when it names no count."""
MAX_PEEK: Final = 1000
"""Most records one peek lists: a page, not a dump (walk on with ``after``)."""
MAX_PREVIEW: Final = 1024 * 1024
"""Largest preview of one body: enough to show any message a person reads whole."""


def dead_fields(dead: DeadLetter) -> dict[str, Any]:
    """A dead letter's provenance: origin queue, failed deliveries, the last one's time, why."""
    return {"origin": dead.origin, "failures": dead.failures, "last_delivery": dead.last_at, "reason": dead.reason}


def _text_body(body: bytes, into: dict[str, Any]) -> None:
    try:
        into["body"] = body.decode("utf-8")
    except UnicodeDecodeError:
        into["body_base64"] = base64.b64encode(body).decode("ascii")


def _raw_body(body: bytes, into: dict[str, Any]) -> None:
    into["body"] = body


def _previewer(limit: int) -> Callable[[bytes, dict[str, Any]], None]:
    """Puts the first ``limit`` bytes of a body, as text or base64, and ``truncated``."""

    def put(body: bytes, into: dict[str, Any]) -> None:
        if len(body) <= limit:
            _text_body(body, into)
            into["truncated"] = False
            return
        cut = body[:limit]
        try:
            # Not final: an incomplete character at the cut is held back, not an error; bytes
            # that are no UTF-8 at all still are, and the preview goes as base64.
            into["body"] = codecs.getincrementaldecoder("utf-8")().decode(cut, final=False)
        except UnicodeDecodeError:
            into["body_base64"] = base64.b64encode(cut).decode("ascii")
        into["truncated"] = True

    return put


def _part(item: Item, put_body: Callable[[bytes, dict[str, Any]], None]) -> dict[str, Any]:
    part: dict[str, Any] = {"content_type": content_type_of(item).decode("latin-1")}
    put_body(item[1], part)
    return part


def peek_entry(
    msg: StoredMessage, *, body: bool = False, raw: bool = False, preview: int | None = None
) -> dict[str, Any]:
    """The entry of one record; with ``body``, its body (or parts), as text or base64, or as
    the bytes themselves with ``raw`` (MessagePack carries bytes); with ``preview``, only the
    first that many bytes of each (as text or base64), and ``truncated``."""
    ext = msg.ext
    compound = msg.type is StoredMessageType.COMPOUND
    entry: dict[str, Any] = {
        "id": uuid_text(msg.uuid),
        "state": msg.state.value,
        "retry": "infinity" if msg.retry is None else msg.retry,
        "attempts": ext.attempts if ext is not None else 0,
        "ts": msg.ts,
        "expires": ext.expires if ext is not None else None,
        "priority": ext.priority if ext is not None else 0,
        "size": msg.nbytes(),
        "type": msg.type.value,
        "content_type": None if compound else content_type_of(msg.items()[0]).decode("latin-1"),
    }
    if ext is not None and ext.dead is not None:
        entry["dead"] = dead_fields(ext.dead)
    if body:
        put_body = _raw_body if raw else (_text_body if preview is None else _previewer(preview))
        if compound:
            entry["parts"] = [_part(item, put_body) for item in msg.items()]
        else:
            put_body(msg.items()[0][1], entry)
    return entry
