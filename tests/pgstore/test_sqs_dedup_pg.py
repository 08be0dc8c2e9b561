"""SQS FIFO deduplication across nodes sharing one PostgreSQL: sends of one deduplication id
to two nodes at the same moment push one message, and both are answered as that send (its
MessageId and SequenceNumber), as SQS answers a duplicate."""

from __future__ import annotations

import asyncio

import aiohttp
import asyncpg

from pylmq.node import LMQNode
from tests.pgstore.pg_store_helpers import sqs_call

QUEUE = "dedup.fifo"


async def test_one_deduplication_id_sent_to_two_nodes_at_once_pushes_one_message(
    sqs_nodes: list[LMQNode], pg_dsn: str
) -> None:
    a, b = sqs_nodes
    rounds = 40
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        url = (await sqs_call(session, a, "CreateQueue", {"QueueName": QUEUE, "Attributes": {"FifoQueue": "true"}}))[
            "QueueUrl"
        ]
        for _ in range(250):  # b hears of the new queue within milliseconds
            if b.manager.get(QUEUE) is not None:
                break
            await asyncio.sleep(0.02)
        for r in range(rounds):
            sends = [
                sqs_call(
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
