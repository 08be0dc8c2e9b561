"""``GET /peek/:name?preview=N`` (docs/http-api-extensions.md#peek): the first N bytes of each
body or part, ``truncated`` saying whether bytes were left out; the full ``size`` stays."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from pylmq.api.peek import MAX_PREVIEW
from tests.api.api_helpers import Api


async def peek(api: Api, name: str, **query: Any) -> list[dict[str, Any]]:
    r = await api.request("GET", f"/peek/{api.q(name)}", query)
    assert r.status == 200, r
    entries: list[dict[str, Any]] = r.json()
    return entries


async def test_a_preview_cuts_long_bodies_and_says_so(api: Api) -> None:
    await api.push("p", b"x" * 1000, "text/plain")
    await api.push("p", b"short", "text/plain")
    long, short = await peek(api, "p", preview=10)
    assert (long["body"], long["truncated"]) == ("x" * 10, True)
    assert (short["body"], short["truncated"]) == ("short", False)
    assert long["content_type"] == "text/plain"
    whole = await peek(api, "p")
    assert [e["size"] for e in whole] == [long["size"], short["size"]], "size is the whole record's"


async def test_a_preview_implies_bodies(api: Api) -> None:
    await api.push("p", b"hello")
    [entry] = await peek(api, "p", preview=3)
    assert (entry["body"], entry["truncated"]) == ("hel", True)
    [entry] = await peek(api, "p", preview=5, body=1)
    assert (entry["body"], entry["truncated"]) == ("hello", False)


async def test_a_text_body_cut_inside_a_character_stays_text(api: Api) -> None:
    await api.push("u", "ééé".encode())  # 2 bytes each
    [entry] = await peek(api, "u", preview=3)
    assert (entry["body"], entry["truncated"]) == ("é", True)
    assert "body_base64" not in entry


async def test_a_binary_preview_is_base64_of_the_first_bytes(api: Api) -> None:
    body = bytes(range(256)) * 4
    await api.push("b", body)
    [entry] = await peek(api, "b", preview=300)
    assert base64.b64decode(entry["body_base64"]) == body[:300]
    assert (entry["truncated"], "body" in entry) == (True, False)


async def test_each_part_of_a_compound_message_is_cut(api: Api) -> None:
    await api.set_props("acc", accum=60)
    await api.push("acc", b"a" * 50, "text/plain")
    await api.push("acc", b"bb", "text/x-b")
    [entry] = await peek(api, "acc", preview=4)
    assert entry["type"] == "compound"
    assert entry["parts"] == [
        {"content_type": "text/plain", "body": "aaaa", "truncated": True},
        {"content_type": "text/x-b", "body": "bb", "truncated": False},
    ]


async def test_without_preview_the_answer_is_unchanged(api: Api) -> None:
    await api.push("w", b"x" * 100)
    [entry] = await peek(api, "w", body=1)
    assert entry["body"] == "x" * 100 and "truncated" not in entry


@pytest.mark.parametrize(
    "query",
    [{"preview": "0"}, {"preview": str(MAX_PREVIEW + 1)}, {"preview": "-1"}, {"preview": "1e3"}, {"preview": ""},
     {"preview": "10", "body": "0"}],
)  # fmt: skip
async def test_bad_previews_are_400(api: Api, query: dict[str, str]) -> None:
    await api.push("bad")
    r = await api.request("GET", "/peek/bad", query)
    assert (r.status, r.json()["error"]) == (400, "bad_request"), r
    assert "preview" in r.json()["detail"]


async def test_the_largest_preview_is_accepted(api: Api) -> None:
    await api.push("big", b"y" * (MAX_PREVIEW + 5))
    [entry] = await peek(api, "big", preview=MAX_PREVIEW)
    assert (len(entry["body"]), entry["truncated"]) == (MAX_PREVIEW, True)
