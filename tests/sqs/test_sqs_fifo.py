"""FIFO queues over boto3 against a running node: `.fifo` names, the order of a message group
(several of its messages in one receive, none to another receive while an earlier one is in
flight; several groups, concurrent consumers), a
visibility timeout giving the group's head back first, deduplication (explicit ids, content
based, the 5-minute window on a ManualClock, the scope), SequenceNumber, and AWS's errors.

The tests of a group's order run on the memory store and on the PostgreSQL store (``node`` and
``store`` are parametrized): nodes sharing a database deliver groups by the same rules."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from pylmq.core.clock import ManualClock
from pylmq.node.lmq_node import LMQNode
from pylmq.node.testing import NodeThread, local_options
from tests.sqs.sqs_helpers import ON_BOTH_STORES, client, error_code, sqs_node, store_overrides
from tests.sqs.test_sqs_retention import call

CBD = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}


@pytest.fixture(scope="module", params=ON_BOTH_STORES)
def node(request: pytest.FixtureRequest) -> Iterator[NodeThread]:
    """This module's node, on each store in turn (the conftest's is on the memory store)."""
    with sqs_node(**store_overrides(request)) as n:
        yield n


@pytest.fixture(params=ON_BOTH_STORES)
def store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The overrides of local_options for a node of the test's own on each store in turn."""
    return store_overrides(request)


def send_groups(sqs: Any, url: str, groups: str, n: int) -> None:
    entries = [{"Id": f"{g}{i}", "MessageBody": f"{g}{i}", "MessageGroupId": g} for i in range(n) for g in groups]
    for k in range(0, len(entries), 10):
        got = sqs.send_message_batch(QueueUrl=url, Entries=entries[k : k + 10])
        assert not got.get("Failed"), got


def receive(sqs: Any, url: str, **kw: Any) -> list[dict[str, Any]]:
    return list(sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, **kw).get("Messages", []))


def test_a_receive_takes_several_messages_of_a_group_in_order(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="order.fifo", Attributes=CBD)["QueueUrl"]
    send_groups(sqs, url, "abc", 3)
    # A group's messages in order, one group after the other (SQS fills from one group first).
    got = [m["Body"] for m in receive(sqs, url)]
    assert got == ["a0", "a1", "a2", "b0", "b1", "b2", "c0", "c1", "c2"]
    assert receive(sqs, url) == []  # all in flight


def test_a_groups_later_messages_wait_while_an_earlier_one_is_in_flight(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="held.fifo", Attributes=CBD)["QueueUrl"]
    send_groups(sqs, url, "abc", 3)
    first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=4)["Messages"]
    assert [m["Body"] for m in first] == ["a0", "a1", "a2", "b0"]
    # b1 and b2 are not given to another receive while b0 is in flight; group c is free.
    assert [m["Body"] for m in receive(sqs, url)] == ["c0", "c1", "c2"]
    assert receive(sqs, url) == []
    b0 = first[3]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=b0["ReceiptHandle"])
    assert [m["Body"] for m in receive(sqs, url)] == ["b1", "b2"]


