"""Queue properties and the default list as JSON in the database, read back exactly.

A props object is stored as a JSON array of ``[key, value]`` pairs, not a JSON object: ``jsonb``
reorders an object's keys, and a default list entry's props are shown in the order they were
given (:func:`pylmq.core.props.export_props`). Numbers keep their type (``jsonb`` keeps ``30.0``
as written: it reads back as a float, ``3`` as an int); ``null`` is an infinite retry, or no
dead-letter queue / no SQS attributes over a default's. Operators read them with e.g.
``SELECT name, props FROM lmq.queue``.
"""

from __future__ import annotations

import json
from typing import Any

from pylmq.core.props import DefaultList, RawProps
from pylmq.errors import InvalidProps

__all__ = ["check_defaults", "check_text", "decode_defaults", "decode_props", "encode_defaults", "encode_props"]


def encode_props(props: RawProps) -> str:
    return json.dumps([[k, v] for k, v in props.items()], allow_nan=False, separators=(",", ":"))


def _props_of(pairs: Any) -> RawProps:
    if isinstance(pairs, dict):  # written by hand by an operator: accepted in its own order
        return dict(pairs)
    out: RawProps = {}
    for k, v in pairs:
        # SQS attributes come back in the order parse_props keeps them in (sorted).
        out[k] = dict(sorted(v.items())) if isinstance(v, dict) else v
    return out


def decode_props(text: str | None) -> RawProps:
    return {} if text is None else _props_of(json.loads(text))


def encode_defaults(defaults: DefaultList) -> str:
    return json.dumps(
        [[regex, [[k, v] for k, v in props.items()]] for regex, props in defaults],
        allow_nan=False,
        separators=(",", ":"),
    )


def decode_defaults(text: str | None) -> DefaultList:
    return [] if text is None else [(regex, _props_of(props)) for regex, props in json.loads(text)]


def check_text(props: RawProps) -> None:
    """Refuse text PostgreSQL's ``jsonb`` cannot hold: NUL characters and lone surrogates (the
    SQS attribute values parse_props lets through are any text)."""
    for key, value in props.items():
        texts = list(value.items()) if isinstance(value, dict) else [(key, value)]
        for k, v in texts:
            for t in (k, v):
                if not isinstance(t, str):
                    continue
                if "\x00" in t:
                    raise InvalidProps(f"'{key}' holds a NUL character, which the postgres store cannot keep")
                try:
                    t.encode("utf-8")
                except UnicodeEncodeError as e:
                    raise InvalidProps(f"'{key}' is not valid Unicode text (a lone surrogate)") from e


def check_defaults(defaults: DefaultList) -> None:
    """:func:`check_text` for a default list: its regexes and each entry's props."""
    for regex, props in defaults:
        if "\x00" in regex:
            raise InvalidProps(f"default props of {regex!r:.60}: the regex holds a NUL character")
        try:
            regex.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidProps(f"default props of {regex!r:.60}: the regex is not valid Unicode text") from e
        check_text(props)
