"""The query protocol (form-encoded requests, XML answers) older SDKs and tools speak: raw
requests SigV4-signed by botocore's signer against a running node."""

from __future__ import annotations

import base64
import hashlib

from pylmq.node.testing import NodeThread
from tests.sqs.sqs_helpers import NS, endpoint, signed_query, text, texts


def test_create_list_get_url_answer_xml_in_the_2012_namespace(node: NodeThread) -> None:
    status, root, headers = signed_query(
        node,
        {"Action": "CreateQueue", "QueueName": "xq", "Attribute.1.Name": "VisibilityTimeout",
         "Attribute.1.Value": "50"},
    )  # fmt: skip
    assert status == 200 and headers["Content-Type"] == "text/xml"
    assert root.tag == f"{NS}CreateQueueResponse"
    url = f"{endpoint(node)}/000000000000/xq"
    assert text(root, "CreateQueueResult/QueueUrl") == url
    assert text(root, "ResponseMetadata/RequestId") == headers["x-amzn-RequestId"]
    _, root, _ = signed_query(node, {"Action": "GetQueueUrl", "QueueName": "xq"})
    assert text(root, "GetQueueUrlResult/QueueUrl") == url
    _, root, _ = signed_query(node, {"Action": "ListQueues", "QueueNamePrefix": "xq"})
    assert texts(root, "ListQueuesResult/QueueUrl") == [url]
    _, root, _ = signed_query(
        node,
        {"Action": "GetQueueAttributes", "QueueUrl": url, "AttributeName.1": "VisibilityTimeout",
         "AttributeName.2": "QueueArn"},
    )  # fmt: skip
    names = texts(root, "GetQueueAttributesResult/Attribute/Name")
    values = texts(root, "GetQueueAttributesResult/Attribute/Value")
    assert dict(zip(names, values, strict=True)) == {
        "VisibilityTimeout": "50",
        "QueueArn": "arn:aws:sqs:us-east-1:000000000000:xq",
    }


def test_send_and_receive_with_attributes(node: NodeThread) -> None:
    signed_query(node, {"Action": "CreateQueue", "QueueName": "xmsg"})
    url = f"{endpoint(node)}/000000000000/xmsg"
    status, root, _ = signed_query(
        node,
        {
            "Action": "SendMessage", "QueueUrl": url, "MessageBody": "<b>&amp; ü</b>",
            "MessageAttribute.1.Name": "kind", "MessageAttribute.1.Value.DataType": "String",
            "MessageAttribute.1.Value.StringValue": "x<y",
            "MessageAttribute.2.Name": "raw", "MessageAttribute.2.Value.DataType": "Binary",
            "MessageAttribute.2.Value.BinaryValue": base64.b64encode(b"\x00\xff").decode(),
        },
    )  # fmt: skip
    assert status == 200
    assert text(root, "SendMessageResult/MD5OfMessageBody") == hashlib.md5("<b>&amp; ü</b>".encode()).hexdigest()
    sent_attrs = text(root, "SendMessageResult/MD5OfMessageAttributes")
    message_id = text(root, "SendMessageResult/MessageId")

    _, root, _ = signed_query(
        node,
        {"Action": "ReceiveMessage", "QueueUrl": url, "MessageAttributeName.1": "All",
         "AttributeName.1": "ApproximateReceiveCount"},
    )  # fmt: skip
    assert text(root, "ReceiveMessageResult/Message/MessageId") == message_id
    assert text(root, "ReceiveMessageResult/Message/Body") == "<b>&amp; ü</b>"
    assert text(root, "ReceiveMessageResult/Message/MD5OfMessageAttributes") == sent_attrs
    assert text(root, "ReceiveMessageResult/Message/Attribute/Name") == "ApproximateReceiveCount"
    assert text(root, "ReceiveMessageResult/Message/Attribute/Value") == "1"
    attrs = {
        text(el, "Name"): (text(el, "Value/DataType"), text(el, "Value/StringValue") or text(el, "Value/BinaryValue"))
        for el in root.iterfind(f"{NS}ReceiveMessageResult/{NS}Message/{NS}MessageAttribute")
    }
    assert attrs == {"kind": ("String", "x<y"), "raw": ("Binary", base64.b64encode(b"\x00\xff").decode())}
    handle = text(root, "ReceiveMessageResult/Message/ReceiptHandle")
    assert handle is not None
    status, root, _ = signed_query(node, {"Action": "DeleteMessage", "QueueUrl": url, "ReceiptHandle": handle})
    assert status == 200 and root.tag == f"{NS}DeleteMessageResponse"


