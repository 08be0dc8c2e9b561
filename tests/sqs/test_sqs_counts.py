"""GetQueueAttributes' ApproximateNumberOf* counts are exact at any depth: the store keeps them
as records change, with no walk of the queue (a deep queue's delayed messages and deliveries
sort after its backlog, where a bounded walk would not see them)."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from tests.sqs.sqs_helpers import client, http, sqs_node

COUNTS = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed"]


def test_counts_of_a_queue_deeper_than_ten_thousand_messages() -> None:
    with sqs_node() as node:
        sqs = client(node)
        url = sqs.create_queue(QueueName="deep")["QueueUrl"]
        lmq = http(node)
        for _ in range(2):  # over LMQ's HTTP API: the same queue
            assert lmq.push_many("deep", [b"x"] * 6000) == 6000
        sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=900)
        sqs.send_message(QueueUrl=url, MessageBody="later too", DelaySeconds=600)
        got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=300)["Messages"]
        assert len(got) == 10
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)["Attributes"]
        assert attrs == {
            "ApproximateNumberOfMessages": "11990",
            "ApproximateNumberOfMessagesNotVisible": "10",
            "ApproximateNumberOfMessagesDelayed": "2",
        }
        sqs.delete_message_batch(
            QueueUrl=url, Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got[:4])]
        )
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=got[4]["ReceiptHandle"], VisibilityTimeout=0)
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert [attrs[k] for k in COUNTS] == ["11991", "5", "2"]
        sqs.purge_queue(QueueUrl=url)
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)["Attributes"]
        assert [attrs[k] for k in COUNTS] == ["0", "0", "0"]


def test_a_receive_at_the_in_flight_limit_of_a_standard_queue_is_over_limit() -> None:
    """SQS's 120,000 in-flight messages per standard queue, made 5 here: a receive takes no more
    than the room left, and one at the limit is OverLimit until a delete makes room."""
    with sqs_node(sqs_max_in_flight=5) as node:
        sqs = client(node)
        url = sqs.create_queue(QueueName="busy")["QueueUrl"]
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(8)])
        first = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=3, VisibilityTimeout=300)["Messages"]
        second = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=300)["Messages"]
        assert (len(first), len(second)) == (3, 2)
        with pytest.raises(ClientError) as e:
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)
        assert e.value.response["Error"]["Code"] == "OverLimit"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
        assert "5 in flight" in e.value.response["Error"]["Message"]
        attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=COUNTS)["Attributes"]
        assert [attrs[k] for k in COUNTS] == ["3", "5", "0"]
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
        again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=300)["Messages"]
        assert len(again) == 1
        # A FIFO queue is not held to it (SQS counts its in-flight messages by group).
        fifo = sqs.create_queue(QueueName="busy.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
        for g in range(7):
            sqs.send_message(QueueUrl=fifo, MessageBody="x", MessageGroupId=f"g{g}", MessageDeduplicationId=f"d{g}")
        taken = [sqs.receive_message(QueueUrl=fifo, VisibilityTimeout=300).get("Messages") for _ in range(7)]
        assert all(len(t or []) == 1 for t in taken)
