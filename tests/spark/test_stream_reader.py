"""The stream reader and its node calls without a Spark session: offsets record ids, a new run
replays and settles an earlier run's batches by id, reply_many/claim fall back on other nodes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)

from pylmq.client import HttpClient
from pylmq.errors import UnknownMethod
from pylmq.node.testing import NodeThread
from pylmq.spark import _connection, read_options
from pylmq.spark._connection import NodeConnection
from pylmq.spark._keep import Keeper
from pylmq.spark._stream import LmqStreamReader, decode_ids, encode_ids, offset_ids


@pytest.fixture
def node() -> Iterator[NodeThread]:
    with NodeThread() as n:
        yield n


def reader(node: NodeThread, queue: str, api: str = "http", **extra: str) -> LmqStreamReader:
    host, port = node.rpc_address
    url = node.http_url if api == "http" else f"rpc://{host}:{port}"
    return LmqStreamReader(read_options({"url": url, "queue": queue, "timeout": "0", **extra}, stream=True))


def rows_of(parts: Any) -> list[Any]:
    return [row for p in parts for row in p.value]


def held(node: NodeThread, queue: str) -> int:
    """Messages of ``queue`` in processing."""
    return sum(1 for m in node.node.store.messages(queue) if m.state.value == "processing")


def push_bodies(node: NodeThread, n: int) -> None:
    """``m0`` .. ``m{n-1}`` into queue ``q``."""
    with HttpClient(node.http_url) as http:
        for i in range(n):
            http.push("q", f"m{i}")


def test_ids_pack_into_base64_and_back() -> None:
    ids = ["0f8fad5b-d9cb-469f-a165-70867728950e", "7c9e6679-7425-40de-944b-e07fc1f90ae7"]
    packed = encode_ids(ids)
    assert isinstance(packed, str) and len(packed) == 44
    assert decode_ids(packed) == ids
    assert encode_ids(["not-a-uuid"]) == ["not-a-uuid"] and decode_ids(["not-a-uuid"]) == ["not-a-uuid"]
    assert decode_ids("%%%") == [] and decode_ids(None) == []


@pytest.mark.parametrize("api", ["http", "rpc"])
def test_a_new_run_replays_an_uncommitted_batch_by_id_before_pulling(node: NodeThread, api: str) -> None:
    with HttpClient(node.http_url) as http:
        for i in range(10):
            http.push("q", f"m{i}")
    first = reader(node, "q", api, maxMessagesPerTrigger="4")
    start = first.initialOffset()
    end = first.latestOffset(start, None)
    assert sorted(offset_ids(end)["q"]) == sorted(r[1] for r in rows_of(first.partitions(start, end)))
    batch = sorted(r[5] for r in rows_of(first.partitions(start, end)))
    first.stop()  # as a crash would: the batch's messages stay in processing
    assert held(node, "q") == 4

    second = reader(node, "q", api, maxMessagesPerTrigger="4")
    replayed = rows_of(second.partitions(start, end))
    assert sorted(r[5] for r in replayed) == batch and {r[1] for r in replayed} == set(offset_ids(end)["q"])
    following = second.latestOffset(end, None)  # batch 1 is committed now: acked, then 4 new
    assert held(node, "q") == 4 and len(node.node.store.messages("q")) == 6
    assert not set(offset_ids(following)["q"]) & set(offset_ids(end)["q"])
    second.stop()


def test_a_new_run_acks_the_committed_batch_instead_of_processing_it(node: NodeThread) -> None:
    push_bodies(node, 3)
    first = reader(node, "q")
    start = first.initialOffset()
    end = first.latestOffset(start, None)
    first.partitions(start, end)
    first.stop()
    (mid, *_) = offset_ids(end)["q"]
    with HttpClient(node.http_url) as http:
        http.nack("q", mid)  # one of them even available again (nacked by a dying worker)
    second = reader(node, "q")
    assert second.latestOffset(end, None) == end, "nothing new to read"
    assert node.node.store.messages("q") == [], "the committed batch was acked, none pulled again"
    second.stop()


def test_stop_gives_back_what_no_batch_took(node: NodeThread) -> None:
    with HttpClient(node.http_url) as http:
        http.push("q", "x")
    r = reader(node, "q")
    r.latestOffset(r.initialOffset(), None)
    assert held(node, "q") == 1
    r.stop()
    assert held(node, "q") == 0 and len(node.node.store.messages("q")) == 1


def test_node_reply_many_goes_in_chunks(node: NodeThread, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_connection, "REPLY_CHUNK", 3)
    calls: list[int] = []
    manager = node.node.manager
    reply_many = manager.reply_many

    async def counted(name: str, reply: str, ids: Any) -> Any:
        calls.append(len(ids))
        return await reply_many(name, reply, ids)

    monkeypatch.setattr(manager, "reply_many", counted)

    async def go() -> tuple[list[str], list[str]]:
        async with NodeConnection(read_options({"url": node.http_url, "queue": "q"})) as n:
            ids = []
            for _ in range(7):
                pulled = await n.pull(0)
                assert pulled is not None
                ids.append(pulled[1])
            return await n.reply_many("ext", "q", [*ids, "gone"])

    with HttpClient(node.http_url) as http:
        for i in range(7):
            http.push("q", str(i))
    ok, missing = asyncio.run(go())
    assert (len(ok), missing, calls) == (7, ["gone"], [3, 3, 2])


@pytest.mark.parametrize("api", ["http", "rpc"])
def test_a_node_without_the_batch_api_is_answered_one_id_at_a_time(
    node: NodeThread, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    async def unknown(*args: Any) -> Any:
        raise UnknownMethod("no such method")  # what a node without the extension answers

    monkeypatch.setattr(node.node.manager, "reply_many", unknown)
    monkeypatch.setattr(node.node.manager, "claim", unknown)
    host, port = node.rpc_address
    url = node.http_url if api == "http" else f"rpc://{host}:{port}"

    async def go() -> tuple[Any, ...]:
        async with NodeConnection(read_options({"url": url, "queue": "q"})) as n:
            first = await n.pull(0)
            assert first is not None
            replied = await n.reply_many("ext", "q", [first[1]])
            claimed = await n.claim("q", [first[1]])
            return replied, claimed, n.reply_api

    with HttpClient(node.http_url) as http:
        http.push("q", "x")
    replied, claimed, batch_api = asyncio.run(go())
    assert replied[1] == [] and len(replied[0]) == 1 and claimed[0] == [] and batch_api is False


def test_a_batch_with_no_range_has_no_rows_even_when_replayed(node: NodeThread) -> None:
    push_bodies(node, 3)
    first = reader(node, "q")
    start = first.initialOffset()
    end = first.latestOffset(start, None)
    assert len(rows_of(first.partitions(start, end))) == 3
    assert first.partitions(end, end) == [], "a no-data batch (the watermark moved) ends where the last began"
    first.stop()
    second = reader(node, "q")
    assert second.partitions(end, end) == [], "replaying it takes nothing back"
    assert held(node, "q") == 3
    second.stop()


def test_a_qre_read_task_keeps_its_messages_on_their_queue_timeout(node: NodeThread) -> None:
    with HttpClient(node.http_url) as http:
        http.update_props("k.a", {"timeout": 1})
        for i in range(5):
            http.push("k.a", str(i))

    async def go() -> tuple[list[Any], Any, set[str], tuple[list[str], list[str]]]:
        async with NodeConnection(read_options({"url": node.http_url, "qre": "^k\\."})) as n:
            rows: list[Any] = []
            async with Keeper(n, rows, None) as keeper:
                for _ in range(5):  # 2.5 s of pulling: the first message's deadline is at 1 s
                    rows.append(await n.pull(0))
                    await asyncio.sleep(0.5)
                again = await n.pull(0)  # an expired message would be delivered again here
            return rows, again, keeper.lost, await n.reply_many("ack", "k.a", [r[1] for r in rows])

    rows, again, lost, (acked, missing) = asyncio.run(go())
    assert sorted(r[5] for r in rows) == [b"0", b"1", b"2", b"3", b"4"]
    assert again is None, "none expired while the task held it"
    assert lost == set() and len(acked) == 5 and missing == []
