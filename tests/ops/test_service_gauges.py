"""The periodic StatsD gauges report queue sizes without looking up any queue's props."""

from __future__ import annotations

import pytest

from pylmq.config.settings import Settings
from pylmq.core import make_item
from pylmq.core.pattern import Pattern
from pylmq.node.service import Service


async def test_gauge_sizes_search_no_default_regex(monkeypatch: pytest.MonkeyPatch) -> None:
    # After a restart or a change of the default list every queue looks its props up again at
    # its next use; the gauges run on the loop and must not make that use for all queues at once.
    service = Service(Settings(store="memory"), statsd=False)
    manager = service.node.manager
    await manager.set_default_props([("^q", {"retry": 4})])
    for i in range(3):
        await manager.push(f"q{i}", make_item(b"x" * (i + 1)))
    manager.refresh_props()  # as a change of the default list does
    searches: list[str] = []
    original = Pattern.search

    def counting(p: Pattern, name: str) -> bool:
        searches.append(name)
        return original(p, name)

    monkeypatch.setattr(Pattern, "search", counting)
    sizes = service._sizes()
    assert sorted(sizes) == ["q0", "q1", "q2"] and [sizes[f"q{i}"][0] for i in range(3)] == [1, 1, 1]
    assert searches == [], "no default regex was searched"
    await manager.close()