def test_a_message_made_visible_again_waits_behind_the_earlier_one_in_flight(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="again.fifo", Attributes=CBD)["QueueUrl"]
    send_groups(sqs, url, "g", 3)
    h0, h1 = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2)["Messages"]
    assert (h0["Body"], h1["Body"]) == ("g0", "g1")
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=h1["ReceiptHandle"], VisibilityTimeout=0)
    assert receive(sqs, url) == []  # g1 is visible, but g0 before it is in flight
    sqs.delete_message(QueueUrl=url, ReceiptHandle=h0["ReceiptHandle"])
    got = receive(sqs, url, AttributeNames=["ApproximateReceiveCount"])
    assert [(m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in got] == [("g1", "2"), ("g2", "1")]


def test_concurrent_consumers_see_each_group_in_order_once(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="many.fifo", Attributes=CBD)["QueueUrl"]
    groups, n = "pqrstu", 8
    send_groups(sqs, url, groups, n)
    seen: list[str] = []
    lock = threading.Lock()
    errors: list[BaseException] = []

    def consume() -> None:
        c = client_like(sqs)
        try:
            idle = 0
            while idle < 3:
                got = receive(c, url, WaitTimeSeconds=1)
                idle = 0 if got else idle + 1
                for m in got:
                    with lock:
                        seen.append(m["Body"])
                    c.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        except BaseException as e:
            errors.append(e)

    workers = [threading.Thread(target=consume) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=60)
    assert not errors and not any(w.is_alive() for w in workers)
    assert sorted(seen) == sorted(f"{g}{i}" for g in groups for i in range(n))  # each once
    for g in groups:
        # One in flight per group and deleted before the next: the group's order, whoever took it.
        assert [b for b in seen if b[0] == g] == [f"{g}{i}" for i in range(n)]


def client_like(sqs: Any) -> Any:
    """Another boto3 client on the same endpoint (a client is not for several threads)."""
    return boto3.client(
        "sqs",
        endpoint_url=sqs.meta.endpoint_url,
        region_name="us-east-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
    )


def test_fifo_system_attributes_and_queue_attributes(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="attrs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    sent = [
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", MessageGroupId="g", MessageDeduplicationId=f"d{i}")
        for i in range(3)
    ]
    numbers = [int(s["SequenceNumber"]) for s in sent]
    assert numbers == sorted(set(numbers)) and all(len(s["SequenceNumber"]) == 20 for s in sent)
    m, *later = receive(sqs, url, AttributeNames=["All"])
    assert [m["MessageId"], *(x["MessageId"] for x in later)] == [s["MessageId"] for s in sent]
    a = m["Attributes"]
    assert (a["MessageGroupId"], a["MessageDeduplicationId"], a["SequenceNumber"]) == (
        "g",
        "d0",
        sent[0]["SequenceNumber"],
    )
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert (attrs["FifoQueue"], attrs["ContentBasedDeduplication"], attrs["DeduplicationScope"]) == (
        "true",
        "false",
        "queue",
    )
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"ContentBasedDeduplication": "true"})
    got = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ContentBasedDeduplication", "FifoQueue"])
    assert got["Attributes"] == {"ContentBasedDeduplication": "true", "FifoQueue": "true"}
    standard = sqs.create_queue(QueueName="plain")["QueueUrl"]
    assert "FifoQueue" not in sqs.get_queue_attributes(QueueUrl=standard, AttributeNames=["All"])["Attributes"]
    # The same attributes again: the same queue; another value: QueueNameExists.
    assert sqs.create_queue(QueueName="attrs.fifo", Attributes=CBD)["QueueUrl"] == url
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName="attrs.fifo", Attributes={"FifoQueue": "true", "DeduplicationScope": "messageGroup"})
    assert error_code(e) == "QueueAlreadyExists"


