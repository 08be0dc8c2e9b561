"""A real node serving the SQS API on a free 127.0.0.1 port (in a thread, for blocking clients
such as boto3), and clients for it: boto3 (the JSON protocol), raw unsigned JSON-protocol
requests, and raw signed query-protocol requests made with botocore's own SigV4 signer."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import boto3
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from pylmq.client import HttpClient
from pylmq.node.lmq_node import LMQNode
from pylmq.node.testing import NodeThread, local_options

REGION = "us-east-1"
KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
NS = "{http://queue.amazonaws.com/doc/2012-11-05/}"


@contextmanager
def sqs_node(**overrides: Any) -> Iterator[NodeThread]:
    with NodeThread(local_options(sqs=("127.0.0.1", 0), rpc=None, **overrides)) as node:
        yield node


def endpoint(node: NodeThread | LMQNode) -> str:
    address = (node.node if isinstance(node, NodeThread) else node).sqs_address
    assert address is not None, "the node serves no SQS"
    return f"http://{address[0]}:{address[1]}"


def client(node: NodeThread | LMQNode, key: str = KEY, secret: str = SECRET) -> Any:
    """boto3's SQS client (JSON protocol) on the node, no retries: an error shows at once."""
    return boto3.client(
        "sqs",
        endpoint_url=endpoint(node),
        region_name=REGION,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(retries={"max_attempts": 1}, read_timeout=30),
    )


def error_code(e: pytest.ExceptionInfo[ClientError]) -> str:
    """The AWS error code of a boto3 ClientError."""
    return str(e.value.response["Error"]["Code"])


def http(node: NodeThread) -> HttpClient:
    return HttpClient(node.http_url)


def unsigned_json(node: NodeThread, action: str, body: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    """A JSON-protocol request as no SDK sends it, unsigned and raw: (status, answer, headers)."""
    req = urllib.request.Request(
        endpoint(node) + "/",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"{}"), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), dict(e.headers)


def signed_query(
    node: NodeThread, params: dict[str, str], *, path: str = "/", key: str = KEY, secret: str = SECRET
) -> tuple[int, ET.Element, dict[str, str]]:
    """A query-protocol request (a form POST), SigV4-signed by botocore: (status, XML root, headers)."""
    url = endpoint(node) + path
    body = urllib.parse.urlencode({"Version": "2012-11-05", **params})
    req = AWSRequest(
        method="POST",
        url=url,
        data=body,
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=utf-8"},
    )
    SigV4Auth(Credentials(key, secret), "sqs", REGION).add_auth(req)
    prepared = req.prepare()
    raw = urllib.request.Request(url, data=body.encode(), headers=dict(prepared.headers), method="POST")
    try:
        with urllib.request.urlopen(raw, timeout=30) as resp:
            return resp.status, ET.fromstring(resp.read()), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, ET.fromstring(e.read()), dict(e.headers)


def text(root: ET.Element, path: str) -> str | None:
    """The text of the first element at ``path`` (names without namespace, joined by /)."""
    el = root.find("/".join(NS + p for p in path.split("/")))
    return None if el is None else (el.text or "")


def texts(root: ET.Element, path: str) -> list[str]:
    return [el.text or "" for el in root.iterfind("/".join(NS + p for p in path.split("/")))]


ON_BOTH_STORES = ["memory", "postgres"]
"""Params of a fixture made with :func:`store_overrides`: the tests that use it run on the
memory store and on the PostgreSQL store (skipped, with the reason, where no PostgreSQL runs)."""


def store_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The options (of local_options) of a node on the store ``request.param`` names: none for
    the memory store, or a fresh database of the session's PostgreSQL with the node's schema,
    dropped after the fixture."""
    if request.param == "memory":
        return {}
    server = request.getfixturevalue("pg_server")
    dsn = server.new_database(request.getfixturevalue("pg_suite_template"))
    request.addfinalizer(lambda: server.drop_database(dsn))
    return {"store": "postgres", "dsn": dsn, "pg_timeout": 3.0}
