"""The sans-IO parts of the client: answers decoded from bytes, errors, addresses."""

from __future__ import annotations

import json

import msgpack
import pytest

from pylmq.client import Message, Part
from pylmq.client import _http_proto as proto
from pylmq.client import _rpc_proto as rpc_proto
from pylmq.client._errors import error_from_http, error_from_rpc
from pylmq.client._urls import parse_http_urls, parse_rpc_addresses
from pylmq.errors import (
    BadRequest,
    InvalidProps,
    LMQError,
    MessageNotFound,
    NotFound,
    ProtocolError,
    QueueNotFound,
    StoreError,
)

MID = "5b8a1c0e-2f6d-4e43-9b1a-0c9d8e7f6a5b"


def _headers(**extra: str) -> dict[str, str]:
    return {
        "x-lmq-queue-name": "q",
        "x-lmq-message-id": MID,
        "x-lmq-message-type": "normal",
        "x-lmq-retry-remaining": "2",
        **extra,
    }


def test_multipart_body_as_lmq_writes_it_decodes_to_parts() -> None:
    body = (
        f"\r\n--{MID}\r\ncontent-type: text/plain\r\ncontent-transfer-encoding: binary\r\n\r\none"
        f"\r\n--{MID}\r\ncontent-type: application/octet-stream\r\ncontent-transfer-encoding: binary\r\n\r\n"
        f"\r\n--{MID}--\r\n"
    ).encode()
    parts = proto.decode_multipart(f"multipart/mixed; boundary={MID}", body)
    assert parts == (
        Part({"content-type": "text/plain"}, b"one"),
        Part({"content-type": "application/octet-stream"}, b""),
    )


def test_msgpack_compound_body_decodes_to_parts() -> None:
    body = msgpack.packb([[{"content-type": "text/plain"}, b"one"]], use_bin_type=True)
    assert proto.decode_msgpack_parts(body) == (Part({"content-type": "text/plain"}, b"one"),)


def test_truncated_multipart_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        proto.decode_multipart(f"multipart/mixed; boundary={MID}", f"\r\n--{MID}\r\n".encode())


def test_multipart_without_boundary_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        proto.decode_multipart("multipart/mixed", b"")


def test_pull_answer_headers_make_a_message() -> None:
    resp = proto.HttpResponse(200, _headers(**{"content-type": "text/plain"}), b"hi")
    assert proto.pull("q").decode(resp) == Message("q", MID, "normal", 2, "text/plain", b"hi")


def test_retry_infinity_is_none() -> None:
    resp = proto.HttpResponse(200, _headers(**{"x-lmq-retry-remaining": "infinity"}), b"")
    msg = proto.pull("q").decode(resp)
    assert msg is not None and msg.retry is None and msg.content_type == "application/octet-stream"


def test_204_is_none() -> None:
    assert proto.pull("q", 0).decode(proto.HttpResponse(204, {}, b"")) is None


def test_pull_answer_without_id_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError):
        proto.pull("q").decode(proto.HttpResponse(200, {"x-lmq-queue-name": "q"}, b""))


def test_pull_targets_encode_name_timeout_and_format() -> None:
    assert proto.pull("a/b", 0).target == "/messages/a%2Fb?t=0"
    assert proto.pull("q", 1.5, "msgpack").target == "/messages/q?t=1.5&cf=msgpack"
    assert proto.pull("q").target == "/messages/q" and proto.pull("q").server_wait is None
    assert proto.pull_any("^a.*", 2).target == "/messages?qre=%5Ea.%2A&t=2"


def test_unknown_compound_format_is_refused() -> None:
    with pytest.raises(BadRequest):
        proto.pull("q", 0, "xml")  # type: ignore[arg-type]


def test_http_error_reason_picks_the_class() -> None:
    body = json.dumps({"error": "invalid_props", "detail": "unknown property 'x'"}).encode()
    err = error_from_http(400, body)
    assert type(err) is InvalidProps and "unknown property 'x'" in err.detail


def test_http_404_without_reason_uses_the_operations_meaning() -> None:
    assert type(error_from_http(404, b"", MessageNotFound)) is MessageNotFound
    assert type(error_from_http(404, b"", QueueNotFound)) is QueueNotFound
    assert type(error_from_http(404, b'{"error":"not_found","detail":"no such resource"}', QueueNotFound)) is (
        QueueNotFound
    )


def test_http_status_without_known_reason_picks_a_general_class() -> None:
    err = error_from_http(405, b'{"error":"method_not_allowed","detail":"GET not allowed"}')
    assert type(err) is BadRequest and err.reason == "method_not_allowed"
    assert type(error_from_http(503, b"")) is StoreError
    assert type(error_from_http(500, b"oops")) is LMQError


def test_rpc_error_slot_shapes() -> None:
    assert type(error_from_rpc(["queue_not_found", "no queue named 'x'"])) is QueueNotFound
    assert type(error_from_rpc("not_found")) is MessageNotFound  # Erlang LMQ's bare reason
    err = error_from_rpc(["weird", "something"])
    assert type(err) is LMQError and err.reason == "weird" and err.detail == "something"
    assert isinstance(error_from_rpc(b"not_found"), NotFound)


def test_rpc_message_map_decodes_package_and_binary_id() -> None:
    raw_id = bytes(range(16))
    result = {"queue": "q", "id": raw_id, "type": "package", "retry": "infinity", "content": (1, 2)}
    msg = rpc_proto.pull("q").decode(result)
    assert msg is not None and msg.type == "compound" and msg.retry is None and msg.content == [1, 2]
    assert msg.id == "00010203-0405-0607-0809-0a0b0c0d0e0f"


def test_rpc_pull_without_timeout_sends_one_param() -> None:
    assert rpc_proto.pull("q").params == ["q"] and rpc_proto.pull("q", 0.5).params == ["q", 0.5]


def test_rpc_ok_methods_reject_other_results() -> None:
    with pytest.raises(ProtocolError):
        rpc_proto.done("q", MID).decode("maybe")


def test_http_urls_accept_lists_commas_and_bare_host_port() -> None:
    bases = parse_http_urls("http://a:1, b:2 ,https://c/lmq/")
    assert [b.url for b in bases] == ["http://a:1", "http://b:2", "https://c:443/lmq"]


def test_http_url_with_query_is_refused() -> None:
    with pytest.raises(BadRequest):
        parse_http_urls("http://a:1/?x=1")


def test_rpc_addresses_accept_pairs_and_strings() -> None:
    assert parse_rpc_addresses(["h:1", ("g", 2), "k"]) == [("h", 1), ("g", 2), ("k", 18800)]
    with pytest.raises(BadRequest):
        parse_rpc_addresses("h:port")


def test_body_of_another_type_is_refused_before_sending() -> None:
    with pytest.raises(TypeError):
        proto.push("q", 42)  # type: ignore[arg-type]


def test_negative_rpc_timeout_is_refused_before_sending() -> None:
    with pytest.raises(BadRequest):
        rpc_proto.pull("q", -1)
