"""Queue properties: ``accum``, ``retry``, ``timeout`` (docs/lmq-contract.md#queue-properties), and
pylmq's ``dead_letter`` (docs/message-options.md) and ``sqs`` (the SQS attributes no LMQ prop
holds, docs/sqs.md), which are only ever exported where they were set, so that LMQ's own answers
stay byte for byte what they were.

Effective properties of queue Q = Q's own properties, over the FIRST entry of the default list
whose regex matches Q's name, over the system defaults. Raw (partial) properties are plain dicts
holding only the keys that were set; ``retry`` ``None`` means ``infinity``.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pylmq.core.names import validate_name
from pylmq.core.pattern import Pattern, compile_pattern
from pylmq.errors import InvalidProps, InvalidQueueName, InvalidRegex

__all__ = [
    "DEFAULT_PROPS",
    "MAX_DEFAULTS",
    "MAX_DEFAULTS_BYTES",
    "MAX_DEFAULTS_PROGRAM",
    "MAX_RETRY",
    "MAX_SECONDS",
    "MAX_SQS_BYTES",
    "MAX_SQS_KEYS",
    "DefaultList",
    "DefaultMatcher",
    "Props",
    "RawProps",
    "effective_props",
    "export_props",
    "merge_props",
    "parse_default_list",
    "parse_props",
]

RawProps = dict[str, Any]
"""Only the keys that were set: ``accum`` (s, float), ``retry`` (int or None), ``timeout`` (s),
``dead_letter`` (a queue name, or None: none, over a default's), ``sqs`` (a dict of text to
text, or None: none)."""

DefaultList = list[tuple[str, RawProps]]
"""``[(regex, raw props), ...]``; the first matching entry applies."""

KEYS = ("accum", "retry", "timeout")
"""LMQ's properties, exported always."""

log = logging.getLogger("pylmq.props")


@dataclass(frozen=True, slots=True)
class Props:
    accum: float = 0.0
    retry: int | None = 2
    timeout: float = 30.0
    dead_letter: str | None = None
    """The queue where exhausted messages go instead of being discarded (pylmq)."""
    sqs: tuple[tuple[str, str], ...] = ()
    """SQS attributes kept for the queue (name, text value), by name; the SQS front end alone
    reads them. A tuple keeps the props hashable and immutable."""

    def to_raw(self) -> RawProps:
        raw: RawProps = {"accum": self.accum, "retry": self.retry, "timeout": self.timeout}
        if self.dead_letter is not None:
            raw["dead_letter"] = self.dead_letter
        if self.sqs:
            raw["sqs"] = dict(self.sqs)
        return raw


DEFAULT_PROPS = Props()


MAX_RETRY = 2**63 - 2
"""A push stores ``retry + 1`` (and a put back adds one again): the bound keeps the message's
retry within a signed 64-bit integer, which the journal (msgpack), the RPC replies and clients
with 64-bit integers all carry."""

MAX_SECONDS = 4_294_967.295
"""``accum`` and ``timeout``: 2^32 - 1 milliseconds, about 49.7 days, the range of a 32-bit
millisecond timer. Far above any real use and far below what overflows (accum is kept in whole
milliseconds: ``accum * 1000`` is infinite past 1.8e305 s) or loses precision (deadlines are
float seconds: past 2^53 ms they no longer hold milliseconds)."""

MAX_SQS_KEYS = 32
"""Entries of the ``sqs`` prop: SQS has about 20 queue attributes."""

MAX_SQS_BYTES = 128 << 10
"""The ``sqs`` prop's names and values together (UTF-8): SQS's longest attribute, a Policy, may
hold 20 KiB, and a queue's tags (50 of up to 128 + 256 characters, kept as one JSON entry) up to
about 77 KiB; props are held in memory and journaled at each change."""

_SQS_KEY = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")

MAX_DEFAULTS = 256
"""Entries in the default list. A queue's effective props take the first entry that matches
its name, so one lookup may run every regex of the list (an RE2 match costs microseconds from
Python: 256 stay within a few milliseconds), and the list's patterns all fit the compile cache
(:data:`pylmq.core.pattern.CACHE_SIZE`)."""

MAX_DEFAULTS_BYTES = 16 << 10
"""The default list's regexes together (UTF-8)."""

MAX_DEFAULTS_PROGRAM = 2048
"""The default list's RE2 programs together, in instructions (see
:data:`pylmq.core.pattern.MAX_PROGRAM`). A queue's first lookup runs on the loop and may search
every entry: this bounds it at about 4 ms of CPU for hostile entries, while 256 entries like
``^orders/eu$`` (4 instructions each) take a quarter of it."""


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidProps(f"'{key}' must be a number, got {value!r}")
    # float() of a huge integer raises OverflowError: such a value is out of range anyway.
    f = float(value) if not isinstance(value, int) or abs(value) < 2**53 else math.inf
    if not math.isfinite(f) or not 0 <= f <= MAX_SECONDS:
        raise InvalidProps(f"'{key}' must be a number of seconds from 0 to {MAX_SECONDS}, got {value!r}")
    return f


def _retry(value: Any) -> int | None:
    if value in ("infinity", b"infinity"):
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRY:
        raise InvalidProps(f"'retry' must be an integer from 0 to {MAX_RETRY} or \"infinity\", got {value!r}")
    return value


def _dead_letter(value: Any) -> str | None:
    if value is None:
        return None
    try:
        return validate_name(value)
    except InvalidQueueName as e:
        raise InvalidProps(f"'dead_letter' must be a queue name or null: {e.detail}") from e


