"""The columns a read hands to Spark: the message schema, or a compatible one the user gave.

A user schema (``spark.read.format("lmq").schema("id STRING, body STRING")``) names a subset of
the message columns, in any order, with these types (Spark's simple strings):

* ``queue``, ``id``, ``type``, ``content_type``: ``string``;
* ``retry_remaining``: ``bigint`` or ``int``;
* ``body``: ``binary``, or ``string`` (the body decoded as UTF-8);
* ``parts``: ``array<struct<content_type:string,body:binary>>``, or with ``body:string``.

Anything else is refused on the driver with a :class:`~pylmq.errors.BadRequest` naming the
column, before a message is pulled. A body that is not UTF-8 under a ``string`` column fails the
read naming the message (its messages are not acked, so they come back): never a Python repr,
never a replacement character. Rows go to Spark as Arrow record batches, built column by column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pylmq.errors import BadRequest
from pylmq.spark._rows import MESSAGE_COLUMNS, Row

__all__ = ["ReadShape", "read_shape"]

_PARTS_BINARY = "array<struct<content_type:string,body:binary>>"
_PARTS_STRING = "array<struct<content_type:string,body:string>>"
_ALLOWED: dict[str, tuple[str, ...]] = {
    "queue": ("string",),
    "id": ("string",),
    "type": ("string",),
    "retry_remaining": ("bigint", "int"),
    "content_type": ("string",),
    "body": ("binary", "string"),
    "parts": (_PARTS_BINARY, _PARTS_STRING),
}


class BodyNotText(BadRequest):
    """A body read into a ``string`` column is not UTF-8."""


@dataclass(frozen=True, slots=True)
class ReadShape:
    """Which message columns a read gives, in which order, and which are decoded to text."""

    names: tuple[str, ...]
    types: tuple[str, ...]
    """Spark's simple strings, as given."""
    indexes: tuple[int, ...]
    """Position of each column in a full message row."""

    @property
    def full(self) -> bool:
        return self.names == MESSAGE_COLUMNS and self.types[MESSAGE_COLUMNS.index("body")] == "binary"

    def rows(self, rows: Sequence[Row]) -> list[Row]:
        """The rows as tuples of this shape (what a stream partition yields)."""
        columns = self.columns(rows)
        return list(zip(*columns, strict=True)) if columns else []

    def columns(self, rows: Sequence[Row]) -> list[list[Any]]:
        out: list[list[Any]] = []
        for name, type_, i in zip(self.names, self.types, self.indexes, strict=True):
            values = [r[i] for r in rows]
            convert = _converter(name, type_)
            if convert is not None:
                values = [convert(r, v) for r, v in zip(rows, values, strict=True)]
            out.append(values)
        return out

    def batch(self, rows: Sequence[Row], arrow_schema: Any) -> Any:
        """A ``pyarrow.RecordBatch`` of ``rows`` under ``arrow_schema`` (Spark's for this shape)."""
        import pyarrow as pa

        return pa.RecordBatch.from_arrays(
            [pa.array(col, type=field.type) for col, field in zip(self.columns(rows), arrow_schema, strict=True)],
            schema=arrow_schema,
        )


def _text(row: Row, body: bytes | None) -> str | None:
    if body is None:
        return None
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BodyNotText(
            f"lmq read: the body of message {row[1]} of queue {row[0]!r} is not UTF-8 ({e.reason} at byte "
            f"{e.start}) and cannot be a string column: read body as BINARY, or take this message out. "
            "A streaming query replays its batch on every restart (no retry spent before the queue's "
            "timeout passed), so it fails "
            "again each time until then: with the query stopped, claim and ack the message by id, e.g. "
            f"pylmq.client.HttpClient(url): .claim({row[0]!r}, [{row[1]!r}]) then "
            f".reply_many({row[0]!r}, 'ack', [{row[1]!r}])"
        ) from None


def _parts_text(row: Row, parts: list[tuple[str, bytes]] | None) -> list[tuple[str, str | None]] | None:
    if parts is None:
        return None
    return [(ct, _text(row, body)) for ct, body in parts]


def _converter(name: str, type_: str) -> Callable[[Row, Any], Any] | None:
    if name == "body" and type_ == "string":
        return _text
    if name == "parts" and type_ == _PARTS_STRING:
        return _parts_text
    return None


def read_shape(fields: Sequence[tuple[str, str]]) -> ReadShape:
    """Check a read schema's ``(column, type)`` pairs; every mistake is reported at once."""
    problems: list[str] = []
    seen: set[str] = set()
    for name, type_ in fields:
        allowed = _ALLOWED.get(name)
        if allowed is None:
            problems.append(f"unknown column {name!r}")
        elif type_ not in allowed:
            problems.append(f"column {name!r} must be {' or '.join(allowed)}, got {type_}")
        elif name in seen:
            problems.append(f"column {name!r} given twice")
        seen.add(name)
    if not fields:
        problems.append("no column")
    if problems:
        raise BadRequest(
            "lmq read: the schema does not fit the messages: " + "; ".join(problems) + ". The columns are "
            + ", ".join(f"{n} {' | '.join(t.upper() for t in _ALLOWED[n])}" for n in MESSAGE_COLUMNS)
            + "; give any of them, in any order"
        )  # fmt: skip
    names = tuple(n for n, _ in fields)
    return ReadShape(names, tuple(t for _, t in fields), tuple(MESSAGE_COLUMNS.index(n) for n in names))
