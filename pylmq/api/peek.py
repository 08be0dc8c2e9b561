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

A page is bounded in bytes like a batch pull (:data:`MAX_PEEK_BYTES`, 16 MiB):
:func:`json_page` stops before the entry that would take the JSON past it (a first entry that
alone would is shown as a preview, ``"truncated": true``) and says it cut the page;
:func:`raw_page` (MessagePack and Erlang terms carry bytes as they are) stops, as a pull does,
once the shown bodies reach it, so a page shorter than ``n`` whose ``size`` fields add up to
at least :data:`MAX_PEEK_BYTES` was cut there. Either way the next page starts ``after`` its last id.
"""

from __future__ import annotations

import base64
import codecs
import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final

from pylmq.core.manager import MAX_BATCH_BYTES
from pylmq.core.message import DeadLetter, Item, StoredMessage, StoredMessageType, content_type_of, uuid_text

__all__ = [
    "DEFAULT_PEEK",
    "MAX_PEEK",
    "MAX_PEEK_BYTES",
    "MAX_PREVIEW",
    "dead_fields",
    "json_page",
    "peek_entry",
    "raw_page",
]

DEFAULT_PEEK: Final = 100
"""Records a peek lists when it names no count."""
MAX_PEEK: Final = 1000
"""Most records one peek lists: a page, not a dump (walk on with ``after``)."""
MAX_PREVIEW: Final = 1024 * 1024
"""Largest preview of one body: enough to show any message a person reads whole."""
MAX_PEEK_BYTES: int = MAX_BATCH_BYTES
"""Bytes of one peek page (see the module's docstring): no more than a batch pull answers."""


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


_dumps = partial(json.dumps, separators=(",", ":"))
_ENTRY_ROOM = 1024  # an entry's fields other than its bodies (id, state, times, dead letter ...)


def json_page(
    records: Sequence[StoredMessage], *, body: bool, preview: int | None, max_bytes: int | None = None
) -> tuple[bytes, bool]:
    """The JSON array of ``records``' entries, at most ``max_bytes`` long, and whether records
    were left out to keep it so (the reader walks on ``after`` the last one shown). The first
    entry is always there: if it alone is longer, its bodies are cut to a preview that fits."""
    if max_bytes is None:
        max_bytes = MAX_PEEK_BYTES
    parts: list[bytes] = []
    size = 2  # the brackets
    whole = body and preview is None
    for msg in records:
        room = max_bytes - size - (1 if parts else 0)
        # JSON never shows a body in fewer bytes than it has (escapes and base64 only grow it):
        # a body longer than the room left is not encoded just to be thrown away.
        entry = b""
        if not (whole and sum(len(item[1]) for item in msg.items()) > room):
            entry = _dumps(peek_entry(msg, body=body, preview=preview)).encode()
        if not entry or len(entry) > room:
            if parts:
                return b"[" + b",".join(parts) + b"]", True
            # Alone too long: its bodies cut to what fits even if JSON shows each byte in six
            # (\u00XX), shared among its parts, room kept for the entry's other fields.
            fits = max(1, (max_bytes - _ENTRY_ROOM) // 6 // len(msg.items()))
            share = fits if preview is None else min(preview, fits)
            entry = _dumps(peek_entry(msg, body=body, preview=share)).encode()
        size += len(entry) + (1 if parts else 0)
        parts.append(entry)
    return b"[" + b",".join(parts) + b"]", False


def raw_page(
    records: Sequence[StoredMessage], *, body: bool, raw: bool = True, max_bytes: int | None = None
) -> list[dict[str, Any]]:
    """The entries of ``records`` (bodies as bytes with ``raw``), until the records shown
    reach ``max_bytes`` (at least one entry), as a batch pull stops; without bodies, all."""
    if max_bytes is None:
        max_bytes = MAX_PEEK_BYTES
    out: list[dict[str, Any]] = []
    shown = 0
    for msg in records:
        if out and shown >= max_bytes:
            break
        out.append(peek_entry(msg, body=body, raw=raw))
        if body:
            shown += msg.nbytes()
    return out