def test_fifo_errors_as_aws_answers_them(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="errors.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"MessageDeduplicationId": "d"}, "MissingParameter", "MessageGroupId"),
        ({"MessageGroupId": "g"}, "InvalidParameterValue", "ContentBasedDeduplication"),
        ({"MessageGroupId": "g", "MessageDeduplicationId": "d", "DelaySeconds": 5}, "InvalidParameterValue", "Delay"),
        ({"MessageGroupId": "g", "MessageDeduplicationId": "d d"}, "InvalidParameterValue", "MessageDeduplicationId"),
        ({"MessageGroupId": "g\u00e9", "MessageDeduplicationId": "d"}, "InvalidParameterValue", "MessageGroupId"),
    ]
    for extra, code, text in cases:
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=url, MessageBody="x", **extra)
        assert error_code(e) == code and text in e.value.response["Error"]["Message"], extra
    assert receive(sqs, url) == []  # nothing was sent
    for name, attrs in [("nofifo.fifo", {}), ("nosuffix", {"FifoQueue": "true"})]:
        with pytest.raises(ClientError) as e:
            sqs.create_queue(QueueName=name, Attributes=attrs)
        assert error_code(e) == "InvalidParameterValue", name
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName="std-cbd", Attributes={"ContentBasedDeduplication": "true"})
    assert error_code(e) == "InvalidAttributeName"
    with pytest.raises(ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"FifoQueue": "false"})
    assert error_code(e) == "InvalidAttributeName"
    with pytest.raises(ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"DeduplicationScope": "everywhere"})
    assert error_code(e) == "InvalidAttributeValue"
    standard = sqs.create_queue(QueueName="std-dedup")["QueueUrl"]
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=standard, MessageBody="x", MessageDeduplicationId="d")
    assert error_code(e) == "InvalidParameterValue"
    # In a batch each entry fails on its own.
    got = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok", "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d"},
            {"Id": "bad", "MessageBody": "x", "MessageDeduplicationId": "e"},
        ],
    )
    assert [s["Id"] for s in got["Successful"]] == ["ok"]
    assert [(f["Id"], f["Code"]) for f in got["Failed"]] == [("bad", "MissingParameter")]


# -- on a ManualClock: visibility and the deduplication window ---------------------------------------


