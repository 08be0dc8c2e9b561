"""Regexes over the HTTP API: a hostile pattern does not stop the node, PCRE's POSIX classes
work, a pattern RE2 cannot run or too long is a 400 naming it, and the default list is bounded."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from pylmq.core.pattern import MAX_PATTERN_BYTES, MAX_PROGRAM, Pattern, compile_pattern
from pylmq.core.props import MAX_DEFAULTS, MAX_DEFAULTS_BYTES, MAX_DEFAULTS_PROGRAM
from tests.api.api_helpers import Api, StartNode

JSON_CT = {"Content-Type": "application/json"}
# 25 "a" and a "!": a backtracking engine needs seconds for (a+)+$ here, twice that per "a" more.
REDOS_QUEUE = "a" * 25 + "!"
REDOS = "(a+)+$"


async def _put_defaults(api: Api, defaults: object) -> tuple[int, dict[str, Any] | None]:
    r = await api.request("PUT", "/properties", data=json.dumps(defaults), headers=JSON_CT)
    return r.status, (r.json() if r.body else None)


async def test_a_catastrophic_regex_is_answered_at_once_and_other_clients_are_not_held(api: Api) -> None:
    await api.push(REDOS_QUEUE, b"x")
    start = time.monotonic()
    redos = await api.pull_any(REDOS, t=0)
    # Another client, right after: in a backtracking engine it would wait for the match above.
    pushed = await api.push("other", b"y")
    pulled = await api.pull("other", t=0)
    elapsed = time.monotonic() - start
    assert redos.status == 204, redos
    assert (pushed.status, pulled.status, pulled.body) == (200, 200, b"y")
    assert elapsed < 1.5, f"the requests took {elapsed:.2f}s"  # milliseconds in fact
    # The fan-out push goes through the same engine.
    r = await api.push_all(REDOS, b"z")
    assert (r.status, r.json()) == (200, {}), r


async def test_a_catastrophic_default_regex_slows_neither_pushes_nor_a_restart(start: StartNode) -> None:
    node, api = await start()
    began = time.monotonic()
    assert await _put_defaults(api, [[REDOS, {"retry": 5}], ["^(a|aa)+!$", {"retry": 6}]]) == (204, None)
    assert (await api.push(REDOS_QUEUE, b"kept")).status == 200
    await node.stop()
    _, api = await start()
    r = await api.pull(REDOS_QUEUE, t=0)
    assert (r.status, r.body, r.retry) == (200, b"kept", "6"), r
    elapsed = time.monotonic() - began
    assert elapsed < 5, f"set, push, restart and pull took {elapsed:.2f}s"


async def test_posix_class_matches_digits_as_pcre_does(api: Api) -> None:
    await api.push("log-2024", b"d")
    await api.push("log-dig", b"w")
    r = await api.pull_any("^log-[[:digit:]]+$", t=0)
    assert (r.status, r.headers.get("x-lmq-queue-name")) == (200, "log-2024"), r
    assert (await api.pull_any("^log-[[:digit:]]+$", t=0)).status == 204
    r = await api.push_all("^log-[[:alpha:]]+$", b"again")
    assert r.json() == {"log-dig": {"accum": "no"}}, r


async def test_posix_class_in_a_default_entry(api: Api) -> None:
    assert (await _put_defaults(api, [["^n[[:digit:]]", {"retry": 7}]]))[0] == 204
    assert (await api.props("n1")).json()["retry"] == 7
    assert (await api.props("nd")).json()["retry"] == 2


async def test_a_pattern_re2_cannot_run_is_a_400_naming_it(api: Api) -> None:
    await api.push("tmp-1", b"x")
    for regex in ["^(?!tmp)", "(t)\\1", "(?<=t)mp"]:
        r = await api.pull_any(regex, t=0)
        assert r.status == 400 and r.json()["error"] == "invalid_regex", r
        assert repr(regex) in r.json()["detail"], r.json()
        r = await api.push_all(regex, b"y")
        assert r.status == 400 and repr(regex) in r.json()["detail"], r
    assert (await api.pull("tmp-1")).body == b"x", "nothing was pushed or taken"


async def test_a_default_list_with_a_pattern_re2_cannot_run_is_refused_whole(api: Api) -> None:
    assert (await _put_defaults(api, [["^a", {"retry": 1}]]))[0] == 204
    status, doc = await _put_defaults(api, [["^b", {"retry": 1}], ["^(?!tmp)", {"retry": 3}]])
    assert status == 400 and doc is not None and doc["error"] == "invalid_regex" and "(?!tmp)" in doc["detail"]
    assert (await api.request("GET", "/properties")).json() == [["^a", {"retry": 1}]]


async def test_a_pattern_over_the_length_limit_is_a_400_naming_the_limit(api: Api) -> None:
    long = "a" * (MAX_PATTERN_BYTES + 1)
    r = await api.pull_any(long, t=0)
    assert r.status == 400 and r.json()["error"] == "invalid_regex" and str(MAX_PATTERN_BYTES) in r.json()["detail"]
    status, doc = await _put_defaults(api, [[long, {"retry": 1}]])
    assert status == 400 and doc is not None and str(MAX_PATTERN_BYTES) in doc["detail"]
    assert (await api.request("GET", "/properties")).json() == []


async def test_a_default_list_over_the_size_limit_is_a_400_and_nothing_is_stored(api: Api) -> None:
    entries = [[f"^q{i}$", {"retry": 1}] for i in range(MAX_DEFAULTS + 1)]
    status, doc = await _put_defaults(api, entries)
    assert status == 400 and doc is not None and doc["error"] == "invalid_props", doc
    assert str(MAX_DEFAULTS) in doc["detail"], doc
    assert (await api.request("GET", "/properties")).json() == []
    assert (await _put_defaults(api, entries[:MAX_DEFAULTS]))[0] == 204
    assert len((await api.request("GET", "/properties")).json()) == MAX_DEFAULTS


async def test_a_default_list_whose_regexes_are_too_long_together_is_a_400(api: Api) -> None:
    unit = MAX_PATTERN_BYTES - 10
    entries = [[f"^{i:04d}" + "a" * (unit - 5), {"retry": 1}] for i in range(MAX_DEFAULTS_BYTES // unit + 1)]
    status, doc = await _put_defaults(api, entries)
    assert status == 400 and doc is not None and str(MAX_DEFAULTS_BYTES) in doc["detail"], doc
    assert (await api.request("GET", "/properties")).json() == []
    assert (await _put_defaults(api, entries[:-1]))[0] == 204


# Within the length limit, but RE2 compiles it to ~1,800 instructions, all alive at every byte of
# a random name of a and b: tens of milliseconds a match on a 255-byte name.
COSTLY = "|".join(f"(?:a[ab]{{{k}}}c)" for k in range(1, 60))


async def test_a_pattern_too_costly_to_match_is_a_400_naming_it(api: Api) -> None:
    await api.push("ab", b"x")
    for r in (await api.pull_any(COSTLY, t=0), await api.pull_any(COSTLY, t=5), await api.push_all(COSTLY, b"y")):
        assert r.status == 400 and r.json()["error"] == "invalid_regex", r
        assert COSTLY[:40] in r.json()["detail"] and str(MAX_PROGRAM) in r.json()["detail"], r.json()
    status, doc = await _put_defaults(api, [[COSTLY, {"retry": 1}]])
    assert status == 400 and doc is not None and doc["error"] == "invalid_regex" and COSTLY[:40] in doc["detail"]
    assert (await api.request("GET", "/properties")).json() == []
    assert (await api.pull("ab")).body == b"x", "nothing was pushed or taken"


async def test_a_default_list_too_costly_to_match_together_is_a_400_and_nothing_is_stored(api: Api) -> None:
    # Each entry is allowed alone; together a queue's first lookup would search them all.
    entries = [[f"^d{i}[ab]{{700}}$", {"retry": 1}] for i in range(3)]
    programs = [compile_pattern(regex).program for regex, _ in entries]
    assert max(programs) <= MAX_PROGRAM < sum(programs) and sum(programs) > MAX_DEFAULTS_PROGRAM
    status, doc = await _put_defaults(api, entries)
    assert status == 400 and doc is not None and doc["error"] == "invalid_props", doc
    assert str(MAX_DEFAULTS_PROGRAM) in doc["detail"] and "entry 3 ('^d2" in doc["detail"], doc
    assert (await api.request("GET", "/properties")).json() == []
    assert (await _put_defaults(api, entries[:2]))[0] == 204


async def test_after_a_restart_stats_looks_up_the_queues_props_in_turns(
    start: StartNode, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The costliest default list allowed: a first entry near MAX_PROGRAM that matches none of
    # the queues, so each queue's first lookup searches both entries.
    near_bound = "|".join(f"(?:a[ab]{{{k}}}c)" for k in range(1, 44))
    node, api = await start()
    assert await _put_defaults(api, [[near_bound, {"retry": 1}], ["^q", {"retry": 4}]]) == (204, None)
    names = [f"q{i:02d}" for i in range(40)]
    for name in names:
        assert (await api.push(name, b"m")).status == 200
    await node.stop()
    node, api = await start()
    # Each search costs 3 ms here, as a hostile name can make one near the bound cost.
    steps = 0
    at_step: list[int] = []
    original = Pattern.search

    def slow(p: Pattern, name: str) -> bool:
        at_step.append(steps)
        time.sleep(0.003)
        return original(p, name)

    done = False

    async def other_client() -> None:
        nonlocal steps
        while not done:
            steps += 1
            await asyncio.sleep(0)

    monkeypatch.setattr(Pattern, "search", slow)
    other = asyncio.create_task(other_client())
    try:
        r = await api.request("GET", "/stats")
    finally:
        done = True
        await other
    assert r.status == 200 and all(r.json()["queues"][n]["props"]["retry"] == 4 for n in names)
    assert len(at_step) == 2 * len(names), "each queue's props are looked up once, both entries searched"
    busiest = max(at_step.count(s) for s in set(at_step))
    assert busiest <= 2, f"{busiest} searches ran in one loop step (one queue's lookup is 2)"
