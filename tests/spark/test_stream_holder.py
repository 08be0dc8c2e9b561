"""The stream reader's holder tag, without a Spark session: a restarted reader takes back first
what a killed run pulled in a trigger whose offset was never written (the offsets carry the
query's holder tag; the node remembers whom it delivered to)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)

from pylmq.client import HttpClient
from pylmq.errors import BadRequest
from pylmq.node.testing import NodeThread
from pylmq.spark import read_options
from pylmq.spark._stream import LmqStreamReader, offset_ids


@pytest.fixture
def node() -> Iterator[NodeThread]:
    with NodeThread() as n:
        yield n


def reader(node: NodeThread, api: str = "http", **extra: str) -> LmqStreamReader:
    host, port = node.rpc_address
    url = node.http_url if api == "http" else f"rpc://{host}:{port}"
    opts = {"url": url, "queue": "q", "timeout": "0", "maxMessagesPerTrigger": "3", **extra}
    return LmqStreamReader(read_options(opts, stream=True))


def bodies(parts: Any) -> list[str]:
    return sorted(bytes(row[5]).decode() for p in parts for row in p.value)


def push(node: NodeThread, n: int) -> None:
    with HttpClient(node.http_url) as http:
        for i in range(n):
            http.push("q", f"m{i}")


def kill(r: LmqStreamReader) -> None:
    """As a kill -9 of the driver: what the reader holds stays in processing on the node."""
    r._pulled.clear()
    r._held.clear()
    r.stop()


def crash_in_the_window(node: NodeThread, api: str) -> tuple[dict[str, Any], str]:
    """Batch 0 (m0-m2) committed; the next trigger pulled m3-m5 and died before Spark wrote
    its offset. The last written offset and the query's holder tag."""
    push(node, 9)
    first = reader(node, api)
    start = first.initialOffset()
    end = first.latestOffset(start, None)
    assert bodies(first.partitions(start, end)) == ["m0", "m1", "m2"]
    unwritten = first.latestOffset(end, None)  # acks batch 0, pulls m3-m5
    assert end["holder"] == unwritten["holder"] == start["holder"] == first.holder
    kill(first)
    return end, first.holder


@pytest.mark.parametrize("api", ["http", "rpc"])
def test_a_restart_puts_the_orphans_of_an_unwritten_offset_first(node: NodeThread, api: str) -> None:
    end, holder = crash_in_the_window(node, api)
    second = reader(node, api)
    following = second.latestOffset(end, None)
    assert following["holder"] == holder and second.holder == holder
    assert bodies(second.partitions(end, following)) == ["m3", "m4", "m5"], "the orphans first, nothing newer"
    after = second.latestOffset(following, None)
    assert bodies(second.partitions(following, after)) == ["m6", "m7", "m8"]
    second.stop()


def test_the_holder_survives_a_second_crash_before_any_offset(node: NodeThread) -> None:
    end, holder = crash_in_the_window(node, "http")
    second = reader(node)
    second.latestOffset(end, None)  # adopts m3-m5 under the same tag, and dies before the offset
    kill(second)
    third = reader(node)
    following = third.latestOffset(end, None)
    assert third.holder == holder and bodies(third.partitions(end, following)) == ["m3", "m4", "m5"]
    third.stop()


def test_a_replayed_batch_is_not_taken_for_orphans(node: NodeThread) -> None:
    # Batch 0 planned (offset written) but not committed, then batch 1's pull died unwritten.
    push(node, 9)
    first = reader(node, ackOn="commit")
    start = first.initialOffset()
    end = first.latestOffset(start, None)
    first.partitions(start, end)
    first.latestOffset(end, None)  # ackOn=commit: batch 0 stays unacked; pulls m3-m5
    kill(first)
    second = reader(node, ackOn="commit")
    assert bodies(second.partitions(start, end)) == ["m0", "m1", "m2"]  # the replay
    following = second.latestOffset(end, None)
    assert bodies(second.partitions(end, following)) == ["m3", "m4", "m5"]
    assert set(offset_ids(following)["q"]).isdisjoint(offset_ids(end)["q"])
    second.stop()


@pytest.mark.parametrize("api", ["http", "rpc"])
def test_a_node_without_holder_tags_reads_as_before(
    node: NodeThread, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    manager = node.node.manager
    plain_pull = manager.pull_many

    async def pull_many(*args: Any, holder: str | None = None, **kw: Any) -> Any:
        if holder is not None and api == "rpc":
            raise BadRequest("pull_many takes 2 or 3 arguments, got 4")  # an RPC node before tags
        return await plain_pull(*args, **kw)  # an HTTP one ignores the query parameter

    async def claim_holder(*args: Any) -> Any:
        raise BadRequest('the body must be a JSON object {"ids": ...}, with exactly those keys')

    monkeypatch.setattr(manager, "pull_many", pull_many)
    monkeypatch.setattr(manager, "claim_holder", claim_holder)
    end, _ = crash_in_the_window(node, api)
    second = reader(node, api)
    following = second.latestOffset(end, None)
    assert bodies(second.partitions(end, following)) == ["m6", "m7", "m8"], "today's behaviour: (b) stays"
    second.stop()


@pytest.mark.parametrize("api", ["http", "rpc"])
def test_a_stop_between_a_trigger_pull_and_its_offset_leaves_those_messages_first(node: NodeThread, api: str) -> None:
    # Spark stops the reader (query.stop(), or a failure such as the offset log's write) after
    # latestOffset pulled m3-m5 and before their offset was written. Nacked, they would sort at
    # the time of the nack, behind m6-m8, and lose their holder records: the restart would read
    # m6-m8 first and a watermarked query could drop m3-m5 as late.
    push(node, 9)
    first = reader(node, api)
    start = first.initialOffset()
    end = first.latestOffset(start, None)
    assert bodies(first.partitions(start, end)) == ["m0", "m1", "m2"]
    first.latestOffset(end, None)  # acks batch 0, pulls m3-m5: no offset names them
    first.stop()
    second = reader(node, api)
    following = second.latestOffset(end, None)
    assert bodies(second.partitions(end, following)) == ["m3", "m4", "m5"], "the unwritten trigger's first"
    after = second.latestOffset(following, None)
    assert bodies(second.partitions(following, after)) == ["m6", "m7", "m8"]
    second.stop()
