"""SQS FIFO deduplication across nodes sharing one PostgreSQL: sends of one deduplication id
to two nodes at the same moment push one message, and both are answered as that send (its
MessageId and SequenceNumber), as SQS answers a duplicate."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import asyncpg
import pytest

from pylmq.node import LMQNode, NodeOptions

QUEUE = "dedup.fifo"


@pytest.fixture
async def nodes(pg_dsn: str) -> AsyncIterator[list[LMQNode]]:
    started: list[LMQNode] = []
    try:
        for _ in range(2):
            opts = NodeOptions(http=None, rpc=None, sqs=("127.0.0.1", 0), store="postgres", dsn=pg_dsn, pg_timeout=3.0)
            node = LMQNode(opts)
            await node.start()
            started.append(node)
        yield started
    finally:
        for node in started:
            await node.stop()


async def _call(session: aiohttp.ClientSession, node: LMQNode, action: str, params: dict[str, Any]) -> Any:
    assert node.sqs_address is not None
    host, port = node.sqs_address
    headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"}
    async with session.post(f"http://{host}:{port}/", data=json.dumps(params), headers=headers) as r:
        body = await r.read()
        assert r.status == 200, (r.status, body)
        return json.loads(body)


async def test_one_deduplication_id_sent_to_two_nodes_at_once_pushes_one_message(
    nodes: list[LMQNode], pg_dsn: str
) -> None:
    a, b = nodes
    rounds = 40
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        url = (await _call(session, a, "CreateQueue", {"QueueName": QUEUE, "Attributes": {"FifoQueue": "true"}}))[
            "QueueUrl"
        ]
        for _ in range(250):  # b hears of the new queue within milliseconds
            if b.manager.get(QUEUE) is not None:
                break
            await asyncio.sleep(0.02)
        for r in range(rounds):
            sends = [
                _call(
                    session,
                    node,
                    "SendMessage",
                    {
                        "QueueUrl": url,
                        "MessageBody": f"{who}{r}",
                        "MessageGroupId": "g",
                        "MessageDeduplicationId": f"d{r}",
                    },
                )
                for who, node in (("a", a), ("b", b))
            ]
            first, second = await asyncio.gather(*sends)
            assert (first["MessageId"], first["SequenceNumber"]) == (second["MessageId"], second["SequenceNumber"]), r
    conn = await asyncpg.connect(pg_dsn)
    try:
        ids = await conn.fetchval("SELECT count(*) FROM lmq.dedup")
        stored = await conn.fetchval("SELECT count(*) FROM lmq.message")
    finally:
        await conn.close()
    assert ids == rounds
    assert stored == rounds  # one message per deduplication id
