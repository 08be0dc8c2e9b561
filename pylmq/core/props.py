"""Queue properties: ``accum``, ``retry``, ``timeout`` (LMQ-FACTS section 2).

Effective properties of queue Q = Q's own properties, over the FIRST entry of the default list
whose regex matches Q's name, over the system defaults. Raw (partial) properties are plain dicts
holding only the keys that were set; ``retry`` ``None`` means ``infinity``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pylmq.errors import InvalidProps, InvalidRegex

__all__ = [
    "DEFAULT_PROPS",
    "DefaultList",
    "Props",
    "RawProps",
    "compile_regex",
    "effective_props",
    "export_props",
    "merge_props",
    "parse_default_list",
    "parse_props",
]

RawProps = dict[str, Any]
"""Only the keys that were set: ``accum`` (s, float), ``retry`` (int or None), ``timeout`` (s)."""

DefaultList = list[tuple[str, RawProps]]
"""``[(regex, raw props), ...]``; the first matching entry applies."""

KEYS = ("accum", "retry", "timeout")


@dataclass(frozen=True, slots=True)
class Props:
    accum: float = 0.0
    retry: int | None = 2
    timeout: float = 30.0

    def to_raw(self) -> RawProps:
        return {"accum": self.accum, "retry": self.retry, "timeout": self.timeout}


DEFAULT_PROPS = Props()


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidProps(f"'{key}' must be a number, got {value!r}")
    f = float(value)
    if not math.isfinite(f) or f < 0:
        raise InvalidProps(f"'{key}' must be a finite number >= 0, got {value!r}")
    return f


def parse_props(obj: Any, *, accum_key: str = "accum") -> RawProps:
    """Validate a props object from a client (JSON or msgpack map).

    ``accum_key`` is ``"pack"`` for the MessagePack-RPC API, which names accum so.
    Unknown keys, wrong types and negative values are :class:`InvalidProps`.
    """
    if not isinstance(obj, Mapping):
        raise InvalidProps(f"properties must be an object, got {type(obj).__name__}")
    out: RawProps = {}
    for key, value in obj.items():
        k = key.decode() if isinstance(key, bytes) else key
        if k == accum_key:
            # LMQ keeps accum in whole milliseconds.
            out["accum"] = round(_number(k, value) * 1000) / 1000
        elif k == "retry":
            if value in ("infinity", b"infinity"):
                out["retry"] = None
            elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidProps(f"'retry' must be an integer >= 0, got {value!r}")
            else:
                out["retry"] = value
        elif k == "timeout":
            out["timeout"] = _number(k, value)
        else:
            raise InvalidProps(f"unknown property {k!r}")
    return out


def compile_regex(pattern: Any) -> re.Pattern[str]:
    if isinstance(pattern, bytes):
        try:
            pattern = pattern.decode()
        except UnicodeDecodeError as e:
            raise InvalidRegex("regex is not valid UTF-8") from e
    # An empty pattern is a valid regex that matches every name, as in LMQ (PCRE).
    if not isinstance(pattern, str):
        raise InvalidRegex(f"a regex string is required, got {pattern!r}")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise InvalidRegex(f"invalid regex {pattern!r}: {e}") from e


def parse_default_list(obj: Any, *, accum_key: str = "accum") -> DefaultList:
    """``[[regex, props], ...]``: every regex must compile, every props object validate."""
    if not isinstance(obj, list):
        raise InvalidProps("default properties must be a list of [regex, props] pairs")
    out: DefaultList = []
    for entry in obj:
        if not isinstance(entry, list | tuple) or len(entry) != 2:
            raise InvalidProps(f"each default entry must be [regex, props], got {entry!r}")
        regex, props = entry
        compile_regex(regex)
        if isinstance(regex, bytes):
            regex = regex.decode()
        out.append((regex, parse_props(props, accum_key=accum_key)))
    return out


def merge_props(base: RawProps, override: Mapping[str, Any]) -> RawProps:
    merged = dict(base)
    merged.update(override)
    return merged


_regex_cache: dict[str, re.Pattern[str]] = {}


def _match(regex: str, name: str) -> bool:
    pat = _regex_cache.get(regex)
    if pat is None:
        pat = re.compile(regex)
        _regex_cache[regex] = pat
    # LMQ uses re:run, which searches anywhere in the name.
    return pat.search(name) is not None


def effective_props(name: str, own: RawProps | None, defaults: Iterable[tuple[str, RawProps]]) -> Props:
    merged = DEFAULT_PROPS.to_raw()
    for regex, props in defaults:
        if _match(regex, name):
            merged.update(props)
            break
    if own:
        merged.update(own)
    return Props(accum=merged["accum"], retry=merged["retry"], timeout=merged["timeout"])


def _export_value(v: Any) -> Any:
    if v is None:
        return "infinity"
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def export_props(props: Props | RawProps, *, accum_key: str = "accum") -> dict[str, Any]:
    """Props as the APIs return them (seconds; whole numbers as integers, as LMQ prints them).
    Effective props come in LMQ's sorted key order; raw props (a default list entry) in the
    order they were given, as LMQ stores them."""
    raw = props.to_raw() if isinstance(props, Props) else props
    out: dict[str, Any] = {}
    for k in raw:
        if k in KEYS:
            out[accum_key if k == "accum" else k] = _export_value(raw[k])
    return out
