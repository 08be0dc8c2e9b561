"""Batch push and pull over HTTP (pylmq's extension to LMQ's API): the bodies, without I/O.

LMQ's HTTP API moves one message per request; a client moving many pays a round trip, a
request parse and a store commit for each. ``POST /batch/:name`` pushes many messages to one
queue and ``GET /batch/:name?n=&t=`` pulls up to ``n`` (see :mod:`pylmq.api.http`). Both bodies
are MessagePack, so binary bodies travel as they are (the server's side of the pull answer is
:mod:`pylmq.api.batch`):

* push body (``Content-Type: application/x-msgpack``): an array with one element per message,
  either its body (bin) or ``[content_type, body]`` (``content_type`` str or nil: nil stores
  none, as a push without the header). The answer is JSON ``{"pushed": n}``.
* pull answer (``application/x-msgpack``): an array of maps, one per message, in delivery
  order: ``queue``, ``id``, ``type`` (``normal`` or ``compound``), ``retry`` (an integer or
  ``"infinity"``), then for a normal message ``content_type`` and ``body``, for a compound one
  ``parts``: ``[[content_type, body], ...]`` in push order. An empty array when none came.
  The header ``x-lmq-queue-size`` tells how many messages the queue holds after the pull
  (waiting or in processing, as ``/stats`` counts ``size``).

Only the content-type of a message travels: it is the only header LMQ's HTTP push stores.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgpack

from pylmq.errors import BadRequest
from pylmq.wire.items import Item, make_item

__all__ = ["BAD_HEADER_CHARS", "MAX_BATCH", "BatchEntry", "decode_pulled", "decode_pushes", "encode_pushes"]

MAX_BATCH = 10_000
"""The most messages one batch request moves, either way (HTTP ``/batch`` and RPC push-many and
pull-many); the queue manager enforces the same bound."""

BAD_HEADER_CHARS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")
"""Characters no HTTP header value holds (HTAB aside): a push to ``/messages`` cannot carry them
in its Content-Type (the parser refuses the request), and a stored header holding one could not
be delivered as a header. A batch push refuses such a content type by the same rule."""

BatchEntry = bytes | tuple[str | None, bytes]
"""One message of a push batch: its body, or ``(content_type, body)``."""


def decode_pushes(body: bytes) -> list[Item]:
    """The items of a push batch body; :class:`BadRequest` naming the first mistake."""
    try:
        doc = msgpack.unpackb(body, raw=False, max_array_len=MAX_BATCH, strict_map_key=True)
    except ValueError as e:  # includes a too-long array and extra bytes after the value
        raise BadRequest(f"a batch body is one MessagePack array of at most {MAX_BATCH} messages: {e}") from None
    except Exception as e:  # msgpack raises others (FormatError, StackError) for bad input
        raise BadRequest(f"a batch body is one MessagePack array: {type(e).__name__}: {e}") from None
    if not isinstance(doc, list):
        raise BadRequest(f"a batch body is a MessagePack array of messages, got {type(doc).__name__}")
    if len(doc) > MAX_BATCH:
        raise BadRequest(f"a batch holds at most {MAX_BATCH} messages, got {len(doc)}")
    return [_item(i, entry) for i, entry in enumerate(doc)]


def _item(index: int, entry: Any) -> Item:
    if isinstance(entry, bytes):
        return make_item(entry, None)
    if isinstance(entry, list) and len(entry) == 2:
        ct, body = entry
        if isinstance(body, bytes) and (ct is None or isinstance(ct, str)):
            if ct is not None and BAD_HEADER_CHARS.search(ct):
                raise BadRequest(f"message {index}: content type {ct!r:.100} holds a control character")
            try:
                return make_item(body, ct)
            except UnicodeEncodeError:
                raise BadRequest(f"message {index}: content type {ct!r:.100} is not latin-1") from None
    raise BadRequest(f"message {index} is neither a body (bin) nor [content_type (str or nil), body (bin)]")


def encode_pushes(entries: Sequence[BatchEntry]) -> bytes:
    """A push batch body (the client's side of :func:`decode_pushes`)."""
    data: bytes = msgpack.packb([e if isinstance(e, bytes) else list(e) for e in entries], use_bin_type=True)
    return data


def decode_pulled(body: bytes) -> list[dict[str, Any]]:
    """The maps of a pull-many answer, as :func:`pylmq.api.batch.encode_deliveries` wrote them;
    ``ValueError`` when the body is not an array of maps."""
    doc = msgpack.unpackb(body, raw=False, strict_map_key=True)
    if not isinstance(doc, list) or not all(isinstance(m, dict) for m in doc):
        raise ValueError(f"expected an array of message maps, got {type(doc).__name__}")
    return doc
