"""SQS's wire formats without sockets (pylmq.wire.sqs): both protocols parsed into one shape,
answers and errors byte for byte, checksums, URLs, receipt handles, SigV4."""

from __future__ import annotations

import hashlib
import json
import urllib.parse

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from pylmq.wire.sqs import (
    SqsError,
    SqsRequest,
    check_signature,
    decode_receipt,
    encode_error,
    encode_receipt,
    encode_result,
    md5_attributes,
    modeled,
    parse_authorization,
    parse_request,
    queue_name_of,
)

JSON_HEADERS = {b"content-type": b"application/x-amz-json-1.0", b"x-amz-target": b"AmazonSQS.SendMessage"}
FORM = {b"content-type": b"application/x-www-form-urlencoded"}


def test_json_request() -> None:
    req = parse_request("POST", "/", "", JSON_HEADERS, b'{"QueueUrl": "q", "MessageBody": "b"}')
    assert req == SqsRequest("SendMessage", {"QueueUrl": "q", "MessageBody": "b"}, "json")


@pytest.mark.parametrize(
    ("headers", "body", "code"),
    [
        ({**JSON_HEADERS, b"x-amz-target": b"Other.SendMessage"}, b"{}", "InvalidAction"),
        (JSON_HEADERS, b"[1]", "SerializationException"),
        (JSON_HEADERS, b"{not json", "SerializationException"),
        (JSON_HEADERS, b"[" * 100_000, "SerializationException"),
    ],
)
def test_bad_json_requests(headers: dict[bytes, bytes], body: bytes, code: str) -> None:
    with pytest.raises(SqsError) as e:
        parse_request("POST", "/", "", headers, body)
    assert e.value.code == code


