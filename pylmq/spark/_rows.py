"""Messages as Spark rows and rows as pushes: pure functions, no Spark, no I/O.

A pulled message becomes ``(queue, id, type, retry_remaining, content_type, body, parts)``:

* a normal message has ``body`` and ``content_type`` and ``parts`` null;
* a compound message (accumulated pushes) has ``body`` and ``content_type`` null and one
  ``parts`` element ``(content_type, body)`` per push, in push order;
* ``retry_remaining`` is null for LMQ's ``infinity``.

Over MessagePack-RPC a message is the pushed *value*: bytes stay bytes
(``application/octet-stream``), text is UTF-8 (``text/plain; charset=utf-8``), anything else is
re-encoded as MessagePack (``application/x-msgpack``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from pylmq.client import DEFAULT_CONTENT_TYPE, Message, RpcMessage
from pylmq.errors import BadRequest

__all__ = [
    "MESSAGE_SCHEMA_DDL",
    "TEXT_CONTENT_TYPE",
    "Push",
    "PushColumns",
    "message_row",
    "push_columns",
    "row_push",
    "value_body",
]

MESSAGE_SCHEMA_DDL = (
    "queue STRING NOT NULL, id STRING NOT NULL, type STRING NOT NULL, retry_remaining BIGINT, "
    "content_type STRING, body BINARY, parts ARRAY<STRUCT<content_type: STRING, body: BINARY>>"
)
MESSAGE_COLUMNS = ("queue", "id", "type", "retry_remaining", "content_type", "body", "parts")

TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
MSGPACK_CONTENT_TYPE = "application/x-msgpack"

Row = tuple[Any, ...]


def value_body(value: Any) -> tuple[str, bytes]:
    """``(content_type, body)`` for a value pulled over MessagePack-RPC."""
    if isinstance(value, bytes | bytearray | memoryview):
        return DEFAULT_CONTENT_TYPE, bytes(value)
    if isinstance(value, str):
        return TEXT_CONTENT_TYPE, value.encode()
    return MSGPACK_CONTENT_TYPE, msgpack.packb(value, use_bin_type=True)


def message_row(msg: Message | RpcMessage) -> Row:
    if isinstance(msg, RpcMessage):
        if msg.type == "compound":
            values = msg.content if isinstance(msg.content, list | tuple) else [msg.content]
            parts = [value_body(v) for v in values]
            return (msg.queue, msg.id, msg.type, msg.retry, None, None, parts)
        ct, body = value_body(msg.content)
        return (msg.queue, msg.id, msg.type, msg.retry, ct, body, None)
    if msg.type == "compound":
        parts = [(p.content_type, p.body) for p in msg.parts]
        return (msg.queue, msg.id, msg.type, msg.retry, None, None, parts)
    return (msg.queue, msg.id, msg.type, msg.retry, msg.content_type, msg.body, None)


# -- writing ------------------------------------------------------------------------------------

WRITE_COLUMNS = ("body", "content_type", "queue")


@dataclass(frozen=True, slots=True)
class PushColumns:
    """Where the pushed fields are in a row of the written DataFrame (``None``: no such column)."""

    body: int
    content_type: int | None
    queue: int | None


@dataclass(frozen=True, slots=True)
class Push:
    target: str
    """The queue, or in fan-out mode (option ``qre``) the regex."""
    body: bytes | str
    content_type: str | None


def push_columns(
    fields: Sequence[tuple[str, str]], *, api: str, default_queue: str | None, qre: str | None
) -> PushColumns:
    """Check the written DataFrame's ``(column, type)`` pairs (type as Spark's simple string)
    and find the columns to push; every mistake is reported before a row is pushed."""
    names = [name for name, _ in fields]
    types = dict(fields)
    extra = [n for n in names if n not in WRITE_COLUMNS]
    if extra:
        raise BadRequest(f"lmq write takes the columns body, content_type and queue; select away {', '.join(extra)}")
    if "body" not in types:
        raise BadRequest("lmq write needs a 'body' column (binary or string)")
    if types["body"] not in ("binary", "string"):
        raise BadRequest(f"lmq write: column 'body' must be binary or string, got {types['body']}")
    for name in ("content_type", "queue"):
        if name in types and types[name] != "string":
            raise BadRequest(f"lmq write: column {name!r} must be a string, got {types[name]}")
    if "content_type" in types and api == "rpc":
        raise BadRequest(
            "lmq write: MessagePack-RPC stores every push as application/x-msgpack, so a "
            "'content_type' column cannot be kept: write over HTTP or drop the column"
        )
    if "queue" in types and qre is not None:
        raise BadRequest("lmq write: a 'queue' column and option 'qre' exclude each other")
    if "queue" not in types and default_queue is None and qre is None:
        raise BadRequest("lmq write needs option 'queue', option 'qre' or a 'queue' column")
    return PushColumns(
        body=names.index("body"),
        content_type=names.index("content_type") if "content_type" in types else None,
        queue=names.index("queue") if "queue" in types else None,
    )


def row_push(row: Sequence[Any], cols: PushColumns, default_target: str | None) -> Push:
    body = row[cols.body]
    if body is None:
        raise BadRequest("lmq write: a row has a null 'body'")
    if isinstance(body, bytearray | memoryview):
        body = bytes(body)
    content_type = row[cols.content_type] if cols.content_type is not None else None
    queue = row[cols.queue] if cols.queue is not None else None
    if queue is None:
        queue = default_target
    if queue is None:
        # Only reachable with a queue column holding null and no 'queue' option.
        raise BadRequest("lmq write: a row has a null 'queue' and there is no 'queue' option")
    if content_type is None and isinstance(body, str):
        content_type = TEXT_CONTENT_TYPE
    return Push(queue, body, content_type)
