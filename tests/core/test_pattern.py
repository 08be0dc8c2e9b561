"""Regexes over queue names: RE2 semantics for the PCRE syntax LMQ users write, refusals that
name the pattern, and bounds on length and on the compile cache."""

from __future__ import annotations

import time

import pytest

from pylmq.core import pattern
from pylmq.core.pattern import CACHE_SIZE, MAX_PATTERN_BYTES, MAX_PROGRAM, compile_pattern
from pylmq.errors import InvalidRegex


@pytest.mark.parametrize(
    ("regex", "name", "matches"),
    [
        ("[[:digit:]]+", "log-2024", True),  # a POSIX class, as PCRE reads it
        ("^[[:digit:]]+$", "d:git", False),  # not a set of the characters "[:digt"
        ("^log-[[:alpha:]]+$", "log-abc", True),
        ("[[:^digit:]]", "123", False),
        (r"^foo/.*", "foo/bar", True),
        (r"^foo/.*", "x/foo/bar", False),
        (r"\d{3}$", "q-123", True),
        ("bar", "foo/bar/baz", True),  # found anywhere in the name, as re:run does
        ("^(a|b)/", "b/1", True),
        ("(?i)^LOG", "log-1", True),
        ("", "anything", True),
    ],
)
def test_pcre_style_patterns_match_as_in_lmq(regex: str, name: str, matches: bool) -> None:
    assert compile_pattern(regex).search(name) is matches, f"{regex!r} on {name!r}"


@pytest.mark.parametrize("regex", [r"^(?!tmp)", r"(?<=a)b", r"(a)\1", r"a++", r"(?>a+)", r"q\Z", "(", "a{1001}"])
def test_unsupported_or_invalid_pattern_is_refused_naming_it(regex: str) -> None:
    with pytest.raises(InvalidRegex) as e:
        compile_pattern(regex)
    assert repr(regex) in e.value.detail, e.value.detail


def test_pattern_over_the_length_limit_is_refused_naming_the_limit() -> None:
    # Anchored: RE2 folds the literal prefix into a few instructions (an unanchored literal of
    # 4 KiB is a program of 4,100 instructions, over MAX_PROGRAM).
    compile_pattern("^" + "a" * (MAX_PATTERN_BYTES - 1))
    with pytest.raises(InvalidRegex) as e:
        compile_pattern("a" * (MAX_PATTERN_BYTES + 1))
    assert str(MAX_PATTERN_BYTES) in e.value.detail
    with pytest.raises(InvalidRegex):  # counted in UTF-8 bytes
        compile_pattern("é" * (MAX_PATTERN_BYTES // 2 + 1))


@pytest.mark.parametrize("bad", [b"\xff(", 12, None, "\ud800"])
def test_non_text_pattern_is_refused(bad: object) -> None:
    with pytest.raises(InvalidRegex):
        compile_pattern(bad)


def test_bytes_pattern_is_read_as_utf8() -> None:
    assert compile_pattern("^é".encode()).search("été")


def test_catastrophic_backtracking_patterns_run_in_linear_time() -> None:
    # Each takes exponential time in a backtracking engine (hours at this length in re).
    name = "a" * 254 + "!"
    start = time.perf_counter()
    for regex in [r"(a+)+$", r"(a|aa)+$", r"(a*)*b", r"^(a|a?)+$", r"(.*a){20}$"]:
        assert not compile_pattern(regex).search(name)
    assert time.perf_counter() - start < 1.0  # microseconds in fact; generous for a busy CI


def test_compile_cache_is_bounded_and_reused() -> None:
    first = compile_pattern("^cache-0$")
    assert compile_pattern("^cache-0$") is first
    for i in range(2 * CACHE_SIZE):
        compile_pattern(f"^cache-{i}$")
    info = pattern.cache_info()
    assert info.maxsize == CACHE_SIZE and info.currsize <= CACHE_SIZE, info


# An alternation of a[ab]{k}c: at every byte of a random name of a and b, every instruction of
# RE2's program is alive, so a search costs a step per instruction per byte.
COSTLY = "|".join(f"(?:a[ab]{{{k}}}c)" for k in range(1, 60))


def test_a_pattern_whose_program_is_over_the_cost_bound_is_refused_naming_it() -> None:
    with pytest.raises(InvalidRegex) as e:
        compile_pattern(COSTLY)
    assert COSTLY[:40] in e.value.detail and str(MAX_PROGRAM) in e.value.detail, e.value.detail
    assert len(COSTLY) < MAX_PATTERN_BYTES  # refused for its cost, not its length


def test_a_pattern_past_re2s_memory_budget_is_refused_as_too_costly() -> None:
    # 2.7 KiB compiling to 16,000 instructions (24-60 ms a match): RE2 stops before the end.
    regex = "|".join(f"(?:a[ab]{{{k}}}c)" for k in range(1, 140))
    with pytest.raises(InvalidRegex) as e:
        compile_pattern(regex)
    assert "too costly" in e.value.detail and str(MAX_PROGRAM) in e.value.detail, e.value.detail
    assert regex[:40] in e.value.detail


@pytest.mark.parametrize(
    "regex",
    [
        "|".join(f"queue-{i:05d}" for i in range(330)),  # 4 KiB of names
        r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d =(ERROR|CRASH|SUPERVISOR|PROGRESS) REPORT====$",
        r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        r"(?i)^[a-z0-9_-]{1,64}$",
        r"^.{10,40}$",
    ],
)
def test_patterns_people_write_are_within_the_cost_bound(regex: str) -> None:
    assert compile_pattern(regex).program <= MAX_PROGRAM
