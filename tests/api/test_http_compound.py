"""The compound encodings (pylmq.wire.compound), byte for byte, without sockets."""

from __future__ import annotations

import msgpack
import pytest

from pylmq.errors import BadRequest
from pylmq.wire.compound import (
    decode_msgpack,
    decode_multipart,
    encode_msgpack,
    encode_multipart,
    item_headers,
    multipart_content_type,
)

ITEMS = [
    (((b"content-type", b"text/plain"),), b"msg1"),
    ((), b"msg2"),
    (((b"x-lmq-sequence", b"1"),), b"msg3"),
]


def test_item_headers_default_the_content_type_first() -> None:
    assert item_headers(((b"x-lmq-sequence", b"1"),)) == (
        (b"content-type", b"application/octet-stream"),
        (b"x-lmq-sequence", b"1"),
    )


def test_item_headers_keep_a_stored_content_type() -> None:
    md = ((b"content-type", b"text/plain"),)
    assert item_headers(md) is md


def test_multipart_content_type_names_the_boundary() -> None:
    assert multipart_content_type("id1") == "multipart/mixed; boundary=id1"


def test_multipart_layout_is_exactly_lmqs() -> None:
    expected = (
        b"\r\n--id1\r\n"
        b"content-type: text/plain\r\n"
        b"content-transfer-encoding: binary\r\n"
        b"\r\n"
        b"msg1"
        b"\r\n--id1\r\n"
        b"content-type: application/octet-stream\r\n"
        b"content-transfer-encoding: binary\r\n"
        b"\r\n"
        b"msg2"
        b"\r\n--id1\r\n"
        b"content-type: application/octet-stream\r\n"
        b"x-lmq-sequence: 1\r\n"
        b"content-transfer-encoding: binary\r\n"
        b"\r\n"
        b"msg3"
        b"\r\n--id1--\r\n"
    )
    assert encode_multipart(b"id1", ITEMS) == expected


def test_multipart_of_no_items_is_the_closing_delimiter() -> None:
    assert encode_multipart(b"B", []) == b"\r\n--B--\r\n"


def test_multipart_decodes_what_it_encodes() -> None:
    items = [(((b"content-type", b"application/json"),), b'{"a":1}'), ((), b"\x00\r\n\xff")]
    assert decode_multipart(b"B", encode_multipart(b"B", items)) == [
        (((b"content-type", b"application/json"),), b'{"a":1}'),
        (((b"content-type", b"application/octet-stream"),), b"\x00\r\n\xff"),
    ]


def test_multipart_decode_rejects_a_truncated_body() -> None:
    with pytest.raises(BadRequest):
        decode_multipart(b"B", encode_multipart(b"B", ITEMS)[:-3])


def test_msgpack_is_an_array_of_header_map_and_body_pairs() -> None:
    expected = msgpack.packb(
        [
            [{"content-type": "text/plain"}, b"msg1"],
            [{"content-type": "application/octet-stream"}, b"msg2"],
            [{"content-type": "application/octet-stream", "x-lmq-sequence": "1"}, b"msg3"],
        ],
        use_bin_type=True,
    )
    assert encode_msgpack(ITEMS) == expected


def test_msgpack_headers_are_str_and_bodies_bin() -> None:
    raw = msgpack.unpackb(encode_msgpack(ITEMS), raw=True)
    # raw=True keeps the wire types apart: str arrives as bytes too, so look at the format bytes.
    packed = encode_msgpack([((), b"b")])
    assert raw[1][1] == b"msg2"
    assert b"\xaccontent-type" in packed, f"header name should be a fixstr, got {packed!r}"
    assert packed.endswith(b"\xc4\x01b"), f"body should be bin 8, got {packed!r}"


def test_msgpack_decodes_what_it_encodes() -> None:
    assert decode_msgpack(encode_msgpack(ITEMS)) == [
        (((b"content-type", b"text/plain"),), b"msg1"),
        (((b"content-type", b"application/octet-stream"),), b"msg2"),
        (((b"content-type", b"application/octet-stream"), (b"x-lmq-sequence", b"1")), b"msg3"),
    ]


def test_msgpack_decode_rejects_a_non_array() -> None:
    with pytest.raises(BadRequest):
        decode_msgpack(msgpack.packb({"a": 1}))
