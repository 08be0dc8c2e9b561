"""A release on a damaged journal: bin/lmq start and foreground refuse with the file and offset,
bin/lmq check-journal reports the damage, repair-journal fixes it, and the node then starts."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pylmq.core.message import make_item
from pylmq.store.durable import DurableStore
from pylmq.store.journal import Frame, PutRecord, scan
from tests.rel.rel_helpers import Release

pytestmark = pytest.mark.slow


async def _fill(data_dir: Path, count: int) -> None:
    s = DurableStore(data_dir)
    await s.open()
    for i in range(count):
        await s.enqueue("jobs", make_item(b"m%d" % i), 2, 0)
    await s.close()


def damage_a_put_mid_segment(data_dir: Path) -> tuple[Path, int]:
    asyncio.run(_fill(data_dir, 10))
    seg = data_dir / "journal-00000001.log"
    puts = [f for f in scan(seg.read_bytes()) if isinstance(f, Frame) and isinstance(f.record, PutRecord)]
    hit = puts[len(puts) // 2]
    data = bytearray(seg.read_bytes())
    data[hit.offset + 12] ^= 0x01
    seg.write_bytes(bytes(data))
    return seg, hit.offset


def test_start_and_foreground_refuse_a_damaged_journal_until_it_is_repaired(release: Release) -> None:
    seg, offset = damage_a_put_mid_segment(release.root / "data")
    damaged = f"journal {seg} is damaged at byte offset {offset}"

    started = release.lmq("start")
    assert started.returncode == 1, started
    assert "Node failed to start (exit status 1)" in started.stderr and damaged in started.stderr, started.stderr
    foreground = release.lmq("foreground")
    assert foreground.returncode == 1 and damaged in foreground.stderr, foreground

    checked = release.lmq("check-journal")
    assert checked.returncode == 1 and f"damaged at offset {offset}.." in checked.stdout, checked
    repaired = release.lmq("repair-journal")
    assert repaired.returncode == 0 and f"{seg}: repaired: kept" in repaired.stdout, repaired
    assert release.lmq("check-journal").returncode == 0

    assert release.lmq("start").returncode == 0
    assert release.lmq("ping").stdout == "pong\n"
    # The node holds the directory: repair refuses rather than rewrite a live journal.
    busy = release.lmq("repair-journal")
    assert busy.returncode == 2 and "in use by a running pylmq node" in busy.stderr, busy