async def test_a_visibility_timeout_gives_the_groups_head_back_first(store: dict[str, Any]) -> None:
    clock = ManualClock(1_800_000_000.0)
    node = LMQNode(local_options(sqs=("127.0.0.1", 0), rpc=None, **store), clock=clock)
    await node.start()
    try:
        sqs = client(node)
        url = (await call(sqs.create_queue, QueueName="vis.fifo", Attributes=CBD))["QueueUrl"]
        for i in range(3):
            await call(sqs.send_message, QueueUrl=url, MessageBody=f"h{i}", MessageGroupId="g")
        got = await call(sqs.receive_message, QueueUrl=url, VisibilityTimeout=10)
        assert [m["Body"] for m in got["Messages"]] == ["h0"]
        clock.advance(10)
        got = await call(sqs.receive_message, QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])
        (m,) = got["Messages"]
        assert (m["Body"], m["Attributes"]["ApproximateReceiveCount"]) == ("h0", "2")
        await call(sqs.change_message_visibility, QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=0)
        (m,) = (await call(sqs.receive_message, QueueUrl=url))["Messages"]
        assert m["Body"] == "h0"  # made visible again: still the group's first
        await call(sqs.delete_message, QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        assert [m["Body"] for m in (await call(sqs.receive_message, QueueUrl=url))["Messages"]] == ["h1"]
    finally:
        await node.stop()


async def test_only_the_first_of_several_in_flight_comes_back_when_their_timeouts_end(store: dict[str, Any]) -> None:
    clock = ManualClock(1_800_000_000.0)
    node = LMQNode(local_options(sqs=("127.0.0.1", 0), rpc=None, **store), clock=clock)
    await node.start()
    try:
        sqs = client(node)
        url = (await call(sqs.create_queue, QueueName="vis2.fifo", Attributes=CBD))["QueueUrl"]
        for i in range(3):
            await call(sqs.send_message, QueueUrl=url, MessageBody=f"h{i}", MessageGroupId="g")
        got = await call(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=10)
        h0, h1 = got["Messages"]
        assert (h0["Body"], h1["Body"]) == ("h0", "h1")
        # h1 is deleted first; h0 is still in flight, so h2 waits.
        await call(sqs.delete_message, QueueUrl=url, ReceiptHandle=h1["ReceiptHandle"])
        assert "Messages" not in await call(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10)
        clock.advance(10)
        # h0's timeout ended: it comes back first, h2 after it in the same answer.
        got = await call(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=10)
        assert [m["Body"] for m in got["Messages"]] == ["h0", "h2"]
        # Both timeouts end again: again h0 first (h2 waits behind it), never h2 alone.
        clock.advance(10)
        got = await call(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=1)
        assert [m["Body"] for m in got["Messages"]] == ["h0"]
        assert "Messages" not in await call(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10)
    finally:
        await node.stop()


async def test_followers_whose_timeouts_ended_come_back_after_the_first_in_order(store: dict[str, Any]) -> None:
    clock = ManualClock(1_800_000_000.0)
    node = LMQNode(local_options(sqs=("127.0.0.1", 0), rpc=None, **store), clock=clock)
    await node.start()
    try:
        sqs = client(node)
        url = (await call(sqs.create_queue, QueueName="vis3.fifo", Attributes=CBD))["QueueUrl"]
        for i in range(4):
            await call(sqs.send_message, QueueUrl=url, MessageBody=f"h{i}", MessageGroupId="g")
        got = await call(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=3, VisibilityTimeout=10)
        assert [m["Body"] for m in got["Messages"]] == ["h0", "h1", "h2"]
        clock.advance(10)
        # All three timeouts ended: they come back in order, then h3, never h3 before h1.
        got = await call(sqs.receive_message, QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
        assert [(m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in got["Messages"]] == [
            ("h0", "2"),
            ("h1", "2"),
            ("h2", "2"),
            ("h3", "1"),
        ]
    finally:
        await node.stop()


async def test_deduplication_within_and_after_the_window() -> None:
    clock = ManualClock(1_800_000_000.0)
    node = LMQNode(local_options(sqs=("127.0.0.1", 0), rpc=None), clock=clock)
    await node.start()
    try:
        sqs = client(node)
        url = (await call(sqs.create_queue, QueueName="dedup.fifo", Attributes=CBD))["QueueUrl"]

        async def send(body: str, **kw: Any) -> dict[str, Any]:
            got: dict[str, Any] = await call(sqs.send_message, QueueUrl=url, MessageBody=body, MessageGroupId="g", **kw)
            return got

        first = await send("one", MessageDeduplicationId="d1")
        clock.advance(299)
        again = await send("other body", MessageDeduplicationId="d1")
        assert (again["MessageId"], again["SequenceNumber"]) == (first["MessageId"], first["SequenceNumber"])
        assert node.store.size("dedup.fifo") == 1
        clock.advance(2)  # the window (5 minutes from the first send) is over
        later = await send("one", MessageDeduplicationId="d1")
        assert later["MessageId"] != first["MessageId"] and node.store.size("dedup.fifo") == 2
        # Content-based: the SHA-256 of the body.
        a, b, c = await send("same"), await send("same"), await send("not the same")
        assert a["MessageId"] == b["MessageId"] != c["MessageId"]
        assert node.store.size("dedup.fifo") == 4
        # Scope messageGroup: the same id in two groups is two messages.
        attrs = {"DeduplicationScope": "messageGroup"}
        await call(sqs.set_queue_attributes, QueueUrl=url, Attributes=attrs)
        url2 = (await call(sqs.create_queue, QueueName="scoped.fifo", Attributes={"FifoQueue": "true", **attrs}))[
            "QueueUrl"
        ]
        ids = [
            (
                await call(
                    sqs.send_message, QueueUrl=url2, MessageBody="x", MessageGroupId=g, MessageDeduplicationId="d"
                )
            )["MessageId"]
            for g in ("g1", "g2", "g1")
        ]
        assert ids[0] == ids[2] != ids[1]
    finally:
        await node.stop()


async def test_deduplication_ids_are_rebuilt_from_the_queue_when_forgotten() -> None:
    """A node that lost its map (a restart: the messages are in the store) finds the ids of the
    messages still in the queue that were sent within the window."""
    clock = ManualClock(1_800_000_000.0)
    node = LMQNode(local_options(sqs=("127.0.0.1", 0), rpc=None), clock=clock)
    await node.start()
    try:
        sqs = client(node)
        url = (await call(sqs.create_queue, QueueName="rebuild.fifo", Attributes=CBD))["QueueUrl"]
        first = await call(
            sqs.send_message, QueueUrl=url, MessageBody="b", MessageGroupId="g", MessageDeduplicationId="k"
        )
        assert node.sqs_api is not None
        node.sqs_api._info.clear()  # what a restart forgets
        clock.advance(100)
        again = await call(
            sqs.send_message, QueueUrl=url, MessageBody="b", MessageGroupId="g", MessageDeduplicationId="k"
        )
        assert again["MessageId"] == first["MessageId"] and node.store.size("rebuild.fifo") == 1
    finally:
        await node.stop()


def test_a_delete_wakes_a_long_poll_waiting_for_the_groups_next(node: NodeThread, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="wake.fifo", Attributes=CBD)["QueueUrl"]
    send_groups(sqs, url, "w", 2)
    (head,) = sqs.receive_message(QueueUrl=url, VisibilityTimeout=60)["Messages"]
    got: list[list[dict[str, Any]]] = []
    waiter = threading.Thread(target=lambda: got.append(receive(client_like(sqs), url, WaitTimeSeconds=20)))
    waiter.start()
    node.call(_until_waiting(node, "wake.fifo"))
    start = time.monotonic()
    sqs.delete_message(QueueUrl=url, ReceiptHandle=head["ReceiptHandle"])
    waiter.join(timeout=30)
    assert [m["Body"] for m in got[0]] == ["w1"]
    assert time.monotonic() - start < 15  # woken by the delete, not by the end of its poll


async def _until_waiting(node: NodeThread, name: str) -> None:
    q = node.node.manager.get(name)
    assert q is not None
    for _ in range(500):
        if q.has_waiters():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the receive never waited")


def test_a_dead_letter_queue_is_of_its_source_queues_kind(node: NodeThread) -> None:
    # AWS: a FIFO queue's dead-letter queue is a FIFO queue, a standard queue's a standard one
    # (a standard message moved into a FIFO queue has no group; a FIFO one into a standard
    # queue loses its order).
    sqs = client(node)
    sqs.create_queue(QueueName="kind-std")
    sqs.create_queue(QueueName="kind-dlq.fifo", Attributes={"FifoQueue": "true"})
    arn = "arn:aws:sqs:us-east-1:000000000000:"
    to_std = json.dumps({"maxReceiveCount": 1, "deadLetterTargetArn": arn + "kind-std"})
    to_fifo = json.dumps({"maxReceiveCount": 1, "deadLetterTargetArn": arn + "kind-dlq.fifo"})
    refused: list[tuple[str, dict[str, str]]] = [
        ("kind-src.fifo", {"FifoQueue": "true", "RedrivePolicy": to_std}),
        ("kind-src", {"RedrivePolicy": to_fifo}),
    ]
    for name, attributes in refused:
        with pytest.raises(ClientError) as e:
            sqs.create_queue(QueueName=name, Attributes=attributes)
        assert e.value.response["Error"]["Code"] == "InvalidParameterValue"
        assert "Dead-letter target" in e.value.response["Error"]["Message"]
    assert sqs.list_queues(QueueNamePrefix="kind-src").get("QueueUrls") is None
    fifo = sqs.create_queue(QueueName="kind-src.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    std = sqs.create_queue(QueueName="kind-src")["QueueUrl"]
    for url, policy in ((fifo, to_std), (std, to_fifo)):
        with pytest.raises(ClientError) as e:
            sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
        assert e.value.response["Error"]["Code"] == "InvalidParameterValue"
    # Of the same kind, both are taken.
    sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"RedrivePolicy": to_fifo})
    sqs.set_queue_attributes(QueueUrl=std, Attributes={"RedrivePolicy": to_std})
    got = sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert json.loads(got["RedrivePolicy"])["deadLetterTargetArn"] == arn + "kind-dlq.fifo"
