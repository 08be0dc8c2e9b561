"""MessagePack-RPC framing without sockets: encoders byte for byte, the decoder fed any way."""

from __future__ import annotations

import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pylmq.errors import BadMessage, MessageNotFound, MessageTooLarge
from pylmq.wire.msgpack_rpc import (
    Decoder,
    Invalid,
    Notification,
    Request,
    Response,
    encode_error,
    encode_notification,
    encode_request,
    encode_response,
    encode_result_raw,
    error_parts,
    peek_msgid,
)


def test_encode_request_is_the_spec_array() -> None:
    assert encode_request(1, "pull", ["q", 0]) == b"\x94\x00\x01\xa4pull\x92\xa1q\x00"


def test_encode_request_rejects_msgid_outside_uint32() -> None:
    with pytest.raises(ValueError):
        encode_request(2**32, "pull", [])
    with pytest.raises(ValueError):
        encode_request(-1, "pull", [])


def test_encode_notification_and_response() -> None:
    assert encode_notification("push", ["q", 1]) == b"\x93\x02\xa4push\x92\xa1q\x01"
    assert encode_response(7, None, "ok") == b"\x94\x01\x07\xc0\xa2ok"


def test_encode_result_raw_splices_encoded_result() -> None:
    raw = msgpack.packb({"a": [1, True]})
    assert encode_result_raw(300, raw) == msgpack.packb([1, 300, None, {"a": [1, True]}])


def test_error_slot_is_reason_and_detail() -> None:
    frame = encode_error(9, MessageNotFound("no such id"))
    assert msgpack.unpackb(frame) == [1, 9, ["not_found", "no such id"], None]


def test_error_parts_reads_pylmq_and_bare_lmq_errors() -> None:
    assert error_parts(["not_found", "gone"]) == ("not_found", "gone")
    assert error_parts(b"not_found") == ("not_found", "not_found")
    assert error_parts({"x": 1})[0] == "{'x': 1}"


def test_decoder_yields_each_message_kind() -> None:
    d = Decoder()
    data = encode_request(1, "pull", ["q"]) + encode_notification("push", ["q", 2]) + encode_response(3, None, "ok")
    assert d.feed(data) == [Request(1, "pull", ["q"]), Notification("push", ["q", 2]), Response(3, None, "ok")]


def test_decoder_reassembles_frames_fed_one_byte_at_a_time() -> None:
    d = Decoder()
    data = encode_request(1, "push", ["q", b"\x00" * 300]) + encode_request(2, "pull", ["q", 1.5])
    got = []
    for i in range(len(data)):
        got += d.feed(data[i : i + 1])
    assert got == [Request(1, "push", ["q", b"\x00" * 300]), Request(2, "pull", ["q", 1.5])]


def test_decoder_keeps_invalid_utf8_strings_byte_exact() -> None:
    frame = b"\x94\x00\x01\xa4push\x92\xa1q\xa2\xff\xfe"
    [req] = Decoder().feed(frame)
    assert isinstance(req, Request)
    assert msgpack.packb(req.params[1], unicode_errors="surrogateescape") == b"\xa2\xff\xfe"


def test_decoder_with_tuples_accepts_array_map_keys() -> None:
    frame = msgpack.packb([0, 1, "push", ["q", {(1, 2): "v"}]])
    [req] = Decoder(use_list=False).feed(frame)
    assert isinstance(req, Request) and req.params[1] == {(1, 2): "v"}


@pytest.mark.parametrize(
    ("obj", "msgid"),
    [
        (42, None),
        ("push", None),
        ([], None),
        ([0, 1, "push"], 1),
        ([0, "x", "push", []], None),
        ([0, 5, 7, []], 5),
        ([0, 6, "push", "q"], 6),
        ([2, "push"], None),
        ([1, "x", None, None], None),
        ([3, 1, "push", []], None),
        ([True, 1, "push", []], None),
    ],
)
def test_well_formed_msgpack_of_the_wrong_shape_is_invalid_but_not_fatal(obj: object, msgid: int | None) -> None:
    d = Decoder()
    [ev] = d.feed(msgpack.packb(obj))
    assert isinstance(ev, Invalid) and isinstance(ev.error, BadMessage)
    assert (ev.msgid, ev.fatal) == (msgid, False)
    assert d.feed(encode_request(2, "pull", [])) == [Request(2, "pull", [])]


