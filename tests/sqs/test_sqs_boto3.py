"""boto3 (current botocore, the JSON protocol) against a running node: every action, and AWS's
errors for bad input."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from pylmq.node.testing import NodeThread
from tests.sqs.sqs_helpers import ON_BOTH_STORES, client, endpoint, error_code, sqs_node, store_overrides


def test_create_get_url_list_delete(node: NodeThread, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="cq-one")["QueueUrl"]
    assert url == f"{endpoint(node)}/000000000000/cq-one"
    assert sqs.get_queue_url(QueueName="cq-one")["QueueUrl"] == url
    sqs.create_queue(QueueName="cq-two")
    listed = sqs.list_queues(QueueNamePrefix="cq-")["QueueUrls"]
    assert listed == [url, f"{endpoint(node)}/000000000000/cq-two"]
    sqs.delete_queue(QueueUrl=url)
    assert sqs.list_queues(QueueNamePrefix="cq-")["QueueUrls"] == [f"{endpoint(node)}/000000000000/cq-two"]
    with pytest.raises(ClientError) as e:
        sqs.get_queue_url(QueueName="cq-one")
    assert error_code(e) == "AWS.SimpleQueueService.NonExistentQueue"
    assert isinstance(e.value, sqs.exceptions.QueueDoesNotExist)


def test_list_queues_pages_with_max_results(sqs: Any) -> None:
    for i in range(5):
        sqs.create_queue(QueueName=f"page-{i}")
    first = sqs.list_queues(QueueNamePrefix="page-", MaxResults=2)
    assert [u.rsplit("/", 1)[1] for u in first["QueueUrls"]] == ["page-0", "page-1"]
    second = sqs.list_queues(QueueNamePrefix="page-", MaxResults=2, NextToken=first["NextToken"])
    assert [u.rsplit("/", 1)[1] for u in second["QueueUrls"]] == ["page-2", "page-3"]
    third = sqs.list_queues(QueueNamePrefix="page-", MaxResults=2, NextToken=second["NextToken"])
    assert [u.rsplit("/", 1)[1] for u in third["QueueUrls"]] == ["page-4"]
    assert "NextToken" not in third
    with pytest.raises(ClientError) as e:
        sqs.list_queues(MaxResults=1001)
    assert error_code(e) == "InvalidParameterValue"


def test_create_queue_is_idempotent_with_equal_attributes_only(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="idem", Attributes={"VisibilityTimeout": "40", "DelaySeconds": "2"})["QueueUrl"]
    again = sqs.create_queue(QueueName="idem", Attributes={"VisibilityTimeout": "40", "DelaySeconds": "2"})
    assert again["QueueUrl"] == url
    with pytest.raises(ClientError) as e:
        sqs.create_queue(QueueName="idem", Attributes={"VisibilityTimeout": "41"})
    assert error_code(e) == "QueueAlreadyExists"
    assert isinstance(e.value, sqs.exceptions.QueueNameExists)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"QueueName": "bad name"}, "InvalidParameterValue"),
        ({"QueueName": "x" * 81}, "InvalidParameterValue"),
        ({"QueueName": "ok", "Attributes": {"VisibilityTimeout": "43201"}}, "InvalidAttributeValue"),
        ({"QueueName": "ok", "Attributes": {"MessageRetentionPeriod": "59"}}, "InvalidAttributeValue"),
        ({"QueueName": "ok", "Attributes": {"Policy": "{}", "Nope": "1"}}, "InvalidAttributeName"),
    ],
)
def test_create_queue_refuses_bad_names_and_attributes(sqs: Any, kwargs: dict[str, Any], code: str) -> None:
    with pytest.raises(ClientError) as e:
        sqs.create_queue(**kwargs)
    assert error_code(e) == code
    assert "ok" not in [u.rsplit("/", 1)[1] for u in sqs.list_queues().get("QueueUrls", [])]


def test_queue_attributes_get_and_set(node: NodeThread, sqs: Any) -> None:
    before = int(time.time())
    url = sqs.create_queue(QueueName="attrs", Attributes={"VisibilityTimeout": "45", "MaximumMessageSize": "2048"})[
        "QueueUrl"
    ]
    attrs = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attrs["VisibilityTimeout"] == "45"
    assert attrs["MaximumMessageSize"] == "2048"
    assert attrs["DelaySeconds"] == "0"
    assert attrs["ReceiveMessageWaitTimeSeconds"] == "0"
    assert attrs["MessageRetentionPeriod"] == "345600"
    assert attrs["QueueArn"] == "arn:aws:sqs:us-east-1:000000000000:attrs"
    assert before <= int(attrs["CreatedTimestamp"]) <= int(time.time())
    assert attrs["ApproximateNumberOfMessages"] == "0"
    assert "RedrivePolicy" not in attrs
    # VisibilityTimeout is the LMQ queue's timeout prop.
    props = node.call(node.node.manager.get_props("attrs"))
    assert props.timeout == 45 and props.retry is None

    sqs.set_queue_attributes(QueueUrl=url, Attributes={"VisibilityTimeout": "7", "DelaySeconds": "3"})
    one = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout", "DelaySeconds"])["Attributes"]
    assert one == {"VisibilityTimeout": "7", "DelaySeconds": "3"}
    assert node.call(node.node.manager.get_props("attrs")).timeout == 7
    with pytest.raises(ClientError) as e:
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Bogus"])
    assert error_code(e) == "InvalidAttributeName"
    with pytest.raises(ClientError) as e:
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "901"})
    assert error_code(e) == "InvalidAttributeValue"


def test_approximate_counts(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="counts")["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=60)
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)
    attrs = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    assert attrs == {
        "ApproximateNumberOfMessages": "2",
        "ApproximateNumberOfMessagesNotVisible": "1",
        "ApproximateNumberOfMessagesDelayed": "1",
    }


def attribute_digest(attributes: dict[str, dict[str, Any]]) -> str:
    """MD5OfMessageAttributes as AWS documents it, built byte by byte for the test."""
    out = b""
    for name in sorted(attributes):
        value = attributes[name]
        dtype = value["DataType"].encode()
        out += len(name.encode()).to_bytes(4, "big") + name.encode() + len(dtype).to_bytes(4, "big") + dtype
        raw = value["BinaryValue"] if "BinaryValue" in value else value["StringValue"].encode()
        out += (b"\x02" if "BinaryValue" in value else b"\x01") + len(raw).to_bytes(4, "big") + raw
    return hashlib.md5(out).hexdigest()


def test_send_receive_delete_with_attributes_and_checksums(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="msgs")["QueueUrl"]
    attributes: dict[str, dict[str, Any]] = {
        "color": {"DataType": "String", "StringValue": "blué"},
        "n": {"DataType": "Number.int", "StringValue": "42"},
        "blob": {"DataType": "Binary", "BinaryValue": bytes([0, 1, 255])},
    }
    sent = sqs.send_message(QueueUrl=url, MessageBody="héllo", MessageAttributes=attributes)
    assert sent["MD5OfMessageBody"] == hashlib.md5("héllo".encode()).hexdigest()
    assert sent["MD5OfMessageAttributes"] == attribute_digest(attributes)
    # A fixed vector: one attribute a=String "x".
    assert (
        attribute_digest({"a": {"DataType": "String", "StringValue": "x"}})
        == hashlib.md5(b"\x00\x00\x00\x01a\x00\x00\x00\x06String\x01\x00\x00\x00\x01x").hexdigest()
    )

    got = sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["All"], MessageSystemAttributeNames=["All"], WaitTimeSeconds=1
    )["Messages"]
    assert len(got) == 1
    m = got[0]
    assert m["MessageId"] == sent["MessageId"]
    assert m["Body"] == "héllo"
    assert m["MD5OfBody"] == sent["MD5OfMessageBody"]
    assert m["MD5OfMessageAttributes"] == sent["MD5OfMessageAttributes"]
    assert m["MessageAttributes"] == attributes
    assert m["Attributes"]["ApproximateReceiveCount"] == "1"
    assert abs(int(m["Attributes"]["SentTimestamp"]) - time.time() * 1000) < 60_000
    assert int(m["Attributes"]["ApproximateFirstReceiveTimestamp"]) >= int(m["Attributes"]["SentTimestamp"])
    assert m["Attributes"]["SenderId"] == "000000000000"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    # A handle whose delivery is over is answered as AWS does: a success.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def test_attribute_name_filters(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="filters")["QueueUrl"]
    attributes = {
        "bar.x": {"DataType": "String", "StringValue": "x"},
        "bar.y": {"DataType": "String", "StringValue": "y"},
        "other": {"DataType": "String", "StringValue": "o"},
    }
    sqs.send_message(QueueUrl=url, MessageBody="b", MessageAttributes=attributes)
    m = sqs.receive_message(
        QueueUrl=url, MessageAttributeNames=["bar.*"], AttributeNames=["ApproximateReceiveCount"], VisibilityTimeout=0
    )["Messages"][0]
    assert set(m["MessageAttributes"]) == {"bar.x", "bar.y"}
    assert m["MD5OfMessageAttributes"] == attribute_digest({k: attributes[k] for k in ("bar.x", "bar.y")})
    assert m["Attributes"] == {"ApproximateReceiveCount": "1"}
    m = sqs.receive_message(QueueUrl=url)["Messages"][0]
    assert "MessageAttributes" not in m and "Attributes" not in m
    with pytest.raises(ClientError) as e:
        sqs.receive_message(QueueUrl=url, MessageSystemAttributeNames=["Nope"])
    assert error_code(e) == "InvalidAttributeName"


def test_receive_count_grows_and_visibility_timeout(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="vis")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="again")
    first = sqs.receive_message(QueueUrl=url, VisibilityTimeout=1, AttributeNames=["All"])["Messages"][0]
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # in flight
    second = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5, AttributeNames=["All"])["Messages"][0]
    assert second["MessageId"] == first["MessageId"]
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    assert (
        second["Attributes"]["ApproximateFirstReceiveTimestamp"]
        == first["Attributes"]["ApproximateFirstReceiveTimestamp"]
    )
    # The first delivery is over: its handle no longer changes anything.
    with pytest.raises(ClientError) as e:
        sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=5)
    assert error_code(e) == "AWS.SimpleQueueService.MessageNotInflight"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=second["ReceiptHandle"], VisibilityTimeout=0)
    third = sqs.receive_message(QueueUrl=url, AttributeNames=["ApproximateReceiveCount"])["Messages"][0]
    assert third["Attributes"]["ApproximateReceiveCount"] == "3"


def test_change_visibility_extends_the_deadline(node: NodeThread, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="extend", Attributes={"VisibilityTimeout": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="slow")
    m = sqs.receive_message(QueueUrl=url)["Messages"][0]
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"], VisibilityTimeout=600)
    time.sleep(1.3)  # past the queue's 1 s timeout: only the 600 s deadline keeps it hidden
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    [record] = node.call(node.node.manager.peek("extend", None, 10))
    assert record.ts > time.time() + 500


def test_receive_many_and_batches(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="batch")["QueueUrl"]
    res = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[{"Id": f"e{i}", "MessageBody": f"b{i}"} for i in range(10)],
    )
    assert [s["Id"] for s in res["Successful"]] == [f"e{i}" for i in range(10)]
    assert res.get("Failed", []) == []
    assert res["Successful"][3]["MD5OfMessageBody"] == hashlib.md5(b"b3").hexdigest()
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == sorted(f"b{i}" for i in range(10))
    vis = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[{"Id": "v0", "ReceiptHandle": got[0]["ReceiptHandle"], "VisibilityTimeout": 100},
                 {"Id": "v1", "ReceiptHandle": unknown_delivery("batch"), "VisibilityTimeout": 100}],
    )  # fmt: skip
    assert [s["Id"] for s in vis["Successful"]] == ["v0"]
    assert [(f["Id"], f["Code"], f["SenderFault"]) for f in vis["Failed"]] == [
        ("v1", "AWS.SimpleQueueService.MessageNotInflight", True)
    ]
    deleted = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            *({"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got[:9])),
            {"Id": "bad", "ReceiptHandle": "not a handle"},
        ],
    )
    assert len(deleted["Successful"]) == 9
    assert [(f["Id"], f["Code"]) for f in deleted["Failed"]] == [("bad", "ReceiptHandleIsInvalid")]


Q = "AWS.SimpleQueueService."
INVALID = "InvalidParameterValue"


def attr(dtype: str, value: str) -> dict[str, str]:
    return {"DataType": dtype, "StringValue": value}


def unknown_delivery(queue: str) -> str:
    """A well-formed receipt handle of a delivery the queue never made."""
    return base64.urlsafe_b64encode(b"\x01" + bytes(16) + queue.encode()).decode()


@pytest.mark.parametrize(
    ("entries", "code"),
    [
        ([], f"{Q}EmptyBatchRequest"),
        ([{"Id": f"e{i}", "MessageBody": "x"} for i in range(11)], f"{Q}TooManyEntriesInBatchRequest"),
        ([{"Id": "same", "MessageBody": "x"}, {"Id": "same", "MessageBody": "y"}], f"{Q}BatchEntryIdsNotDistinct"),
        ([{"Id": "bad id!", "MessageBody": "x"}], f"{Q}InvalidBatchEntryId"),
        ([{"Id": f"e{i}", "MessageBody": "x" * 30_000} for i in range(9)], f"{Q}BatchRequestTooLong"),
    ],
)  # fmt: skip
def test_batch_errors(sqs: Any, entries: list[dict[str, Any]], code: str) -> None:
    url = sqs.create_queue(QueueName="batch-errors")["QueueUrl"]
    with pytest.raises(ClientError) as e:
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert error_code(e) == code
    assert "Messages" not in sqs.receive_message(QueueUrl=url)  # nothing of the batch was sent


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"MessageBody": "x" * 262_145}, "InvalidParameterValue"),
        ({"MessageBody": "bad \x01 char"}, "InvalidMessageContents"),
        ({"MessageBody": "x", "DelaySeconds": 901}, "InvalidParameterValue"),
        ({"MessageBody": "x", "MessageAttributes": {"AWS.x": attr("String", "v")}}, "InvalidParameterValue"),
        ({"MessageBody": "x", "MessageAttributes": {"n": attr("Number", "abc")}}, "InvalidParameterValue"),
        ({"MessageBody": "x", "MessageAttributes": {"n": attr("Blob", "abc")}}, "InvalidParameterValue"),
        ({"MessageBody": "x", "MessageAttributes": {f"a{i}": attr("String", "v") for i in range(11)}}, INVALID),
    ],
)  # fmt: skip
def test_send_message_errors(sqs: Any, kwargs: dict[str, Any], code: str) -> None:
    url = sqs.create_queue(QueueName="send-errors")["QueueUrl"]
    with pytest.raises(ClientError) as e:
        sqs.send_message(QueueUrl=url, **kwargs)
    assert error_code(e) == code


def test_receive_parameter_bounds_and_bad_handles(sqs: Any) -> None:
    url = sqs.create_queue(QueueName="bounds")["QueueUrl"]
    for kwargs in ({"MaxNumberOfMessages": 11}, {"MaxNumberOfMessages": 0}, {"WaitTimeSeconds": 21},
                   {"VisibilityTimeout": 43201}):  # fmt: skip
        with pytest.raises(ClientError) as e:
            sqs.receive_message(QueueUrl=url, **kwargs)
        assert error_code(e) == "InvalidParameterValue", kwargs
    for handle in ("garbage", base64.urlsafe_b64encode(b"\x01" + bytes(16) + b"other-queue").decode()):
        with pytest.raises(ClientError) as e:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
        assert error_code(e) == "ReceiptHandleIsInvalid"
        assert isinstance(e.value, sqs.exceptions.ReceiptHandleIsInvalid)


def test_missing_queue_for_every_queue_action(sqs: Any, node: NodeThread) -> None:
    url = f"{endpoint(node)}/000000000000/missing"
    calls: list[Callable[[], Any]] = [
        lambda: sqs.send_message(QueueUrl=url, MessageBody="x"),
        lambda: sqs.receive_message(QueueUrl=url),
        lambda: sqs.delete_queue(QueueUrl=url),
        lambda: sqs.purge_queue(QueueUrl=url),
        lambda: sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"]),
        lambda: sqs.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "1"}),
        lambda: sqs.delete_message(QueueUrl=url, ReceiptHandle="x" * 30),
        lambda: sqs.list_dead_letter_source_queues(QueueUrl=url),
    ]
    for call in calls:
        with pytest.raises(ClientError) as e:
            call()
        assert error_code(e) == "AWS.SimpleQueueService.NonExistentQueue"
    assert node.node.manager.get("missing") is None  # no action on a missing queue made it


def test_queue_url_may_be_a_bare_name(sqs: Any) -> None:
    sqs.create_queue(QueueName="bare")
    sqs.send_message(QueueUrl="bare", MessageBody="by name")
    assert sqs.receive_message(QueueUrl="bare")["Messages"][0]["Body"] == "by name"


def test_delay_seconds_from_the_message_and_the_queue(node: NodeThread, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="delays", Attributes={"DelaySeconds": "1"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="queue delay")
    sqs.send_message(QueueUrl=url, MessageBody="own delay", DelaySeconds=600)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    got = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"]
    assert [m["Body"] for m in got] == ["queue delay"]
    records = node.call(node.node.manager.peek("delays", None, 10))
    [later] = [r for r in records if r.content[1] == b"own delay"]
    assert later.ts > time.time() + 500


def test_purge_queue_drops_messages_and_keeps_props(node: NodeThread, sqs: Any) -> None:
    url = sqs.create_queue(QueueName="purge", Attributes={"VisibilityTimeout": "33"})["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=str(i))
    sqs.receive_message(QueueUrl=url)
    sqs.purge_queue(QueueUrl=url)
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["VisibilityTimeout", "ApproximateNumberOfMessagesNotVisible"]
    )["Attributes"] == {"VisibilityTimeout": "33", "ApproximateNumberOfMessagesNotVisible": "0"}


def test_redrive_policy_moves_a_message_to_its_dead_letter_queue(node: NodeThread, sqs: Any) -> None:
    dlq = sqs.create_queue(QueueName="redrive-dlq")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": "2"})
    src = sqs.create_queue(QueueName="redrive-src", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    props = node.call(node.node.manager.get_props("redrive-src"))
    assert (props.retry, props.dead_letter) == (1, "redrive-dlq")
    got = json.loads(
        sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"]
    )
    assert got == {"deadLetterTargetArn": arn, "maxReceiveCount": 2}
    assert sqs.list_dead_letter_source_queues(QueueUrl=dlq)["queueUrls"] == [src]

    sent = sqs.send_message(QueueUrl=src, MessageBody="poison")
    for n in (1, 2):
        m = sqs.receive_message(QueueUrl=src, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"])
        assert m["Messages"][0]["Attributes"]["ApproximateReceiveCount"] == str(n)
    assert "Messages" not in sqs.receive_message(QueueUrl=src)  # a third receive moves it instead
    dead = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"], WaitTimeSeconds=2)["Messages"][0]
    assert dead["Body"] == "poison" and dead["MessageId"] == sent["MessageId"]
    assert dead["Attributes"]["DeadLetterQueueSourceArn"] == "arn:aws:sqs:us-east-1:000000000000:redrive-src"

    sqs.set_queue_attributes(QueueUrl=src, Attributes={"RedrivePolicy": ""})
    props = node.call(node.node.manager.get_props("redrive-src"))
    assert (props.retry, props.dead_letter) == (None, None)
    with pytest.raises(ClientError) as e:
        bad = json.dumps({"deadLetterTargetArn": arn.replace("redrive-dlq", "nowhere"), "maxReceiveCount": 1})
        sqs.set_queue_attributes(QueueUrl=src, Attributes={"RedrivePolicy": bad})
    assert error_code(e) == "InvalidParameterValue"


@pytest.fixture(params=ON_BOTH_STORES)
def store_node(request: pytest.FixtureRequest) -> Iterator[NodeThread]:
    """A node of the test's own, on each store in turn."""
    with sqs_node(**store_overrides(request)) as n:
        yield n


