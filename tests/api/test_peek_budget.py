"""A peek page is bounded in bytes (docs/http-api-extensions.md#peek): the JSON stops before the
entry that would take it past :data:`pylmq.api.peek.MAX_PEEK_BYTES`, says so in
``x-lmq-peek-cut: true``, and the reader walks on ``after`` the last id without a skip or a
repeat; a first entry too long alone is shown cut, ``truncated``."""

from __future__ import annotations

from typing import Any

import pytest

from pylmq.api import peek as peek_module
from tests.api.api_helpers import Api, Reply

BUDGET = 16000


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(peek_module, "MAX_PEEK_BYTES", BUDGET)
    return BUDGET


async def peek(api: Api, name: str, **query: Any) -> Reply:
    r = await api.request("GET", f"/peek/{api.q(name)}", query)
    assert r.status == 200, r
    return r


async def all_ids(api: Api, name: str, count: int) -> list[str]:
    """The ids of ``name`` in one page without bodies (small entries: the budget does not cut it)."""
    r = await peek(api, name, n=1000)
    ids = [e["id"] for e in r.json()]
    assert len(set(ids)) == len(ids) == count and "x-lmq-peek-cut" not in r.headers
    return ids


async def walk(api: Api, name: str, **query: Any) -> tuple[list[str], list[Reply]]:
    """Every id of ``name`` page after page, as a client does: on while a page is full or cut."""
    ids: list[str] = []
    pages: list[Reply] = []
    after: str | None = None
    for _ in range(100):  # bounded: the tests' queues take far fewer pages
        page = await peek(api, name, **query, **({"after": after} if after else {}))
        pages.append(page)
        entries = page.json()
        ids += [e["id"] for e in entries]
        if not entries or (len(entries) < int(query["n"]) and "x-lmq-peek-cut" not in page.headers):
            return ids, pages
        after = entries[-1]["id"]
    raise AssertionError("the walk did not end")


async def test_a_page_cut_by_bytes_says_so_and_the_walk_misses_and_repeats_nothing(api: Api, small_budget: int) -> None:
    # Bodies of different lengths and escapes (a control character takes six bytes in JSON).
    for i in range(20):
        await api.push("b", bytes([1 + i % 3]) * (50 + 37 * i), "text/plain")
    pushed = await all_ids(api, "b", 20)
    ids, pages = await walk(api, "b", n=10, body=1)
    assert ids == pushed
    cut = [p for p in pages if "x-lmq-peek-cut" in p.headers]
    assert cut, "the budget never cut a page: the test proves nothing"
    for p in pages:
        assert len(p.body) <= small_budget, len(p.body)
        assert p.headers.get("x-lmq-peek-cut") in (None, "true")
    for p in cut:  # a cut page is short: the next entry would have taken it past the budget
        assert len(p.json()) < 10
    # The whole bodies came back, not previews.
    assert all("truncated" not in e for p in pages for e in p.json())


async def test_previews_are_bounded_too(api: Api, small_budget: int) -> None:
    for _ in range(12):
        await api.push("p", b"\x02" * 400, "text/plain")
    pushed = await all_ids(api, "p", 12)
    ids, pages = await walk(api, "p", n=12, preview=300)
    assert ids == pushed
    assert len(pages) > 1 and all(len(p.body) <= small_budget for p in pages)


async def test_a_page_that_fits_has_no_cut_header(api: Api, small_budget: int) -> None:
    for i in range(3):
        await api.push("s", f"m{i}".encode(), "text/plain")
    r = await peek(api, "s", n=10, body=1)
    assert len(r.json()) == 3 and "x-lmq-peek-cut" not in r.headers
    # Without bodies, a full page of entries still fits and is not cut.
    for _ in range(40):
        await api.push("many", b"x", "text/plain")
    r = await peek(api, "many", n=20)
    assert len(r.body) <= small_budget and len(r.json()) == 20 and "x-lmq-peek-cut" not in r.headers


async def test_a_first_entry_too_long_alone_is_cut_and_said_truncated(api: Api, small_budget: int) -> None:
    await api.push("big", b"z", "text/plain")
    await api.push("big", b"y" * (small_budget * 2), "text/plain")
    await api.push("big", b"w", "text/plain")
    small, big, last = await all_ids(api, "big", 3)
    r = await peek(api, "big", n=3, body=1)
    assert [e["id"] for e in r.json()] == [small] and r.headers["x-lmq-peek-cut"] == "true"
    # Walked on, the long one comes first: shown cut to fit, then the rest of the page.
    r = await peek(api, "big", n=3, body=1, after=small)
    assert len(r.body) <= small_budget and "x-lmq-peek-cut" not in r.headers
    entry, rest = r.json()
    assert entry["id"] == big and entry["truncated"] is True and entry["size"] >= small_budget * 2
    assert 1000 < len(entry["body"]) < small_budget and set(entry["body"]) == {"y"}
    assert rest["id"] == last and rest["body"] == "w"
