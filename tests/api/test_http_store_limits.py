"""The HTTP answer of a durable store near a limit: 503 with a JSON reason, consumers go on."""

from __future__ import annotations

import os
from pathlib import Path

import aiohttp
import pytest

from pylmq.node import LMQNode, NodeOptions

pytestmark = pytest.mark.local_store("the durable store's disk reserve (its journal on the node's disk)")


async def start(tmp_path: Path, reserve: int) -> tuple[LMQNode, str]:
    opts = NodeOptions(http=("127.0.0.1", 0), rpc=None, store="durable", data_dir=tmp_path / "data",
                       disk_reserve_bytes=reserve)  # fmt: skip
    node = LMQNode(opts)
    await node.start()
    assert node.http_address is not None
    host, port = node.http_address
    return node, f"http://{host}:{port}"


async def test_below_the_disk_reserve_a_push_gets_503_store_full_and_pull_and_ack_still_work(
    tmp_path: Path, session: aiohttp.ClientSession
) -> None:
    node, url = await start(tmp_path, 0)
    try:
        async with session.post(f"{url}/messages/q", data=b"before") as r:
            assert r.status == 200
    finally:
        await node.stop()
    st = os.statvfs(tmp_path)
    free = st.f_bavail * st.f_frsize
    # A reserve above the free space, by half (other writers may move it a little meanwhile).
    node, url = await start(tmp_path, free * 3 // 2)
    try:
        for queue in ("q", "new-queue"):
            async with session.post(f"{url}/messages/{queue}", data=b"refused") as r:
                assert (r.status, r.content_type) == (503, "application/json"), r
                doc = await r.json()
            assert doc["error"] == "store_full" and "bytes free" in doc["detail"], doc
        async with session.get(f"{url}/messages/q?t=0") as r:
            assert (r.status, await r.read()) == (200, b"before")
            msg_id = r.headers["x-lmq-message-id"]
        async with session.post(f"{url}/messages/q/{msg_id}?reply=ack") as r:
            assert r.status == 204
        async with session.get(f"{url}/stats") as r:
            assert r.status == 200 and "new-queue" not in (await r.json())["queues"]
    finally:
        await node.stop()
