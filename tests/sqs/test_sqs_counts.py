"""GetQueueAttributes' ApproximateNumberOf* counts are exact at any depth: the store keeps them
as records change, with no walk of the queue (a deep queue's delayed messages and deliveries
sort after its backlog, where a bounded walk would not see them)."""

from __future__ import annotations

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
