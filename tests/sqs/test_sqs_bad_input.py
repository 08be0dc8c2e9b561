"""Malformed input over the JSON protocol (raw requests, as no SDK would send them): each is a
4xx with AWS's code, never a server error, and changes nothing."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import pytest

from pylmq.node.testing import NodeThread
from tests.sqs.sqs_helpers import endpoint, signed_query, sqs_node, text, unsigned_json


@pytest.fixture(scope="module")
def node() -> Iterator[NodeThread]:
    with sqs_node() as n:
        unsigned_json(n, "CreateQueue", {"QueueName": "raw"})
        yield n


BAD = "InvalidParameterValue"


@pytest.mark.parametrize(
    ("action", "body", "shape"),
    [
        ("ReceiveMessage", {"QueueUrl": "raw", "MessageAttributeNames": [1, 2]}, BAD),
        ("ReceiveMessage", {"QueueUrl": "raw", "AttributeNames": [["All"]]}, BAD),
        ("ReceiveMessage", {"QueueUrl": "raw", "MaxNumberOfMessages": "ten"}, BAD),
        ("ReceiveMessage", {"QueueUrl": "raw", "WaitTimeSeconds": True}, BAD),
        ("SendMessage", {"QueueUrl": "raw", "MessageBody": 5}, BAD),
        ("SendMessage", {"QueueUrl": "raw", "MessageBody": "x", "MessageGroupId": "\ud800"}, BAD),
        ("SendMessage", {"QueueUrl": "raw", "MessageBody": "\ud800"}, "InvalidMessageContents"),
        ("SendMessage", {"QueueUrl": "raw", "MessageBody": "x", "MessageAttributes": []}, BAD),
        ("SendMessage", {"QueueUrl": "raw", "MessageBody": "x", "MessageAttributes": {"a": "s"}}, BAD),
        ("SendMessage", {"QueueUrl": "raw", "MessageBody": "x",
                         "MessageAttributes": {"a": {"DataType": "Binary", "BinaryValue": "not base64!"}}},
         BAD),
        ("SendMessage", {"QueueUrl": "raw", "MessageBody": "x", "MessageDeduplicationId": "d"}, BAD),
        ("SendMessage", {"QueueUrl": "raw"}, "MissingParameter"),
        ("SendMessage", {"QueueUrl": ["raw"], "MessageBody": "x"}, BAD),
        ("SendMessageBatch", {"QueueUrl": "raw", "Entries": [{"Id": "a", "MessageBody": "x", "MessageAttributes": []}]},
         None),
        ("SendMessageBatch", {"QueueUrl": "raw", "Entries": "a"}, BAD),
        ("SendMessageBatch", {"QueueUrl": "raw", "Entries": [5]}, "InvalidBatchEntryId"),
        ("DeleteMessageBatch", {"QueueUrl": "raw", "Entries": [{"Id": "a"}]}, None),
        ("ChangeMessageVisibility", {"QueueUrl": "raw", "ReceiptHandle": 7, "VisibilityTimeout": 1},
         BAD),
        ("CreateQueue", {"QueueName": "raw2", "Attributes": ["VisibilityTimeout"]}, BAD),
        ("CreateQueue", {"QueueName": "raw2", "Attributes": {"RedrivePolicy": "{not json"}}, BAD),
        ("ListQueues", {"NextToken": "%%%"}, BAD),
        ("AddPermission", {"QueueUrl": "raw"}, "InvalidAction"),
        ("TagQueue", {"QueueUrl": "raw"}, "MissingParameter"),
        ("TagQueue", {"QueueUrl": "raw", "Tags": ["k"]}, BAD),
        ("TagQueue", {"QueueUrl": "raw", "Tags": {"k": 5}}, BAD),
        ("UntagQueue", {"QueueUrl": "raw", "TagKeys": [1]}, BAD),
        ("UntagQueue", {"QueueUrl": "raw"}, "MissingParameter"),
        ("CreateQueue", {"QueueName": "raw2", "tags": "k=v"}, BAD),
        # Digits str.isdigit takes and int refuses, and numbers longer than int parses: the
        # client's error, not an InternalFailure.
        ("ReceiveMessage", {"QueueUrl": "raw", "MaxNumberOfMessages": "\u00b2"}, BAD),
        ("ReceiveMessage", {"QueueUrl": "raw", "WaitTimeSeconds": "9" * 5000}, BAD),
        ("CreateQueue", {"QueueName": "raw2", "Attributes": {"VisibilityTimeout": "\u00b2"}},
         "InvalidAttributeValue"),
        ("CreateQueue", {"QueueName": "raw2", "Attributes": {"RedrivePolicy": json.dumps(
            {"maxReceiveCount": "\u00b2", "deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:raw"})}},
         BAD),
    ],
)  # fmt: skip
def test_malformed_requests_get_aws_errors(node: NodeThread, action: str, body: Any, shape: str | None) -> None:
    status, answer, _ = unsigned_json(node, action, body)
    if shape is None:  # a batch whose entries fail one by one
        assert status == 200 and answer["Successful"] == [] and len(answer["Failed"]) == 1, answer
        assert answer["Failed"][0]["SenderFault"] is True
        return
    assert status == 400, answer
    assert answer["__type"] == f"com.amazonaws.sqs#{shape}", answer
    assert node.node.store.size("raw") == 0
    assert node.node.manager.get("raw2") is None


def test_a_json_request_without_a_target_is_answered_in_json(node: NodeThread) -> None:
    req = urllib.request.Request(
        endpoint(node) + "/", data=b"{}", headers={"Content-Type": "application/x-amz-json-1.0"}, method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=10)
    assert e.value.code == 400
    assert json.loads(e.value.read())["__type"] == "com.amazonaws.sqs#InvalidAction"
    assert e.value.headers["x-amzn-query-error"] == "InvalidAction;Sender"


def _oversized(node: NodeThread, headers: dict[str, str], chunked: bool) -> tuple[int, dict[str, str], bytes]:
    """A request whose body is over the SQS port's 4 MiB: announced by Content-Length (refused
    before any body byte), or sent chunked until the server refuses it."""
    host, port = node.node.sqs_address or ("", 0)
    conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        if chunked:
            conn.putrequest("POST", "/")
            for k, v in {**headers, "Transfer-Encoding": "chunked"}.items():
                conn.putheader(k, v)
            conn.endheaders()
            chunk = b"A" * (1 << 20)
            try:
                for _ in range(6):
                    conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                pass  # the server answered and closed before the rest
        else:
            conn.putrequest("POST", "/")
            for k, v in {**headers, "Content-Length": str(5 << 20)}.items():
                conn.putheader(k, v)
            conn.endheaders()
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("chunked", [False, True])
def test_a_request_body_over_the_limit_is_an_sqs_error_in_the_requests_protocol(
    node: NodeThread, chunked: bool
) -> None:
    json_headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.SendMessage"}
    status, headers, body = _oversized(node, json_headers, chunked)
    assert status == 413
    assert headers["content-type"] == "application/x-amz-json-1.0"
    assert headers["x-amzn-query-error"] == "RequestEntityTooLarge;Sender"
    answer = json.loads(body)
    assert answer["__type"] == "com.amazonaws.sqs#RequestEntityTooLarge"
    assert str(4 << 20) in answer["message"]
    status, headers, body = _oversized(node, {"Content-Type": "application/x-www-form-urlencoded"}, chunked)
    assert (status, headers["content-type"]) == (413, "text/xml")
    root = ET.fromstring(body)
    ns = "{http://queue.amazonaws.com/doc/2012-11-05/}"
    assert root.findtext(f"{ns}Error/{ns}Code") == "RequestEntityTooLarge"
    assert root.findtext(f"{ns}Error/{ns}Type") == "Sender"


@pytest.mark.parametrize("index", ["\u00b2", "9" * 5000])
def test_a_query_list_index_int_refuses_is_malformed(node: NodeThread, index: str) -> None:
    status, root, _ = signed_query(
        node,
        {"Action": "SendMessage", "QueueUrl": "raw", "MessageBody": "x", f"MessageAttribute.{index}.Name": "a"},
    )
    assert (status, text(root, "Error/Code")) == (400, "MalformedQueryString")
    assert node.node.store.size("raw") == 0
