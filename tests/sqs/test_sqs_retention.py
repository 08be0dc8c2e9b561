"""MessageRetentionPeriod is a hard expiry: a message older than its queue's retention is never
received, not even once, and never dead-lettered; a queue made over LMQ's APIs keeps LMQ's rule
(no expiry) until SQS gives it attributes. The node runs on a ManualClock: nothing sleeps."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from pylmq.core.clock import ManualClock
from pylmq.node.lmq_node import LMQNode
from pylmq.node.testing import local_options
from tests.sqs.sqs_helpers import client


async def call(f: Any, /, **kwargs: Any) -> Any:
    return await asyncio.to_thread(f, **kwargs)


async def bodies(sqs: Any, url: str) -> list[str]:
    got = await call(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=0)
    return sorted(m["Body"] for m in got.get("Messages", []))


async def test_a_message_older_than_the_retention_is_never_received_nor_dead_lettered() -> None:
    clock = ManualClock(1_800_000_000.0)
    node = LMQNode(local_options(sqs=("127.0.0.1", 0), rpc=None), clock=clock)
    await node.start()
    try:
        sqs = client(node)
        dlq = (await call(sqs.create_queue, QueueName="ret-dlq"))["QueueUrl"]
        policy = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:ret-dlq", "maxReceiveCount": 5})
        attrs = {"MessageRetentionPeriod": "60", "RedrivePolicy": policy}
        url = (await call(sqs.create_queue, QueueName="ret", Attributes=attrs))["QueueUrl"]
        await call(sqs.send_message, QueueUrl=url, MessageBody="old")
        # Delayed past its retention (counted from the send): never received.
        await call(sqs.send_message, QueueUrl=url, MessageBody="late", DelaySeconds=120)
        clock.advance(30)
        await call(sqs.send_message, QueueUrl=url, MessageBody="new")
        assert await bodies(sqs, url) == ["new", "old"]  # received once: not expired yet
        clock.advance(31)
        assert await bodies(sqs, url) == ["new"]
        clock.advance(200)
        assert await bodies(sqs, url) == []
        assert await bodies(sqs, dlq) == []  # expired by retention: gone, not a dead letter
        assert node.store.size("ret") == 0
    finally:
        await node.stop()


async def test_a_queue_made_over_lmq_has_no_retention_until_sqs_gives_it_attributes() -> None:
    clock = ManualClock(1_800_000_000.0)
    node = LMQNode(local_options(sqs=("127.0.0.1", 0), rpc=None), clock=clock)
    await node.start()
    try:
        sqs = client(node)
        await node.manager.update_props("lmq", {"retry": None})
        url = (await call(sqs.get_queue_url, QueueName="lmq"))["QueueUrl"]
        await call(sqs.send_message, QueueUrl=url, MessageBody="kept")
        clock.advance(14 * 86_400)  # past SQS's longest retention
        assert await bodies(sqs, url) == ["kept"]
        await call(sqs.set_queue_attributes, QueueUrl=url, Attributes={"MessageRetentionPeriod": "60"})
        assert (node.manager.raw_props("lmq") or {})["sqs"]["MessageRetentionPeriod"] == "60"
        await call(sqs.send_message, QueueUrl=url, MessageBody="retained")
        clock.advance(61)
        # The retention applies from the send on: the message sent before it keeps LMQ's rule.
        assert await bodies(sqs, url) == ["kept"]
    finally:
        await node.stop()
