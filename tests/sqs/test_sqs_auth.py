"""SigV4: any request is served by default (signed or not, as ElasticMQ does); with access keys
configured only requests signed by one of them are, others get AWS's errors."""

from __future__ import annotations

import datetime
import hashlib
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import boto3
import botocore.auth
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from pylmq.node.testing import NodeThread
from tests.sqs.sqs_helpers import (
    KEY,
    NS,
    REGION,
    SECRET,
    client,
    endpoint,
    signed_query,
    sqs_node,
    text,
    unsigned_json,
)


def test_by_default_unsigned_and_any_signed_requests_are_served() -> None:
    with sqs_node() as node:
        status, answer, _ = unsigned_json(node, "CreateQueue", {"QueueName": "open"})
        assert status == 200 and answer["QueueUrl"].endswith("/000000000000/open")
        assert client(node, "anyone", "anything").list_queues()["QueueUrls"] == [answer["QueueUrl"]]


@pytest.fixture(scope="module")
def locked() -> Iterator[NodeThread]:
    with sqs_node(sqs_access_keys={KEY: SECRET}) as n:
        yield n


def test_requests_signed_with_a_configured_key_are_served(locked: NodeThread) -> None:
    sqs = client(locked)
    url = sqs.create_queue(QueueName="locked")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="signed")
    assert sqs.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "signed"
    status, root, _ = signed_query(locked, {"Action": "GetQueueUrl", "QueueName": "locked"})
    assert status == 200 and text(root, "GetQueueUrlResult/QueueUrl") == url


def test_a_wrong_secret_is_signature_does_not_match(locked: NodeThread) -> None:
    with pytest.raises(ClientError) as e:
        client(locked, KEY, "not the secret").list_queues()
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    status, root, _ = signed_query(locked, {"Action": "ListQueues"}, secret="not the secret")
    assert (status, root.tag, text(root, "Error/Code")) == (403, f"{NS}ErrorResponse", "SignatureDoesNotMatch")


def test_an_unknown_key_is_invalid_client_token_id(locked: NodeThread) -> None:
    with pytest.raises(ClientError) as e:
        client(locked, "AKIDUNKNOWN", SECRET).list_queues()
    assert e.value.response["Error"]["Code"] == "InvalidClientTokenId"


def test_an_unsigned_request_is_refused(locked: NodeThread) -> None:
    status, answer, headers = unsigned_json(locked, "ListQueues", {})
    assert status == 403
    assert answer["__type"].endswith("#MissingAuthenticationToken")
    assert headers["x-amzn-query-error"] == "MissingAuthenticationToken;Sender"


def _signed_json(node: NodeThread, action: str, body: dict[str, Any]) -> dict[str, str]:
    """The headers botocore's signer gives a JSON-protocol request with ``body``."""
    req = AWSRequest(
        method="POST",
        url=endpoint(node) + "/",
        data=json.dumps(body),
        headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"},
    )
    SigV4Auth(Credentials(KEY, SECRET), "sqs", REGION).add_auth(req)
    # Content-Length is not signed; urllib sets the one of the body it sends.
    return {k: v for k, v in req.prepare().headers.items() if k.lower() != "content-length"}


def _post(node: NodeThread, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
    raw = urllib.request.Request(endpoint(node) + "/", data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(raw, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_a_signed_request_with_another_body_is_refused(locked: NodeThread) -> None:
    # A captured signature must not carry another body: an unsigned x-amz-content-sha256 naming
    # the signed body's hash must not stand in for the hash of the body actually sent.
    url = client(locked).create_queue(QueueName="tamper")["QueueUrl"]
    signed = {"QueueUrl": url, "MessageBody": "the signed body"}
    headers = _signed_json(locked, "SendMessage", signed)
    headers["X-Amz-Content-SHA256"] = hashlib.sha256(json.dumps(signed).encode()).hexdigest()
    forged = json.dumps({"QueueUrl": url, "MessageBody": "a forged body"}).encode()
    status, answer = _post(locked, headers, forged)
    assert status == 403 and answer["__type"].endswith("#SignatureDoesNotMatch")
    assert "Messages" not in client(locked).receive_message(QueueUrl=url)


def test_a_signature_of_long_ago_is_refused(locked: NodeThread, monkeypatch: pytest.MonkeyPatch) -> None:
    # SigV4 requests expire (AWS allows 15 minutes of skew): a captured request cannot be replayed
    # an hour later.
    url = client(locked).create_queue(QueueName="replay")["QueueUrl"]
    body = {"QueueUrl": url, "MessageBody": "replayed"}
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: old)
    headers = _signed_json(locked, "SendMessage", body)
    monkeypatch.undo()
    status, answer = _post(locked, headers, json.dumps(body).encode())
    assert status == 403 and answer["__type"].endswith("#SignatureDoesNotMatch")
    assert "Signature expired" in answer["message"]
    assert "Messages" not in client(locked).receive_message(QueueUrl=url)
    # A fresh signature of the same request is served.
    status, _ = _post(locked, _signed_json(locked, "SendMessage", body), json.dumps(body).encode())
    assert status == 200


def _client_in(node: NodeThread, region: str, key: str = KEY, secret: str = SECRET) -> Any:
    return boto3.client(
        "sqs",
        endpoint_url=endpoint(node),
        region_name=region,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}),
    )


def test_a_signature_scoped_to_another_region_is_refused_naming_the_expected_one(locked: NodeThread) -> None:
    # An SQS endpoint serves one region: a request signed (correctly, with a configured key) for
    # another region is refused before anything is done, and the answer says which region to use.
    url = client(locked).create_queue(QueueName="regional")["QueueUrl"]
    with pytest.raises(ClientError) as e:
        _client_in(locked, "eu-west-3").send_message(QueueUrl=url, MessageBody="wrong region")
    assert e.value.response["Error"]["Code"] == "SignatureDoesNotMatch"
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    message = e.value.response["Error"]["Message"]
    assert "'eu-west-3'" in message and f"'{REGION}'" in message
    assert "Messages" not in client(locked).receive_message(QueueUrl=url)


def test_a_signature_scoped_to_another_service_is_refused(locked: NodeThread) -> None:
    req = AWSRequest(
        method="POST",
        url=endpoint(locked) + "/",
        data=json.dumps({}),
        headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": "AmazonSQS.ListQueues"},
    )
    SigV4Auth(Credentials(KEY, SECRET), "sns", REGION).add_auth(req)
    headers = {k: v for k, v in req.prepare().headers.items() if k.lower() != "content-length"}
    status, answer = _post(locked, headers, json.dumps({}).encode())
    assert status == 403 and answer["__type"].endswith("#SignatureDoesNotMatch")
    assert "'sqs'" in answer["message"]


def test_without_access_keys_the_region_is_not_checked() -> None:
    # Nothing is verified then (as ElasticMQ does): a client configured for any region is served.
    with sqs_node() as node:
        sqs = _client_in(node, "ap-south-1", "anyone", "anything")
        url = sqs.create_queue(QueueName="anywhere")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="served")
        assert client(node).receive_message(QueueUrl=url)["Messages"][0]["Body"] == "served"
