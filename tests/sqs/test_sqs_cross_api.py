"""One set of queues: what LMQ's HTTP API pushes SQS receives, what SQS sends LMQ's HTTP API
pulls, and a long poll over SQS is woken by a push over HTTP."""

from __future__ import annotations

import base64
import threading
import time
import urllib.request
from typing import Any

from pylmq.node.testing import NodeThread
from tests.sqs.sqs_helpers import client, http


def test_http_push_is_received_over_sqs_and_deleted(node: NodeThread) -> None:
    sqs = client(node)
    url = sqs.create_queue(QueueName="x-in")["QueueUrl"]
    with http(node) as c:
        c.push("x-in", b"from lmq", "text/plain")
        m = sqs.receive_message(QueueUrl=url, AttributeNames=["All"])["Messages"][0]
        assert m["Body"] == "from lmq"
        assert m["Attributes"]["ApproximateReceiveCount"] == "1"
        sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
        assert c.pull("x-in", timeout=0) is None


def test_a_body_sqs_cannot_carry_comes_base64_and_says_so(node: NodeThread) -> None:
    sqs = client(node)
    url = sqs.create_queue(QueueName="x-bin")["QueueUrl"]
    with http(node) as c:
        c.push("x-bin", b"\x00\xffbinary")
    m = sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"])["Messages"][0]
    assert base64.b64decode(m["Body"]) == b"\x00\xffbinary"
    assert m["MessageAttributes"] == {"lmq.body-encoding": {"StringValue": "base64", "DataType": "String"}}


def test_sqs_send_is_pulled_over_http_with_its_attributes(node: NodeThread) -> None:
    sqs = client(node)
    url = sqs.create_queue(QueueName="x-out")["QueueUrl"]
    sent = sqs.send_message(
        QueueUrl=url, MessageBody="from sqs", MessageAttributes={"k": {"DataType": "String", "StringValue": "v"}}
    )
    # A raw pull, to see the stored headers LMQ's HTTP API answers with.
    with urllib.request.urlopen(node.http_url + "/messages/x-out?t=0", timeout=10) as resp:
        assert resp.read() == b"from sqs"
        headers = {k.lower(): v for k, v in resp.headers.items()}
    assert headers["x-sqs-message-id"] == sent["MessageId"]
    assert headers["x-sqs-attr-k"] == "String v"
    with http(node) as c:
        c.ack("x-out", headers["x-lmq-message-id"])
    assert "Messages" not in sqs.receive_message(QueueUrl=url)


def test_a_long_poll_is_woken_by_an_http_push(node: NodeThread) -> None:
    sqs = client(node)
    url = sqs.create_queue(QueueName="x-wake")["QueueUrl"]
    got: list[Any] = []

    def receive() -> None:
        got.append(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=20))

    waiter = threading.Thread(target=receive)
    start = time.monotonic()
    waiter.start()
    time.sleep(0.5)
    with http(node) as c:
        c.push("x-wake", b"wake up")
    waiter.join(timeout=15)
    assert not waiter.is_alive()
    assert got[0]["Messages"][0]["Body"] == "wake up"
    assert time.monotonic() - start < 15  # woken by the push, not by the 20 s wait ending


def test_a_send_to_a_virtual_queue_fans_out(node: NodeThread) -> None:
    sqs = client(node)
    urls = [sqs.create_queue(QueueName=n)["QueueUrl"] for n in ("x-v1", "x-v2")]
    with http(node) as c:
        c.set_virtual("x-both", ["x-v1", "x-v2"])
    sent = sqs.send_message(QueueUrl="x-both", MessageBody="to both")
    for url in urls:
        m = sqs.receive_message(QueueUrl=url)["Messages"][0]
        assert (m["Body"], m["MessageId"]) == ("to both", sent["MessageId"])


def test_a_queue_deleted_over_http_and_made_again_has_sqs_defaults(node: NodeThread) -> None:
    sqs = client(node)
    url = sqs.create_queue(QueueName="x-again", Attributes={"DelaySeconds": "5"})["QueueUrl"]
    sqs.purge_queue(QueueUrl=url)  # a purge keeps the queue, and its attributes
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])["Attributes"] == {
        "DelaySeconds": "5"
    }
    with http(node) as c:
        c.delete_queue("x-again")
        c.push("x-again", b"new queue")
    assert sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["DelaySeconds"])["Attributes"] == {
        "DelaySeconds": "0"
    }
    assert sqs.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "new queue"