def test_the_queue_url_may_be_the_path_posted_to(node: NodeThread) -> None:
    signed_query(node, {"Action": "CreateQueue", "QueueName": "xpath"})
    status, _, _ = signed_query(node, {"Action": "SendMessage", "MessageBody": "p"}, path="/000000000000/xpath")
    assert status == 200
    _, root, _ = signed_query(node, {"Action": "ReceiveMessage"}, path="/000000000000/xpath")
    assert text(root, "ReceiveMessageResult/Message/Body") == "p"


def test_batches_answer_each_entry(node: NodeThread) -> None:
    signed_query(node, {"Action": "CreateQueue", "QueueName": "xbatch"})
    url = f"{endpoint(node)}/000000000000/xbatch"
    _, root, _ = signed_query(
        node,
        {"Action": "SendMessageBatch", "QueueUrl": url,
         "SendMessageBatchRequestEntry.1.Id": "a", "SendMessageBatchRequestEntry.1.MessageBody": "one",
         "SendMessageBatchRequestEntry.2.Id": "b", "SendMessageBatchRequestEntry.2.MessageBody": "two",
         "SendMessageBatchRequestEntry.2.DelaySeconds": "5",
         "SendMessageBatchRequestEntry.2.MessageAttribute.1.Name": "k",
         "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType": "Number",
         "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue": "7",
         "SendMessageBatchRequestEntry.3.Id": "c", "SendMessageBatchRequestEntry.3.MessageBody": "bad\x01"},
    )  # fmt: skip
    assert texts(root, "SendMessageBatchResult/SendMessageBatchResultEntry/Id") == ["a", "b"]
    assert texts(root, "SendMessageBatchResult/SendMessageBatchResultEntry/MD5OfMessageAttributes") != []
    assert texts(root, "SendMessageBatchResult/BatchResultErrorEntry/Id") == ["c"]
    assert texts(root, "SendMessageBatchResult/BatchResultErrorEntry/Code") == ["InvalidMessageContents"]
    assert texts(root, "SendMessageBatchResult/BatchResultErrorEntry/SenderFault") == ["true"]
    _, root, _ = signed_query(node, {"Action": "ReceiveMessage", "QueueUrl": url, "MaxNumberOfMessages": "10"})
    assert texts(root, "ReceiveMessageResult/Message/Body") == ["one"]  # "two" is delayed


def test_errors_are_error_responses(node: NodeThread) -> None:
    status, root, headers = signed_query(
        node, {"Action": "SendMessage", "QueueUrl": "/000000000000/nowhere", "MessageBody": "x"}
    )
    assert (status, root.tag) == (400, f"{NS}ErrorResponse")
    assert text(root, "Error/Type") == "Sender"
    assert text(root, "Error/Code") == "AWS.SimpleQueueService.NonExistentQueue"
    assert text(root, "Error/Message") == "The specified queue does not exist."
    assert text(root, "RequestId") == headers["x-amzn-RequestId"]
    status, root, _ = signed_query(node, {"Action": "Frobnicate"})
    assert (status, text(root, "Error/Code")) == (400, "InvalidAction")
    status, root, _ = signed_query(node, {"Action": "CreateQueue"})
    assert (status, text(root, "Error/Code")) == (400, "MissingParameter")
    status, root, _ = signed_query(node, {"Action": "ReceiveMessage", "QueueUrl": "xq", "MaxNumberOfMessages": "x"})
    assert (status, text(root, "Error/Code")) == (400, "InvalidParameterValue")
    status, root, _ = signed_query(node, {"Action": "ListQueues", "Attribute.1000.Name": "x"})
    assert (status, text(root, "Error/Code")) == (400, "MalformedQueryString")
