"""Property values outside what the stores can encode are refused (400 naming the field) before
anything changes, so that pushes keep being journaled."""

from __future__ import annotations

import json

import pytest

from pylmq.core.props import MAX_RETRY, MAX_SECONDS
from tests.api.api_helpers import Api, StartNode

JSON_CT = {"Content-Type": "application/json"}

OUT_OF_RANGE: list[tuple[str, int | float]] = [
    ("retry", 2**64 - 1),
    ("retry", 2**64),
    ("retry", MAX_RETRY + 1),
    ("retry", -1),
    ("retry", 10**400),
    ("timeout", 1e300),
    ("timeout", MAX_SECONDS + 0.001),
    ("timeout", 10**400),
    ("accum", 1e306),
    ("accum", MAX_SECONDS + 1),
]


@pytest.mark.parametrize(("field", "value"), OUT_OF_RANGE, ids=[f"{f}={str(v)[:24]}" for f, v in OUT_OF_RANGE])
async def test_out_of_range_value_is_a_400_naming_the_field_and_changes_nothing(
    api: Api, field: str, value: float
) -> None:
    await api.set_props("p2", retry=4)
    r = await api.patch_props("p2", json.dumps({field: value}))
    assert r.status == 400, r
    doc = r.json()
    assert doc["error"] == "invalid_props" and repr(field) in doc["detail"], doc
    assert (await api.props("p2")).json() == {"accum": 0, "retry": 4, "timeout": 30}
    assert (await api.push("p2", b"m")).status == 200
    got = await api.pull("p2", t=0)
    assert (got.status, got.body, got.retry) == (200, b"m", "4"), got


@pytest.mark.parametrize(("field", "value"), OUT_OF_RANGE[:3] + OUT_OF_RANGE[5:6] + OUT_OF_RANGE[8:9])
async def test_out_of_range_default_entry_is_a_400_and_the_list_is_kept(api: Api, field: str, value: float) -> None:
    good = [["^k", {"retry": 1}]]
    assert (await api.request("PUT", "/properties", data=json.dumps(good), headers=JSON_CT)).status == 204
    bad = json.dumps([["^p", {field: value}]])
    r = await api.request("PUT", "/properties", data=bad, headers=JSON_CT)
    assert r.status == 400 and r.json()["error"] == "invalid_props" and repr(field) in r.json()["detail"], r
    assert (await api.request("GET", "/properties")).json() == good


async def test_values_at_the_bounds_are_stored_and_their_pushes_journaled(start: StartNode) -> None:
    node, api = await start()
    await api.set_props("p2", retry=MAX_RETRY, timeout=MAX_SECONDS, accum=0)
    assert (await api.push("p2", b"kept")).status == 200
    big = json.dumps([["^d", {"retry": MAX_RETRY, "accum": 0.25, "timeout": MAX_SECONDS}]])
    assert (await api.request("PUT", "/properties", data=big, headers=JSON_CT)).status == 204
    await node.stop()
    _, api = await start()
    assert (await api.props("p2")).json() == {"accum": 0, "retry": MAX_RETRY, "timeout": MAX_SECONDS}
    assert (await api.request("GET", "/properties")).body == big.replace(" ", "").encode()
    got = await api.pull("p2", t=0)
    assert (got.status, got.body, got.retry) == (200, b"kept", str(MAX_RETRY)), got


async def test_a_refused_change_leaves_pushes_journaled_across_a_restart(start: StartNode) -> None:
    node, api = await start()
    r = await api.patch_props("p2", json.dumps({"retry": 18446744073709551615}))
    assert r.status == 400, r
    assert (await api.push("p2", b"once")).status == 200
    await node.stop()
    _, api = await start()
    got = await api.pull("p2", t=0)
    assert (got.status, got.body, got.retry) == (200, b"once", "2"), got
    assert (await api.pull("p2", t=0)).status == 204, "the message is there exactly once"
