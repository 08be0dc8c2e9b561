"""The SQS endpoint as part of a node: what a store serving an Erlang LMQ cluster refuses is
answered with AWS's codes before anything is written, and a stop ends a waiting long poll."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from botocore.exceptions import ClientError

from pylmq.cluster.mnesia_store import erlang_props_problem, mixed_options_problem
from pylmq.core.clock import SystemClock
from pylmq.core.message import PushOptions, Retry
from pylmq.core.props import RawProps
from pylmq.errors import InvalidProps, NotSupported
from pylmq.node import LMQNode
from pylmq.node.testing import local_options
from pylmq.store import MemoryStore
from tests.sqs.sqs_helpers import client, sqs_node


class ClusterRules(MemoryStore):
    """A memory store that refuses what a Mnesia store refuses while it serves a cluster (the
    same checks, cluster/mnesia_store.py), without an Erlang node."""

    def check_props(self, props: RawProps) -> None:
        if (problem := erlang_props_problem(props)) is not None:
            raise InvalidProps(problem)

    def check_push(self, options: PushOptions, retry: Retry) -> None:
        if (problem := mixed_options_problem(options, retry)) is not None:
            raise NotSupported(problem)


async def test_what_an_erlang_cluster_cannot_hold_is_refused_with_aws_codes() -> None:
    node = LMQNode(local_options(sqs=("127.0.0.1", 0), rpc=None), store=ClusterRules(SystemClock()))
    await node.start()
    try:
        sqs = client(node)
        with pytest.raises(ClientError) as e:
            await asyncio.to_thread(sqs.create_queue, QueueName="unlimited")
        assert e.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert "Erlang LMQ nodes" in e.value.response["Error"]["Message"]
        assert node.manager.get("unlimited") is None  # refused before anything was written

        # A queue made over LMQ with a numeric retry works, and counts receives by its retry.
        await node.manager.update_props("lmq", {"retry": 4})
        url = (await asyncio.to_thread(sqs.get_queue_url, QueueName="lmq"))["QueueUrl"]
        await asyncio.to_thread(sqs.send_message, QueueUrl=url, MessageBody="ok", DelaySeconds=0)
        got = await asyncio.to_thread(sqs.receive_message, QueueUrl=url, AttributeNames=["All"])
        assert got["Messages"][0]["Body"] == "ok"
        assert got["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == "1"

        # The attributes kept in the 'sqs' prop cannot be kept in Mnesia's props rows.
        with pytest.raises(ClientError) as e:
            await asyncio.to_thread(sqs.set_queue_attributes, QueueUrl=url, Attributes={"DelaySeconds": "5"})
        assert e.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert "'sqs' prop" in e.value.response["Error"]["Message"]
        assert node.manager.raw_props("lmq") == {"retry": 4}

        # A dead-letter queue is LMQ's dead_letter prop, which the Erlang nodes cannot honour.
        await node.manager.update_props("dlq", {"retry": 1})
        policy = '{"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:dlq", "maxReceiveCount": 3}'
        with pytest.raises(ClientError) as e:
            await asyncio.to_thread(sqs.set_queue_attributes, QueueUrl=url, Attributes={"RedrivePolicy": policy})
        assert e.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert (await node.manager.get_props("lmq")).dead_letter is None
    finally:
        await node.stop()


def test_a_stop_ends_a_waiting_long_poll() -> None:
    with sqs_node() as node:
        sqs = client(node)
        url = sqs.create_queue(QueueName="stop")["QueueUrl"]
        outcome: list[Any] = []

        def receive() -> None:
            try:
                outcome.append(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20))
            except Exception as e:  # the connection may close under it: also an end
                outcome.append(e)

        waiter = threading.Thread(target=receive)
        waiter.start()
        time.sleep(0.3)
        start = time.monotonic()
        node.stop()
        waiter.join(timeout=15)
        assert not waiter.is_alive() and time.monotonic() - start < 15
        assert outcome and (isinstance(outcome[0], Exception) or "Messages" not in outcome[0])