def _sqs(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidProps(f"'sqs' must be an object of SQS attribute names to text, or null, got {value!r:.80}")
    if len(value) > MAX_SQS_KEYS:
        raise InvalidProps(f"'sqs' has {len(value)} entries, more than the limit of {MAX_SQS_KEYS}")
    out: dict[str, str] = {}
    size = 0
    for k, v in value.items():
        k = k.decode("utf-8", "replace") if isinstance(k, bytes) else k
        v = v.decode("utf-8", "replace") if isinstance(v, bytes) else v
        if not isinstance(k, str) or not _SQS_KEY.fullmatch(k) or not isinstance(v, str):
            raise InvalidProps(f"'sqs' maps attribute names (letters and digits, 1 to 64) to text, got {k!r:.80}")
        size += len(k) + len(v.encode("utf-8", "surrogatepass"))
        if size > MAX_SQS_BYTES:
            raise InvalidProps(f"'sqs' holds more than the limit of {MAX_SQS_BYTES} bytes")
        out[k] = v
    return dict(sorted(out.items()))


def parse_props(obj: Any, *, accum_key: str = "accum") -> RawProps:
    """Validate a props object from a client (JSON or msgpack map).

    ``accum_key`` is ``"pack"`` for the MessagePack-RPC API, which names accum so.
    Unknown keys, wrong types and values out of the range the stores can encode are
    :class:`InvalidProps` naming the key, raised before anything is changed.
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
            out["retry"] = _retry(value)
        elif k == "timeout":
            out["timeout"] = _number(k, value)
        elif k == "dead_letter":
            out["dead_letter"] = _dead_letter(value)
        elif k == "sqs":
            out["sqs"] = _sqs(value)
        else:
            raise InvalidProps(f"unknown property {k!r}")
    return out


def parse_default_list(obj: Any, *, accum_key: str = "accum") -> DefaultList:
    """``[[regex, props], ...]``: at most :data:`MAX_DEFAULTS` entries, every regex must
    compile (:func:`~pylmq.core.pattern.compile_pattern`), every props object validate."""
    if not isinstance(obj, list):
        raise InvalidProps("default properties must be a list of [regex, props] pairs")
    if len(obj) > MAX_DEFAULTS:
        raise InvalidProps(f"the default list has {len(obj)} entries, more than the limit of {MAX_DEFAULTS}")
    out: DefaultList = []
    size = program = 0
    for i, entry in enumerate(obj):
        if not isinstance(entry, list | tuple) or len(entry) != 2:
            raise InvalidProps(f"each default entry must be [regex, props], got {entry!r}")
        regex, props = entry
        pattern = compile_pattern(regex)
        text = pattern.text
        size += len(text.encode("utf-8"))
        if size > MAX_DEFAULTS_BYTES:
            raise InvalidProps(f"the default list's regexes take more than the limit of {MAX_DEFAULTS_BYTES} bytes")
        program += pattern.program
        if program > MAX_DEFAULTS_PROGRAM:
            raise InvalidProps(
                f"the default list's regexes are too costly to match together: with entry {i + 1} "
                f"({text[:64]!r}) their RE2 programs have {program} instructions, more than the limit "
                f"of {MAX_DEFAULTS_PROGRAM}"
            )
        out.append((text, parse_props(props, accum_key=accum_key)))
    return out


def merge_props(base: RawProps, override: Mapping[str, Any]) -> RawProps:
    merged = dict(base)
    merged.update(override)
    return merged


class DefaultMatcher:
    """A default list with its regexes compiled, to find the entry for a queue name.

    A stored list is not necessarily one this node validated (a journal written by an older
    version, an Erlang node of the cluster): an entry whose regex RE2 cannot run (or that is
    too costly), and the entries past :data:`MAX_DEFAULTS_PROGRAM`, never match, and are logged
    once (when the list is compiled) instead of failing or slowing every lookup."""

    __slots__ = ("_entries",)

    def __init__(self, defaults: Iterable[tuple[str, RawProps]]) -> None:
        self._entries: list[tuple[Pattern, RawProps]] = []
        program = 0
        for regex, props in defaults:
            try:
                pattern = compile_pattern(regex)
            except InvalidRegex as e:
                log.warning("default properties entry ignored: %s", e.detail)
                continue
            program += pattern.program
            if program > MAX_DEFAULTS_PROGRAM:
                log.warning(
                    "default properties entry %r and those after it ignored: the list's regexes are "
                    "too costly to match together (over %d RE2 instructions)",
                    pattern.text[:64],
                    MAX_DEFAULTS_PROGRAM,
                )
                break
            self._entries.append((pattern, props))

    def lookup(self, name: str) -> RawProps | None:
        """The props of the first entry whose regex matches ``name``."""
        for pattern, props in self._entries:
            if pattern.search(name):
                return props
        return None


def effective_props(
    name: str, own: RawProps | None, defaults: Iterable[tuple[str, RawProps]] | DefaultMatcher
) -> Props:
    matcher = defaults if isinstance(defaults, DefaultMatcher) else DefaultMatcher(defaults)
    merged = DEFAULT_PROPS.to_raw()
    default = matcher.lookup(name)
    if default:
        merged.update(default)
    if own:
        merged.update(own)
    sqs = merged.get("sqs")
    return Props(
        accum=merged["accum"],
        retry=merged["retry"],
        timeout=merged["timeout"],
        dead_letter=merged.get("dead_letter"),
        sqs=tuple(sorted(sqs.items())) if sqs else (),
    )


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
        elif k in ("dead_letter", "sqs") and raw[k]:
            out[k] = raw[k]
    return out