def test_bytes_that_are_not_msgpack_are_fatal_and_name_the_msgid() -> None:
    d = Decoder()
    events = d.feed(encode_request(1, "pull", []) + b"\x94\x00\x07\xa4pull\xc1")
    assert events[0] == Request(1, "pull", [])
    assert isinstance(events[1], Invalid) and events[1].fatal and events[1].msgid == 7
    assert d.broken and d.feed(encode_request(2, "pull", [])) == []


def test_garbage_without_a_msgid_is_fatal_without_one() -> None:
    [ev] = Decoder().feed(b"\xc1 garbage")
    assert isinstance(ev, Invalid) and ev.fatal and ev.msgid is None


def test_frame_over_the_limit_is_fatal_once_the_limit_is_passed() -> None:
    d = Decoder(max_message_size=1000)
    frame = encode_request(9, "push", ["q", b"x" * 5000])
    assert d.feed(frame[:900]) == []
    [ev] = d.feed(frame[900:1200])
    assert isinstance(ev, Invalid) and ev.fatal and ev.msgid == 9
    assert isinstance(ev.error, MessageTooLarge)


def test_frame_exactly_at_the_limit_is_accepted() -> None:
    overhead = len(encode_request(1, "push", ["q", b"x" * 300])) - 300  # bin 16 header
    body = b"x" * (1000 - overhead)
    frame = encode_request(1, "push", ["q", body])
    assert len(frame) == 1000
    assert Decoder(max_message_size=1000).feed(frame) == [Request(1, "push", ["q", body])]
    assert isinstance(Decoder(max_message_size=999).feed(frame)[0], Invalid)


def test_array_announcing_more_elements_than_the_limit_is_fatal_at_once() -> None:
    d = Decoder(max_message_size=1000)
    [ev] = d.feed(b"\x94\x00\x05\xa4push\xdd" + struct.pack(">I", 2**32 - 1))
    assert isinstance(ev, Invalid) and ev.fatal and ev.msgid == 5
    assert isinstance(ev.error, MessageTooLarge)


def test_many_small_frames_in_one_chunk_bigger_than_the_limit_are_fine() -> None:
    frame = encode_request(1, "pull", ["q"])
    assert len(Decoder(max_message_size=64).feed(frame * 1000)) == 1000


def test_large_chunks_are_decoded_across_slices() -> None:
    frame = encode_request(1, "push", ["q", b"y" * (3 << 20)])
    [req] = Decoder().feed(frame + frame[:10])
    assert isinstance(req, Request) and len(req.params[1]) == 3 << 20


@pytest.mark.parametrize(
    ("head", "msgid"),
    [
        (b"\x94\x00\x07", 7),
        (b"\x94\x00\xcc\xff", 255),
        (b"\x94\x00\xce\x00\x01\x00\x00", 65536),
        (b"\xdc\x00\x04\x00\x03", 3),
        (b"\xdd\x00\x00\x00\x04\x00\x03", 3),
        (b"\x94\x01\x07", None),
        (b"\x93\x00\x07", None),
        (b"\x94\x00\xce\x00", None),
        (b"\x94\x00\xd0\xff", None),
        (b"", None),
    ],
)
def test_peek_msgid(head: bytes, msgid: int | None) -> None:
    assert peek_msgid(head) == msgid


_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_requests = st.builds(
    Request, st.integers(0, 2**32 - 1), st.sampled_from(["push", "pull", "done"]), st.lists(_values, max_size=3)
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_requests, min_size=1, max_size=8), st.lists(st.integers(1, 64), min_size=1, max_size=20))
def test_any_chunking_of_a_stream_gives_the_same_messages(requests: list[Request], cuts: list[int]) -> None:
    data = b"".join(encode_request(r.msgid, r.method, r.params) for r in requests)
    d, got, i, k = Decoder(), [], 0, 0
    while i < len(data):
        n = cuts[k % len(cuts)]
        got += d.feed(data[i : i + n])
        i, k = i + n, k + 1
    assert got == requests


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_out_of_feed(data: bytes) -> None:
    d = Decoder(max_message_size=64)
    events = d.feed(data) + d.feed(data)
    fatal = [e for e in events if isinstance(e, Invalid) and e.fatal]
    assert len(fatal) <= 1 and (not fatal or events[-1] is fatal[0])
