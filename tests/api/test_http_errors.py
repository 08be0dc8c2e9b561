"""Bad input gets a clear 4xx with a JSON reason; the server keeps serving and loses nothing."""

from __future__ import annotations

import uuid

import aiohttp
import pytest

from pylmq.api.http import HttpApi
from pylmq.api.http_server import HttpServer
from pylmq.node import LMQNode
from tests.api.api_helpers import Api
from tests.suite_store import node_eager

UNKNOWN_ID = str(uuid.uuid4())
JSON_CT = {"Content-Type": "application/json"}

# (method, path, query, body, status, reason). Every request names the queue "keep", which holds
# one message while the request is made.
# method, path, query, body, the status expected and the error reason expected.
BadRequest = tuple[str, str, dict[str, str] | None, bytes | None, int, str]

BAD_REQUESTS: list[BadRequest] = [
    ("PATCH", "/properties/keep", None, b'{"retry":', 400, "bad_request"),
    ("PATCH", "/properties/keep", None, b"not json", 400, "bad_request"),
    ("PATCH", "/properties/keep", None, b"", 400, "bad_request"),
    ("PATCH", "/properties/keep", None, b"\xff\xfe\x00", 400, "bad_request"),
    ("PATCH", "/properties/keep", None, b'{"foo":"30"}', 400, "invalid_props"),
    ("PATCH", "/properties/keep", None, b'{"hooks":{}}', 400, "invalid_props"),
    ("PATCH", "/properties/keep", None, b'{"retry":"3"}', 400, "invalid_props"),
    ("PATCH", "/properties/keep", None, b'{"retry":1.5}', 400, "invalid_props"),
    ("PATCH", "/properties/keep", None, b'{"retry":-1}', 400, "invalid_props"),
    ("PATCH", "/properties/keep", None, b'{"timeout":-1}', 400, "invalid_props"),
    ("PATCH", "/properties/keep", None, b'{"timeout":NaN}', 400, "invalid_props"),
    ("PATCH", "/properties/keep", None, b'{"accum":"1"}', 400, "invalid_props"),
    ("PATCH", "/properties/keep", None, b'{"accum":true}', 400, "invalid_props"),
    ("PATCH", "/properties/keep", None, b"[1,2]", 400, "invalid_props"),
    ("PUT", "/properties", None, b'{"retry":1}', 400, "invalid_props"),
    ("PUT", "/properties", None, b'[["(", {"retry":1}]]', 400, "invalid_regex"),
    ("PUT", "/properties", None, b'[["k.*", {"bad":1}]]', 400, "invalid_props"),
    ("PUT", "/properties", None, b'[["k.*"]]', 400, "invalid_props"),
    ("PUT", "/properties", None, b"[[", 400, "bad_request"),
    ("GET", "/messages/keep", {"t": "-1"}, None, 400, "bad_request"),
    ("GET", "/messages/keep", {"t": "abc"}, None, 400, "bad_request"),
    ("GET", "/messages/keep", {"t": ""}, None, 400, "bad_request"),
    ("GET", "/messages/keep", {"t": "nan"}, None, 400, "bad_request"),
    ("GET", "/messages/keep", {"t": "inf"}, None, 400, "bad_request"),
    ("GET", "/messages/keep", {"t": "1e400"}, None, 400, "bad_request"),
    ("GET", "/messages/keep", {"t": "0x10"}, None, 400, "bad_request"),
    ("GET", "/messages/keep", {"t": "0", "cf": "json"}, None, 400, "bad_request"),
    ("GET", "/messages", {"qre": "(", "t": "0"}, None, 400, "invalid_regex"),
    ("GET", "/messages", {"t": "0"}, None, 400, "invalid_regex"),
    ("GET", "/messages", {"qre": "keep", "t": "-0.5"}, None, 400, "bad_request"),
    ("GET", "/messages", {"qre": "keep", "t": "0", "cf": "xml"}, None, 400, "bad_request"),
    ("POST", "/messages", None, b"x", 400, "invalid_regex"),
    ("POST", "/messages", {"qre": "("}, b"x", 400, "invalid_regex"),
    ("POST", "/messages/keep/foo", {"reply": "ack"}, None, 404, "not_found"),
    ("POST", f"/messages/keep/{UNKNOWN_ID}", {"reply": "ack"}, None, 404, "not_found"),
    ("POST", f"/messages/keep/{UNKNOWN_ID}", {"reply": "nack"}, None, 404, "not_found"),
    ("POST", f"/messages/keep/{UNKNOWN_ID}", {"reply": "ext"}, None, 404, "not_found"),
    ("POST", f"/messages/no-such-queue/{UNKNOWN_ID}", {"reply": "ack"}, None, 404, "queue_not_found"),
    ("POST", f"/messages/keep/{UNKNOWN_ID}", {"reply": "done"}, None, 400, "bad_request"),
    ("POST", f"/messages/keep/{UNKNOWN_ID}", None, None, 400, "bad_request"),
    ("DELETE", "/queues/no-such-queue", None, None, 404, "queue_not_found"),
    ("POST", "/messages/schema", None, b"x", 400, "invalid_queue_name"),
    ("POST", "/messages/__lmq_info__", None, b"x", 400, "invalid_queue_name"),
    ("POST", "/messages/" + "n" * 256, None, b"x", 400, "invalid_queue_name"),
    ("PUT", "/messages/keep", None, b"x", 405, "method_not_allowed"),
    ("DELETE", "/messages/keep", None, None, 405, "method_not_allowed"),
    ("GET", f"/messages/keep/{UNKNOWN_ID}", {"reply": "ack"}, None, 405, "method_not_allowed"),
    ("GET", "/queues/keep", None, None, 405, "method_not_allowed"),
    ("PATCH", "/properties", None, b"[]", 405, "method_not_allowed"),
    ("PUT", "/properties/keep", None, b"{}", 405, "method_not_allowed"),
    ("POST", "/stats", None, None, 405, "method_not_allowed"),
    ("GET", "/nowhere", None, None, 404, "not_found"),
    ("GET", "/queues", None, None, 404, "not_found"),
]