def test_a_deleted_dead_letter_queue_is_not_made_again_and_the_message_stays(store_node: NodeThread) -> None:
    # SQS does not create dead-letter queues: once the target of a RedrivePolicy is deleted, a
    # message past maxReceiveCount is not moved (nor dropped); it stays in the source queue and
    # is received again. A queue made again under the target's name takes the moves again.
    node, sqs = store_node, client(store_node)
    dlq = sqs.create_queue(QueueName="gone-dlq")["QueueUrl"]
    arn = "arn:aws:sqs:us-east-1:000000000000:gone-dlq"
    policy = json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": 1})
    src = sqs.create_queue(QueueName="gone-src", Attributes={"RedrivePolicy": policy})["QueueUrl"]
    sent = sqs.send_message(QueueUrl=src, MessageBody="kept")
    sqs.delete_queue(QueueUrl=dlq)
    for n in (1, 2, 3):
        got = sqs.receive_message(QueueUrl=src, VisibilityTimeout=0, AttributeNames=["ApproximateReceiveCount"])
        m = got["Messages"][0]
        assert (m["MessageId"], m["Attributes"]["ApproximateReceiveCount"]) == (sent["MessageId"], str(n))
    assert "gone-dlq" not in [u.rsplit("/", 1)[-1] for u in sqs.list_queues().get("QueueUrls", [])]
    assert node.node.manager.get("gone-dlq") is None
    # The policy still names the queue; once it exists again, the next receive moves the message.
    assert json.loads(
        sqs.get_queue_attributes(QueueUrl=src, AttributeNames=["RedrivePolicy"])["Attributes"]["RedrivePolicy"]
    ) == {"deadLetterTargetArn": arn, "maxReceiveCount": 1}
    dlq = sqs.create_queue(QueueName="gone-dlq")["QueueUrl"]
    assert "Messages" not in sqs.receive_message(QueueUrl=src)
    dead = sqs.receive_message(QueueUrl=dlq, WaitTimeSeconds=2)["Messages"][0]
    assert dead["MessageId"] == sent["MessageId"]


def test_a_failing_action_is_internal_failure_and_the_node_goes_on(node: NodeThread, sqs: Any) -> None:
    api = node.node.sqs_api
    assert api is not None
    real = api._actions["ListQueues"]

    async def broken(params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        raise RuntimeError("a bug")

    api._actions["ListQueues"] = broken
    try:
        with pytest.raises(ClientError) as e:
            sqs.list_queues()
        assert error_code(e) == "InternalFailure"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    finally:
        api._actions["ListQueues"] = real
    assert sqs.list_queues()["ResponseMetadata"]["HTTPStatusCode"] == 200
