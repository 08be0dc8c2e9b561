"""Fixtures for store tests: durable stores on temporary directories, simulated crashes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pylmq.core.clock import ManualClock
from pylmq.store.durable import DurableStore
from tests.store.store_helpers import OpenStore


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_000_000.0)


@pytest.fixture
async def open_store(tmp_path: Path, clock: ManualClock) -> AsyncIterator[OpenStore]:
    """``await open_store(dir=None, **options)``: an opened DurableStore, closed at teardown."""
    opened: list[DurableStore] = []

    async def _open(data_dir: Path | None = None, **kw: Any) -> DurableStore:
        kw.setdefault("clock", clock)
        s = DurableStore(data_dir or tmp_path / "data", **kw)
        await s.open()
        opened.append(s)
        return s

    yield _open
    for s in opened:
        if s._flusher is not None:
            await s.close()