def _case_id(case: BadRequest) -> str:
    method, path, query, body, status, _ = case
    return f"{method} {path[:40]} {query or ''} {(body or b'')[:20]!r} -> {status}"


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=[_case_id(c) for c in BAD_REQUESTS])
async def test_bad_request_gets_json_reason_and_loses_nothing(api: Api, case: BadRequest) -> None:
    method, path, query, body, status, reason = case
    await api.push("keep", b"precious")
    r = await api.request(method, path, query, data=body, headers=JSON_CT if body is not None else None)
    assert r.status == status, f"expected {status} for {method} {path} {query}, got {r!r}"
    assert r.headers["content-type"].startswith("application/json"), r
    doc = r.json()
    assert doc["error"] == reason, f"expected reason {reason!r}, got {doc!r}"
    assert isinstance(doc["detail"], str) and doc["detail"], doc
    # The server still serves, and the queued message is there exactly once, retry intact.
    got = await api.pull("keep", t=0)
    assert (got.status, got.body, got.retry) == (200, b"precious", "2"), got
    assert (await api.pull("keep", t=0)).status == 204


async def test_bad_properties_leave_the_old_ones_in_place(api: Api) -> None:
    await api.set_props("stay", retry=4)
    assert (await api.patch_props("stay", {"retry": 1, "bogus": 2})).status == 400
    assert (await api.props("stay")).json() == {"accum": 0, "retry": 4, "timeout": 30}


async def test_bad_default_list_leaves_the_old_one_in_place(api: Api) -> None:
    good = b'[["a.*",{"retry":1}]]'
    assert (await api.request("PUT", "/properties", data=good, headers=JSON_CT)).status == 204
    bad = b'[["b.*",{"retry":1}],["(",{"retry":2}]]'
    assert (await api.request("PUT", "/properties", data=bad, headers=JSON_CT)).status == 400
    assert (await api.request("GET", "/properties")).body == good


async def test_405_names_the_allowed_methods(api: Api) -> None:
    r = await api.request("DELETE", "/stats")
    assert r.status == 405
    assert r.headers["Allow"] == "GET", r


async def test_head_does_not_pull_a_message(api: Api) -> None:
    await api.push("head", b"x")
    r = await api.request("HEAD", "/messages/head")
    assert r.status == 405, r
    assert (await api.pull("head")).body == b"x"


async def test_bad_request_on_a_keep_alive_connection_leaves_it_usable(api: Api) -> None:
    connector = aiohttp.TCPConnector(limit=1)
    async with aiohttp.ClientSession(connector=connector) as one:
        async with one.get(api.url("/messages/ka", {"t": "-1"})) as r:
            assert r.status == 400
        async with one.post(api.url("/messages/ka"), data=b"after") as r:
            assert r.status == 200
        async with one.get(api.url("/messages/ka", {"t": "0"})) as r:
            assert (r.status, await r.read()) == (200, b"after")


async def test_body_over_the_limit_is_413_with_json_and_nothing_is_queued(node: LMQNode) -> None:
    # A second server on the same manager with a tiny limit, so the test needs no 64 MiB body.
    server = HttpServer(HttpApi(node.manager), eager=node_eager(node), max_body=1024)
    host, port = await server.start("127.0.0.1", 0)
    base = f"http://{host}:{port}"
    try:
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{base}/messages/limit", data=b"x" * 4096) as r:
                assert r.status == 413, await r.text()
                doc = await r.json()
                assert doc["error"] == "too_large", doc
            async with s.post(f"{base}/messages/limit", data=b"x" * 1000) as r:
                assert r.status == 200
            async with s.get(f"{base}/messages/limit?t=0") as r:
                assert len(await r.read()) == 1000
            async with s.get(f"{base}/messages/limit?t=0") as r:
                assert r.status == 204, "only the accepted push may be queued"
    finally:
        await server.close()
