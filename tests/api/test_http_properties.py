"""Queue and default properties over HTTP (docs/lmq-contract.md#queue-properties), and the old path aliases."""

from __future__ import annotations

import pytest

from tests.api.api_helpers import Api

JSON_CT = {"Content-Type": "application/json"}


async def test_queue_properties_default_to_the_system_defaults(api: Api) -> None:
    r = await api.props("fresh")
    assert (r.status, r.body) == (200, b'{"accum":0,"retry":2,"timeout":30}'), r
    assert r.headers["content-type"] == "application/json"


async def test_patch_sets_properties_as_lmq_prints_them(api: Api) -> None:
    r = await api.patch_props("p", '{"accum":30,"retry":0}')
    assert (r.status, r.body) == (204, b""), r
    assert (await api.props("p")).body == b'{"accum":30,"retry":0,"timeout":30}'


async def test_patch_merges_with_existing_properties(api: Api) -> None:
    await api.set_props("m", retry=5)
    await api.set_props("m", timeout=1.5)
    assert (await api.props("m")).json() == {"accum": 0, "retry": 5, "timeout": 1.5}


async def test_patch_accepts_infinite_retry(api: Api) -> None:
    await api.set_props("inf", retry="infinity")
    assert (await api.props("inf")).json()["retry"] == "infinity"


async def test_patch_rounds_accum_to_milliseconds(api: Api) -> None:
    await api.set_props("ms", accum=0.0004)
    await api.set_props("ms2", accum=0.2506)
    assert (await api.props("ms")).json()["accum"] == 0
    assert (await api.props("ms2")).json()["accum"] == 0.251


async def test_delete_resets_queue_properties(api: Api) -> None:
    await api.set_props("r", accum=30, retry=0)
    assert (await api.request("DELETE", "/properties/r")).status == 204
    assert (await api.props("r")).body == b'{"accum":0,"retry":2,"timeout":30}'


async def test_patch_of_an_empty_object_keeps_the_properties(api: Api) -> None:
    await api.set_props("e", retry=7)
    assert (await api.patch_props("e", {})).status == 204
    assert (await api.props("e")).json()["retry"] == 7


async def test_retry_is_fixed_at_push(api: Api) -> None:
    await api.set_props("fixed", retry=5)
    await api.push("fixed")
    await api.set_props("fixed", retry=0)
    assert (await api.pull("fixed")).retry == "5"


async def test_default_list_starts_empty(api: Api) -> None:
    r = await api.request("GET", "/properties")
    assert (r.status, r.body, r.headers["content-type"]) == (200, b"[]", "application/json"), r


async def test_default_list_round_trips_exactly(api: Api) -> None:
    body = b'[["accum/.*",{"accum":30}],[".*",{"retry":0}]]'
    assert (await api.request("PUT", "/properties", data=body, headers=JSON_CT)).status == 204
    assert (await api.request("GET", "/properties")).body == body


async def test_first_matching_default_entry_applies(api: Api) -> None:
    body = b'[["accum/.*",{"accum":30}],[".*",{"retry":0}]]'
    await api.request("PUT", "/properties", data=body, headers=JSON_CT)
    assert (await api.props("accum/a")).body == b'{"accum":30,"retry":2,"timeout":30}'
    assert (await api.props("other")).body == b'{"accum":0,"retry":0,"timeout":30}'


async def test_queue_properties_override_the_default_list(api: Api) -> None:
    await api.request("PUT", "/properties", data=b'[["^o",{"retry":0,"timeout":5}]]', headers=JSON_CT)
    await api.set_props("own", retry=9)
    assert (await api.props("own")).json() == {"accum": 0, "retry": 9, "timeout": 5}


async def test_default_list_applies_to_existing_queues(api: Api) -> None:
    await api.props("existing")
    await api.request("PUT", "/properties", data=b'[["^existing$",{"timeout":3}]]', headers=JSON_CT)
    assert (await api.props("existing")).json()["timeout"] == 3


async def test_delete_clears_the_default_list(api: Api) -> None:
    await api.request("PUT", "/properties", data=b'[[".*",{"retry":0}]]', headers=JSON_CT)
    assert (await api.request("DELETE", "/properties")).status == 204
    assert (await api.request("GET", "/properties")).body == b"[]"
    assert (await api.props("any")).json() == {"accum": 0, "retry": 2, "timeout": 30}


async def test_properties_with_a_trailing_slash_is_the_default_list(api: Api) -> None:
    # LMQ's own tests call /properties/ for the default list.
    assert (await api.request("GET", "/properties/")).body == b"[]"


async def test_default_list_accepts_a_body_without_content_type(api: Api) -> None:
    assert (await api.request("PUT", "/properties", data=b'[[".*",{"retry":1}]]')).status == 204
    assert (await api.props("x")).json()["retry"] == 1


# -- LMQ's older paths: /msgs and /props -----------------------------------------------------------


async def test_old_msgs_path_pushes_pulls_and_replies(api: Api) -> None:
    r = await api.push("old", b"legacy", "text/plain", prefix="/msgs")
    assert (r.status, r.body) == (200, b'{"accum":"no"}'), r
    got = await api.pull("old", prefix="/msgs")
    assert (got.status, got.body, got.headers["content-type"]) == (200, b"legacy", "text/plain"), got
    assert (await api.reply("old", got.id, "ack", prefix="/msgs")).status == 204
    assert (await api.pull("old", prefix="/messages")).status == 204


async def test_old_msgs_path_serves_fan_out_and_pull_any(api: Api) -> None:
    await api.set_props("oldm/a")
    r = await api.push_all("^oldm/", b"x", prefix="/msgs")
    assert r.json() == {"oldm/a": {"accum": "no"}}, r
    got = await api.pull_any("^oldm/", prefix="/msgs")
    assert (got.status, got.headers["x-lmq-queue-name"]) == (200, "oldm/a"), got


async def test_old_props_path_reads_and_writes_the_same_properties(api: Api) -> None:
    r = await api.patch_props("oldp", {"retry": 3}, prefix="/props")
    assert r.status == 204, r
    assert (await api.props("oldp", prefix="/properties")).json()["retry"] == 3
    assert (await api.props("oldp", prefix="/props")).json()["retry"] == 3
    assert (await api.request("DELETE", "/props/oldp")).status == 204
    assert (await api.props("oldp")).json()["retry"] == 2


async def test_old_props_path_serves_the_default_list(api: Api) -> None:
    body = b'[["^x",{"timeout":1}]]'
    assert (await api.request("PUT", "/props", data=body, headers=JSON_CT)).status == 204
    assert (await api.request("GET", "/properties")).body == body
    assert (await api.request("DELETE", "/props")).status == 204
    assert (await api.request("GET", "/props")).body == b"[]"


@pytest.mark.parametrize(
    ("method", "path"),
    [("PUT", "/msgs/q"), ("GET", "/msgs/q/id"), ("POST", "/props"), ("PUT", "/props/q")],
)
async def test_old_paths_answer_405_for_other_methods(api: Api, method: str, path: str) -> None:
    r = await api.request(method, path, data=b"{}")
    assert (r.status, r.json()["error"]) == (405, "method_not_allowed"), r
