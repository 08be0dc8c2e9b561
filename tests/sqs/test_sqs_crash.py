"""What SQS keeps survives kill -9: a message's MessageId, attributes and receive count, the
queue's VisibilityTimeout and RedrivePolicy (LMQ props), on a durable node run as a process."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

READY = re.compile(r"pylmq ready .*\bsqs=\('([\d.]+)', (\d+)\)")


class Node:
    def __init__(self, data_dir: Path) -> None:
        cmd = [
            sys.executable, "-m", "pylmq",
            "--http", "127.0.0.1:0", "--rpc", "127.0.0.1:0", "--qs", "off", "--sqs", "127.0.0.1:0",
            "--store", "durable", "--data-dir", str(data_dir), "--log-level", "warning", "--statsd", "off",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert self.proc.stdout is not None
        seen = []
        deadline = time.monotonic() + 30
        for line in self.proc.stdout:
            seen.append(line)
            if m := READY.search(line):
                self.url = f"http://{m.group(1)}:{m.group(2)}"
                return
            if time.monotonic() > deadline:
                break
        self.kill()
        raise AssertionError(f"node did not start; its output: {''.join(seen)}")

    def client(self) -> Any:
        return boto3.client(
            "sqs",
            endpoint_url=self.url,
            region_name="us-east-1",
            aws_access_key_id="k",
            aws_secret_access_key="s",
            config=Config(retries={"max_attempts": 1}),
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def test_messages_counts_and_redrive_survive_kill_9(tmp_path: Path) -> None:
    attributes = {
        "s": {"DataType": "String", "StringValue": "kept"},
        "b": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
    }
    node = Node(tmp_path)
    try:
        sqs = node.client()
        dlq = sqs.create_queue(QueueName="crash-dlq")["QueueUrl"]
        policy = json.dumps(
            {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:crash-dlq", "maxReceiveCount": 2}
        )
        src = sqs.create_queue(QueueName="crash-src", Attributes={"VisibilityTimeout": "77", "RedrivePolicy": policy})
        sent = sqs.send_message(QueueUrl=src["QueueUrl"], MessageBody="survivor", MessageAttributes=attributes)
        first = sqs.receive_message(QueueUrl=src["QueueUrl"], VisibilityTimeout=0, AttributeNames=["All"])
        assert first["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == "1"
    finally:
        node.kill()

    node = Node(tmp_path)
    try:
        sqs = node.client()
        url = sqs.get_queue_url(QueueName="crash-src")["QueueUrl"]
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "RedrivePolicy"])
        assert attrs["Attributes"]["VisibilityTimeout"] == "77"
        assert json.loads(attrs["Attributes"]["RedrivePolicy"])["maxReceiveCount"] == 2
        m = sqs.receive_message(
            QueueUrl=url, VisibilityTimeout=0, AttributeNames=["All"], MessageAttributeNames=["All"]
        )["Messages"][0]
        assert (m["Body"], m["MessageId"]) == ("survivor", sent["MessageId"])
        assert m["MessageAttributes"] == attributes
        assert m["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
        # The first receive counted: from the record's count once the journal keeps it, else
        # (a journal of format 1) from LMQ's retry accounting, exact here (a finite retry).
        assert m["Attributes"]["ApproximateReceiveCount"] == "2"
        assert "Messages" not in sqs.receive_message(QueueUrl=url)  # the third receive moves it
        dead = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=2)["Messages"][0]
        assert dead["MessageId"] == sent["MessageId"]
    finally:
        node.kill()


def test_queue_attributes_and_a_messages_retention_survive_kill_9(tmp_path: Path) -> None:
    kept = {
        "DelaySeconds": "3",
        "MaximumMessageSize": "2048",
        "MessageRetentionPeriod": "600",
        "ReceiveMessageWaitTimeSeconds": "4",
        "Policy": '{"Version":"2012-10-17"}',
    }
    node = Node(tmp_path)
    try:
        sqs = node.client()
        url = sqs.create_queue(QueueName="crash-attrs", Attributes=kept)["QueueUrl"]
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "0"})
        before = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        sqs.send_message(QueueUrl=url, MessageBody="retained")
    finally:
        node.kill()

    node = Node(tmp_path)
    try:
        sqs = node.client()
        url = sqs.get_queue_url(QueueName="crash-attrs")["QueueUrl"]
        after = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        for key in (*kept, "CreatedTimestamp", "LastModifiedTimestamp"):
            assert after[key] == before[key], key
        assert after["DelaySeconds"] == "0" and after["MaximumMessageSize"] == "2048"
        with pytest.raises(ClientError) as e:
            sqs.send_message(QueueUrl=url, MessageBody="x" * 2049)  # over the kept MaximumMessageSize
        assert e.value.response["Error"]["Code"] == "InvalidParameterValue"
        m = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)["Messages"][0]
        assert m["Body"] == "retained"
    finally:
        node.kill()


def test_a_fifo_queue_its_groups_and_deduplication_ids_survive_kill_9(tmp_path: Path) -> None:
    node = Node(tmp_path)
    try:
        sqs = node.client()
        url = sqs.create_queue(QueueName="crash.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        sent = [
            sqs.send_message(QueueUrl=url, MessageBody=b, MessageGroupId="g", MessageDeduplicationId=b)
            for b in ("g0", "g1", "g2")
        ]
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=60)["Messages"]
        assert [m["Body"] for m in got] == ["g0", "g1"]
    finally:
        node.kill()

    node = Node(tmp_path)
    try:
        sqs = node.client()
        url = sqs.get_queue_url(QueueName="crash.fifo")["QueueUrl"]
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["FifoQueue"])["Attributes"]
        assert attrs == {"FifoQueue": "true"}
        # g0 and g1 are still in flight: their group's next waits behind them.
        assert "Messages" not in sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)
        again = sqs.send_message(QueueUrl=url, MessageBody="g1", MessageGroupId="g", MessageDeduplicationId="g1")
        assert (again["MessageId"], again["SequenceNumber"]) == (sent[1]["MessageId"], sent[1]["SequenceNumber"])
        later = sqs.send_message(QueueUrl=url, MessageBody="g3", MessageGroupId="g", MessageDeduplicationId="g3")
        assert int(later["SequenceNumber"]) > int(sent[2]["SequenceNumber"])
    finally:
        node.kill()


def test_a_deduplication_id_of_a_deleted_message_still_dedups_after_kill_9(tmp_path: Path) -> None:
    """The id of a message already received and deleted is journaled on its own (the message is
    gone): a resend inside the window after kill -9 is answered as the first send was."""
    node = Node(tmp_path)
    try:
        sqs = node.client()
        url = sqs.create_queue(QueueName="gone.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        first = sqs.send_message(QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d1")
        got = sqs.receive_message(QueueUrl=url)["Messages"][0]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=got["ReceiptHandle"])
        assert "Messages" not in sqs.receive_message(QueueUrl=url)
    finally:
        node.kill()

    node = Node(tmp_path)
    try:
        sqs = node.client()
        url = sqs.get_queue_url(QueueName="gone.fifo")["QueueUrl"]
        again = sqs.send_message(QueueUrl=url, MessageBody="once", MessageGroupId="g", MessageDeduplicationId="d1")
        assert (again["MessageId"], again["SequenceNumber"]) == (first["MessageId"], first["SequenceNumber"])
        assert "Messages" not in sqs.receive_message(QueueUrl=url)  # nothing was queued again
        other = sqs.send_message(QueueUrl=url, MessageBody="twice", MessageGroupId="g", MessageDeduplicationId="d2")
        assert other["MessageId"] != first["MessageId"]
        assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["twice"]
    finally:
        node.kill()


def test_queue_tags_survive_kill_9(tmp_path: Path) -> None:
    # The most tags a queue may have, of the longest keys and values in 4-byte characters.
    largest = {f"{i:02d}" + "\U0001f600" * 126: "\U0001f600" * 256 for i in range(50)}
    node = Node(tmp_path)
    try:
        sqs = node.client()
        sqs.create_queue(QueueName="crash-tags-largest", tags=largest)
        url = sqs.create_queue(QueueName="crash-tags", tags={"made": "at creation"})["QueueUrl"]
        sqs.tag_queue(QueueUrl=url, Tags={"added": "later", "dropped": "soon"})
        sqs.untag_queue(QueueUrl=url, TagKeys=["dropped"])
    finally:
        node.kill()
    node = Node(tmp_path)
    try:
        sqs = node.client()
        url = sqs.get_queue_url(QueueName="crash-tags")["QueueUrl"]
        assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"made": "at creation", "added": "later"}
        url = sqs.get_queue_url(QueueName="crash-tags-largest")["QueueUrl"]
        assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == largest
    finally:
        node.kill()
