"""Bounds and refusals of the batch extensions over real HTTP: a bad count is a 400 (not a 500),
a batch push refuses what no single push can store."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest

MP = {"Content-Type": "application/x-msgpack"}


@pytest.mark.parametrize("n", ["%C2%B2", "%D9%A3", "%EF%BC%95"])  # ², Arabic-Indic 3, fullwidth 5
async def test_pull_many_with_a_unicode_digit_count_is_a_400_not_a_500(api: Any, n: str) -> None:
    # str.isdigit() is true of these, int() refuses the first: none is an ASCII count.
    r = await api.request("GET", f"/batch/q?n={n}&t=0")
    assert r.status == 400, r
    assert json.loads(r.body)["error"] == "bad_request" and "n must be" in json.loads(r.body)["detail"], r


@pytest.mark.parametrize("ct", ["text/plain\r\nX-Evil: 1", "text/plain\x00", "a\nb", "text/\x7f"])
async def test_batch_push_refuses_a_content_type_no_push_can_carry_and_pushes_nothing(api: Any, ct: str) -> None:
    # A push to /messages cannot carry these in its Content-Type (the parser refuses it), and a
    # stored one could not be delivered as a header: the batch is refused whole, naming the item.
    body = msgpack.packb([["text/plain", b"ok"], [ct, b"x"]], use_bin_type=True)
    r = await api.request("POST", "/batch/ct", data=body, headers=MP)
    assert r.status == 400, f"stored a content type with a control character: {r}"
    doc = json.loads(r.body)
    assert doc["error"] == "bad_request" and "message 1" in doc["detail"], doc
    r = await api.request("GET", "/batch/ct", {"n": 10, "t": 0})
    assert msgpack.unpackb(r.body) == [], "a refused batch pushed something"


async def test_batch_push_keeps_a_content_type_with_a_tab_or_latin_1(api: Any) -> None:
    body = msgpack.packb([["text/plain;\tcharset=latin-1", b"a"], ["text/caf\xe9", b"b"]], use_bin_type=True)
    assert (await api.request("POST", "/batch/ok", data=body, headers=MP)).status == 200
    r = await api.request("GET", "/batch/ok", {"n": 10, "t": 0})
    assert [m["content_type"] for m in msgpack.unpackb(r.body)] == ["text/plain;\tcharset=latin-1", "text/caf\xe9"]
