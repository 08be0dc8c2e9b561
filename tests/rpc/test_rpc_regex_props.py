"""MessagePack-RPC: regexes RE2 cannot run and out-of-range property values are errors naming
them, and nothing changes."""

from __future__ import annotations

from typing import Any

import pytest

from pylmq.core.pattern import MAX_PROGRAM
from pylmq.core.props import MAX_DEFAULTS
from tests.rpc.rpc_helpers import RawClient


@pytest.mark.parametrize("method", ["pull_any", "push_all"])
@pytest.mark.parametrize("regex", ["^(?!tmp)", "(t)\\1", "a++"])
async def test_a_pattern_re2_cannot_run_is_an_error_naming_it(client: RawClient, method: str, regex: str) -> None:
    await client.call("push", "tmp-1", "kept")
    params: list[Any] = [regex, 0] if method == "pull_any" else [regex, "x"]
    error = await client.error(method, *params)
    assert error[0] == "invalid_regex" and repr(regex) in error[1], error
    got = await client.call("pull", "tmp-1", 0)
    assert got["content"] == "kept" and await client.call("pull", "tmp-1", 0) == "empty"


async def test_posix_class_in_pull_any(client: RawClient) -> None:
    await client.call("push", "job-7", "x")
    await client.call("push", "job-x", "y")
    got = await client.call("pull_any", "^job-[[:digit:]]$", 0)
    assert (got["queue"], got["content"]) == ("job-7", "x")
    assert await client.call("pull_any", "^job-[[:digit:]]$", 0) == "empty"


async def test_a_catastrophic_regex_is_answered_at_once(client: RawClient) -> None:
    await client.call("push", "a" * 25 + "!", "x")
    assert await client.call("pull_any", "(a+)+$", 0, timeout=1.5) == "empty"


@pytest.mark.parametrize(
    "props",
    [{"retry": 2**64 - 1}, {"retry": 2**63 - 1}, {"timeout": 1e300}, {"pack": 1e306}, {"accum": 1e306}],
    ids=["retry-2^64-1", "retry-2^63-1", "timeout", "pack", "accum"],
)
async def test_out_of_range_props_are_an_error_and_change_nothing(client: RawClient, props: dict[str, Any]) -> None:
    await client.call("update_props", "p2", {"retry": 4})
    error = await client.error("update_props", "p2", props)
    field = "pack" if "accum" in props else next(iter(props))
    assert error[0] == "invalid_props" and repr(field) in error[1], error
    error = await client.error("set_default_props", [["^p", props]])
    assert error[0] == "invalid_props", error
    assert await client.call("get_default_props") == []
    assert await client.call("push", "p2", "m") == "ok"
    got = await client.call("pull", "p2", 0)
    assert (got["content"], got["retry"]) == ("m", 4)


async def test_a_default_list_over_the_size_limit_is_refused(client: RawClient) -> None:
    error = await client.error("set_default_props", [[f"^q{i}$", {"retry": 1}] for i in range(MAX_DEFAULTS + 1)])
    assert error[0] == "invalid_props" and str(MAX_DEFAULTS) in error[1], error
    assert await client.call("get_default_props") == []


COSTLY = "|".join(f"(?:a[ab]{{{k}}}c)" for k in range(1, 60))  # ~1,800 RE2 instructions


@pytest.mark.parametrize("method", ["pull_any", "push_all", "set_default_props"])
async def test_a_pattern_too_costly_to_match_is_an_error_naming_it(client: RawClient, method: str) -> None:
    by_method: dict[str, list[Any]] = {
        "pull_any": [COSTLY, 0],
        "push_all": [COSTLY, "x"],
        "set_default_props": [[[COSTLY, {"retry": 1}]]],
    }
    params = by_method[method]
    error = await client.error(method, *params)
    assert error[0] == "invalid_regex" and COSTLY[:40] in error[1] and str(MAX_PROGRAM) in error[1], error
    assert await client.call("get_default_props") == []