def test_query_request_lists_maps_and_entries_take_the_json_shape() -> None:
    form = urllib.parse.urlencode(
        {
            "Action": "SendMessageBatch", "Version": "2012-11-05", "QueueUrl": "q",
            "SendMessageBatchRequestEntry.2.Id": "b", "SendMessageBatchRequestEntry.2.MessageBody": "two",
            "SendMessageBatchRequestEntry.1.Id": "a", "SendMessageBatchRequestEntry.1.MessageBody": "one",
            "SendMessageBatchRequestEntry.1.DelaySeconds": "3",
            "SendMessageBatchRequestEntry.1.MessageAttribute.1.Name": "k",
            "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.DataType": "String",
            "SendMessageBatchRequestEntry.1.MessageAttribute.1.Value.StringValue": "v",
        }
    )  # fmt: skip
    req = parse_request("POST", "/", "", FORM, form.encode())
    assert req.action == "SendMessageBatch" and req.protocol == "query"
    assert req.params == {
        "QueueUrl": "q",
        "Entries": [
            {"Id": "a", "MessageBody": "one", "DelaySeconds": 3,
             "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
            {"Id": "b", "MessageBody": "two"},
        ],
    }  # fmt: skip
    form = "Action=ReceiveMessage&AttributeName.2=B&AttributeName.1=A&Attribute.1.Name=N&Attribute.1.Value=V"
    req = parse_request("GET", "/000000000000/q", form, {}, b"")
    assert req.params == {"AttributeNames": ["A", "B"], "Attributes": {"N": "V"}, "QueueUrl": "/000000000000/q"}


@pytest.mark.parametrize(
    "form",
    ["Action=ListQueues&Attribute.0.Name=x", "Action=ListQueues&AttributeName.x=1", "X=1", "Action=List%20Queues"],
)
def test_bad_query_requests(form: str) -> None:
    with pytest.raises(SqsError):
        parse_request("POST", "/", "", FORM, form.encode())


def test_too_many_form_fields_are_refused_before_they_are_held() -> None:
    form = "Action=ListQueues&" + "&".join(f"f{i}=1" for i in range(3000))
    with pytest.raises(SqsError) as e:
        parse_request("POST", "/", "", FORM, form.encode())
    assert e.value.code == "MalformedQueryString"


def test_xml_answers_are_escaped_and_flattened() -> None:
    req = SqsRequest("ReceiveMessage", {}, "query")
    ctype, body = encode_result(
        req,
        {"Messages": [{"Body": "<&>", "Attributes": {"SenderId": "1"},
                       "MessageAttributes": {"k": {"StringValue": "v", "DataType": "String"}}}]},
        "rid",
    )  # fmt: skip
    assert ctype == b"text/xml"
    assert body == (
        b'<?xml version="1.0"?><ReceiveMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">'
        b"<ReceiveMessageResult><Message><Body>&lt;&amp;&gt;</Body>"
        b"<Attribute><Name>SenderId</Name><Value>1</Value></Attribute>"
        b"<MessageAttribute><Name>k</Name><Value><StringValue>v</StringValue><DataType>String</DataType></Value>"
        b"</MessageAttribute></Message></ReceiveMessageResult>"
        b"<ResponseMetadata><RequestId>rid</RequestId></ResponseMetadata></ReceiveMessageResponse>"
    )
    _, body = encode_result(
        SqsRequest("DeleteMessageBatch", {}, "query"), {"Successful": [{"Id": "a"}], "Failed": []}, "r"
    )
    assert b"<DeleteMessageBatchResultEntry><Id>a</Id></DeleteMessageBatchResultEntry>" in body


def test_errors_in_both_protocols() -> None:
    err = modeled("QueueDoesNotExist", "The specified queue does not exist.")
    ctype, head, body = encode_error("json", err, "rid")
    assert ctype == b"application/x-amz-json-1.0"
    assert head == b"x-amzn-query-error: AWS.SimpleQueueService.NonExistentQueue;Sender\r\n"
    assert json.loads(body) == {
        "__type": "com.amazonaws.sqs#QueueDoesNotExist",
        "message": "The specified queue does not exist.",
    }
    ctype, head, body = encode_error("query", err, "rid")
    assert (ctype, head) == (b"text/xml", b"")
    assert b"<Code>AWS.SimpleQueueService.NonExistentQueue</Code>" in body
    assert b"<Type>Sender</Type>" in body and b"<RequestId>rid</RequestId>" in body


def test_md5_of_attributes_vector() -> None:
    # One attribute, name "a", type "String", value "x": lengths as 4 bytes big-endian, the
    # transport byte 1 before a string value (2 before binary).
    expected = hashlib.md5(b"\x00\x00\x00\x01a\x00\x00\x00\x06String\x01\x00\x00\x00\x01x").hexdigest()
    assert md5_attributes({"a": {"DataType": "String", "StringValue": "x"}}) == expected
    binary = hashlib.md5(b"\x00\x00\x00\x01b\x00\x00\x00\x06Binary\x02\x00\x00\x00\x02\x00\xff").hexdigest()
    assert md5_attributes({"b": {"DataType": "Binary", "BinaryValue": "AP8="}}) == binary


@pytest.mark.parametrize(
    ("url", "name"),
    [
        ("http://localhost:9324/000000000000/jobs", "jobs"),
        ("https://sqs.us-east-1.amazonaws.com/123456789012/jobs", "jobs"),
        ("/000000000000/a%2Fb", "a/b"),
        ("jobs", "jobs"),
    ],
)
def test_queue_url_forms(url: str, name: str) -> None:
    assert queue_name_of(url) == name


def test_a_url_without_account_and_name_is_refused() -> None:
    with pytest.raises(SqsError) as e:
        queue_name_of("http://localhost:9324/jobs")
    assert e.value.code == "InvalidParameterValue"


def test_receipt_handles_round_trip_and_garbage_is_refused() -> None:
    uuid = bytes(range(16))
    assert decode_receipt(encode_receipt("q/é", uuid)) == ("q/é", uuid)
    for bad in ("short", "!" * 40, None, 12, "A" * 3000):
        with pytest.raises(SqsError) as e:
            decode_receipt(bad)
        assert e.value.code == "ReceiptHandleIsInvalid"


def signed(body: bytes, secret: str = "secret") -> tuple[dict[bytes, bytes], str]:
    req = AWSRequest(
        method="POST",
        url="http://127.0.0.1:9324/",
        data=body,
        headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"},
    )
    SigV4Auth(Credentials("AKID", secret), "sqs", "eu-west-1").add_auth(req)
    headers = {k.lower().encode(): v.encode() for k, v in req.headers.items()}
    headers[b"host"] = b"127.0.0.1:9324"
    return headers, headers[b"authorization"].decode()


def test_sigv4_of_botocores_signer_checks_out() -> None:
    headers, value = signed(b"{}")
    auth = parse_authorization(value)
    assert auth is not None and (auth.access_key, auth.region, auth.service) == ("AKID", "eu-west-1", "sqs")
    assert check_signature(auth, "secret", "POST", "/", "", headers, b"{}")
    assert not check_signature(auth, "other", "POST", "/", "", headers, b"{}")
    assert not check_signature(auth, "secret", "POST", "/", "", headers, b'{"x": 1}')  # the body changed
    assert parse_authorization("AWS4-HMAC-SHA256 garbage") is None
