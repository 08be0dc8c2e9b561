"""Regexes over queue names: pull-any, fan-out push and the default properties list.

LMQ matches with PCRE (``re:run``). A backtracking engine can take exponential time on a
hostile pattern (``(a|aa)+$`` against a name of 30 ``a`` and a ``!``), and here a match runs
on the event loop, so one request would stop every client. pylmq matches with RE2, whose run
time is linear in the name and the pattern and whose memory is capped per pattern (see
docs/decisions/regex-engine.md for the measurements behind the choice). RE2 reads PCRE's
syntax, POSIX classes such as ``[[:digit:]]`` included, but has no backreferences, lookarounds,
possessive quantifiers or atomic groups: such a pattern is refused with :class:`InvalidRegex`
naming it, never run.

Every regex over queue names goes through :func:`compile_pattern`, which keeps the compiled
patterns in a bounded LRU cache.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import re2

from pylmq.errors import InvalidRegex

__all__ = [
    "CACHE_SIZE",
    "MAX_MEMORY",
    "MAX_PATTERN_BYTES",
    "MAX_PROGRAM",
    "Pattern",
    "cache_info",
    "compile_pattern",
    "pattern_text",
]

MAX_PATTERN_BYTES: Final = 4096
"""A queue name has at most 255 bytes; 4 KiB still holds an alternation of ~330 names like
``queue-00042``."""

MAX_MEMORY: Final = 64 << 10
"""RE2's memory budget per compiled pattern (program and DFA cache). RE2 stops compiling a
program past about 5,000 instructions under it ("pattern too large"), so refusing a pattern
over :data:`MAX_PROGRAM` costs at most ~1.5 ms of CPU (with 256 KiB RE2 built programs of
16,000 instructions first, 4-10 ms). A search that fills the DFA cache goes on in RE2's NFA; a
larger budget does not make a hostile search cheaper (measured: the DFA then builds a new state
of up to :data:`MAX_PROGRAM` instructions per byte instead, as slow or slower), and patterns
people write need a few DFA states. With :data:`CACHE_SIZE` it bounds the cache at 32 MiB."""

MAX_PROGRAM: Final = 1000
"""RE2 instructions of a pattern's program (forward or reverse, whichever is larger). A search
costs at most a step per instruction per byte of the name, and a hostile pattern (an alternation
of ``a[ab]{k}c``, every instruction alive at every byte of a random name of ``a`` and ``b``)
reaches that: about 2 ms of CPU for a 255-byte name at this bound, 24 ms at the 16,000
instructions 4 KiB of pattern can compile to. Patterns people write take far less: RE2 folds
literal prefixes and alternations of names into a few instructions (``^orders/`` takes 4, an
alternation of 330 names like ``queue-00042`` takes 82, a timestamp regex 62); the bound refuses
large repeated classes (``[a-z]{1000}``) and alternations of many unrelated sub-patterns."""

CACHE_SIZE: Final = 512
"""Distinct patterns kept compiled (least recently used go first): many more than clients use,
and more than a default list holds (:data:`pylmq.core.props.MAX_DEFAULTS`)."""

_UNSUPPORTED_HINT: Final = (
    "pylmq matches with RE2 (linear time): backreferences, lookarounds, \\Z, possessive "
    "quantifiers and atomic groups are not supported"
)


def _options() -> re2.Options:
    opts = re2.Options()
    opts.max_mem = MAX_MEMORY
    opts.log_errors = False  # a client's bad pattern is its 400, not a line on our stderr
    opts.never_capture = True  # only "does it match" is asked: no submatch bookkeeping
    return opts


_OPTIONS: Final = _options()


class Pattern:
    """A compiled regex; :meth:`search` says whether it matches anywhere in a queue name,
    as LMQ's ``re:run`` does."""

    __slots__ = ("_search", "program", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        try:
            compiled = re2.compile(text, _OPTIONS)
        except re2.error as e:
            reason = e.args[0].decode("utf-8", "replace") if e.args and isinstance(e.args[0], bytes) else str(e)
            if reason.startswith("pattern too large"):  # over RE2's memory budget
                raise _too_costly(text, "more instructions than RE2's memory budget holds") from None
            raise InvalidRegex(f"invalid regex {text!r}: {reason} ({_UNSUPPORTED_HINT})") from None
        # What one search may cost per byte of the name. The reverse program finds where a
        # match starts (RE2 reports -1 when it was not built).
        self.program: int = max(compiled.programsize, compiled.reverseprogramsize)
        if self.program > MAX_PROGRAM:
            raise _too_costly(text, f"{self.program} instructions")
        self._search = compiled.search

    def search(self, name: str) -> bool:
        return self._search(name) is not None

    def __repr__(self) -> str:
        return f"Pattern({self.text!r})"


def _too_costly(text: str, size: str) -> InvalidRegex:
    shown = f"{text[:64]!r}{'...' if len(text) > 64 else ''}"
    return InvalidRegex(
        f"regex {shown} is too costly to match: its RE2 program has {size}, over the limit of "
        f"{MAX_PROGRAM} instructions (use fewer or shorter repetitions and alternatives)"
    )


def pattern_text(pattern: Any) -> str:
    """A client's regex as text, checked for type, encoding and length (not yet compiled)."""
    if isinstance(pattern, bytes):
        try:
            pattern = pattern.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidRegex("regex is not valid UTF-8") from e
    if not isinstance(pattern, str):
        raise InvalidRegex(f"a regex string is required, got {pattern!r}")
    if len(pattern) > MAX_PATTERN_BYTES:
        raise InvalidRegex(f"regex {pattern[:64]!r}... is longer than {MAX_PATTERN_BYTES} bytes (UTF-8)")
    if not pattern.isascii():
        try:
            size = len(pattern.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidRegex(f"regex {pattern[:64]!r} is not valid Unicode (lone surrogate)") from None
        if size > MAX_PATTERN_BYTES:
            raise InvalidRegex(f"regex {pattern[:64]!r}... is longer than {MAX_PATTERN_BYTES} bytes (UTF-8)")
    return pattern


@functools.lru_cache(maxsize=CACHE_SIZE)
def _compiled(text: str) -> Pattern:
    # Only successes are cached: a refused pattern costs one RE2 parse, bounded by its length.
    return Pattern(text)


def compile_pattern(pattern: Any) -> Pattern:
    """The compiled form of a client's regex (str or UTF-8 bytes); :class:`InvalidRegex` names
    a pattern that is not a string, too long, too costly to match or not supported. An empty pattern matches every
    name, as in LMQ."""
    return _compiled(pattern_text(pattern))


def cache_info() -> functools._CacheInfo:
    return _compiled.cache_info()
