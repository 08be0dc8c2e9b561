"""queue_server's protocol without I/O: the TCP framer, request validation, answer encoding."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pylmq.wire.qs import (
    Confirm,
    Consume,
    Framer,
    FramingError,
    Invalid,
    Leader,
    ListQueues,
    Monitor,
    Produce,
    Request,
    Unsupported,
    encode_answer,
    error_answer,
    parse_request,
)

# Objects that exercise what a naive splitter gets wrong: braces and quotes inside strings,
# escaped quotes and backslashes, nested objects, non-ASCII escapes.
TRICKY = [
    b'{"action":1,"queue":"q","data":"}{"}',
    b'{"a":"\\"}","b":{"c":{"d":"{{"}},"e":"\\\\"}',
    b'{"data":"\\\\\\"}\\\\"}',
    b"{}",
    b'{"x":"\\u00e9\\u007d"}',
]
STREAM = b" \n".join(TRICKY) + b"\r\n\t"


def feed_all(framer: Framer, chunks: list[bytes]) -> list[bytes]:
    out: list[bytes] = []
    for c in chunks:
        out.extend(framer.feed(c))
    return out


def test_framer_finds_each_object_in_one_read() -> None:
    assert feed_all(Framer(), [STREAM]) == TRICKY
    for obj in TRICKY:
        json.loads(obj)  # each frame is exactly one parseable object


def test_framer_byte_by_byte() -> None:
    f = Framer()
    assert feed_all(f, [bytes([b]) for b in STREAM]) == TRICKY
    assert f.pending == 0


@pytest.mark.parametrize("at", range(len(STREAM) + 1))
def test_framer_split_at_every_offset(at: int) -> None:
    assert feed_all(Framer(), [STREAM[:at], STREAM[at:]]) == TRICKY


def test_framer_split_in_three_everywhere() -> None:
    # A backslash ending one read and the byte it escapes starting the next included.
    for i in range(len(STREAM)):
        for j in range(i, len(STREAM), 7):
            assert feed_all(Framer(), [STREAM[:i], STREAM[i:j], STREAM[j:]]) == TRICKY


def test_framer_keeps_only_the_unfinished_object() -> None:
    f = Framer()
    assert f.feed(b'{"a":1}  {"b":') == [b'{"a":1}']
    assert f.pending == len(b'{"b":')
    assert f.feed(b"2}") == [b'{"b":2}']
    assert f.pending == 0


@pytest.mark.parametrize("stray", [b"x", b"]", b"}", b"[1]", b"12"])
def test_framer_refuses_bytes_between_objects(stray: bytes) -> None:
    f = Framer()
    assert f.feed(b'{"a":1}\n' + stray + b'{"b":2}') == [b'{"a":1}']  # what came before still counts
    assert f.error is not None and "expected a JSON object" in str(f.error)
    with pytest.raises(FramingError):
        f.feed(b"{}")  # broken for good: where the next request starts is unknown


def test_framer_bounds_an_object_in_one_read_and_across_reads() -> None:
    f = Framer(16)
    assert f.feed(b'{}{"data":"' + b"x" * 20 + b'"}') == [b"{}"]
    assert f.error is not None and "larger than 16" in str(f.error)
    f = Framer(16)
    assert f.feed(b'{"d":"12345678"}') == [b'{"d":"12345678"}']  # exactly 16: fine
    f.feed(b'{"d":"')
    for _ in range(10):
        if f.error is None:
            assert f.feed(b"xxxx") == []
    assert f.error is not None and "larger than 16" in str(f.error)
    assert f.pending == 0  # nothing kept once broken


# -- validation ---------------------------------------------------------------------------------


def req(obj: dict[str, Any]) -> Request | Invalid:
    return parse_request(json.dumps(obj).encode())


def test_valid_requests() -> None:
    assert req({"action": 1, "queue": "q", "data": "hi", "seq": 7}) == Request(
        Produce("q", "hi", None, None, 0, 0), {"action": 1, "queue": "q", "data": "hi", "seq": 7}
    )
    r = req({"action": 1, "queue": "q", "data": "", "delay": 10, "ttl": 20.5, "retry": 3, "priority": 9})
    assert isinstance(r, Request) and r.action == Produce("q", "", 10, 20.5, 3, 9)
    assert isinstance(r := req({"action": 2, "queue": "q"}), Request) and r.action == Consume("q")
    assert isinstance(r := req({"action": 3, "queue": "q", "msg_id": 5}), Request) and r.action == Confirm("q", 5)
    u = "0b8f2f2e-5b8d-4f5e-9a8b-3c2d1e0f9a8b"
    assert isinstance(r := req({"action": 3, "queue": "q", "msg_id": u}), Request) and r.action == Confirm("q", u)
    assert isinstance(r := req({"action": 4, "queue": "q"}), Request) and r.action == Monitor("q", False)
    assert isinstance(r := req({"action": 104, "queue": "q"}), Request) and r.action == Monitor("q", True)
    assert isinstance(r := req({"action": 7}), Request) and r.action == ListQueues("", False)
    assert isinstance(r := req({"action": 107, "pattern": "a"}), Request) and r.action == ListQueues("a", True)
    assert isinstance(r := req({"action": 8}), Request) and r.action == Leader()
    assert isinstance(r := req({"action": 5, "queue": "q"}), Request) and r.action == Unsupported(5)
    assert isinstance(r := req({"action": 6}), Request) and r.action == Unsupported(6)


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        ({}, "missing action"),
        ({"action": "1", "queue": "q"}, "action must be an integer"),
        ({"action": 1.0, "queue": "q"}, "action must be an integer"),
        ({"action": True, "queue": "q"}, "action must be an integer"),
        ({"action": 99, "queue": "q"}, "invalid action 99"),
        ({"action": 0}, "invalid action 0"),
        ({"action": 2}, "queue must be a non-empty string"),
        ({"action": 2, "queue": ""}, "queue must be a non-empty string"),
        ({"action": 2, "queue": 3}, "queue must be a non-empty string"),
        ({"action": 1, "queue": "q"}, "data must be a string"),
        ({"action": 1, "queue": "q", "data": 1}, "data must be a string"),
        ({"action": 1, "queue": "q", "data": "x", "delay": "10"}, "delay must be a number"),
        ({"action": 1, "queue": "q", "data": "x", "ttl": True}, "ttl must be a number"),
        ({"action": 1, "queue": "q", "data": "x", "retry": -1}, "retry must be an integer >= 0"),
        ({"action": 1, "queue": "q", "data": "x", "retry": 1.5}, "retry must be an integer >= 0"),
        ({"action": 1, "queue": "q", "data": "x", "priority": 256}, "priority must be an integer 0..255"),
        ({"action": 3, "queue": "q"}, "msg_id must be a positive integer"),
        ({"action": 3, "queue": "q", "msg_id": 0}, "msg_id must be a positive integer"),
        ({"action": 3, "queue": "q", "msg_id": 1.0}, "msg_id must be a positive integer"),
        ({"action": 7, "pattern": 1}, "pattern must be a string"),
    ],
)
def test_invalid_requests_keep_the_object_to_echo(obj: dict[str, Any], reason: str) -> None:
    r = req(obj)
    assert isinstance(r, Invalid)
    assert reason in r.reason
    assert r.echo == obj


@pytest.mark.parametrize("raw", [b"{", b"not json", b'{"a":NaN}', b'{"a":Infinity}', b"[" * 100_000, b"{}x"])
def test_not_json(raw: bytes) -> None:
    r = parse_request(raw)
    assert isinstance(r, Invalid) and "not JSON" in r.reason and r.echo == {}


def test_not_an_object() -> None:
    r = parse_request(b"[1,2]")
    assert isinstance(r, Invalid) and r.reason == "bad request: not a JSON object"


# -- answers ---------------------------------------------------------------------------------------


def test_answer_echoes_the_request_and_sets_fields_once() -> None:
    echo = {"action": 2, "queue": "q", "seq": 42, "code": 5, "msg_id": "x", "extra": [1]}
    out = encode_answer(echo, 0, results={"msg_id": 9, "data": "d"}, tcp=True)
    assert out.endswith(b"}\n") and out.count(b"\n") == 1
    assert out.count(b'"code"') == 1 and out.count(b'"msg_id"') == 1
    assert json.loads(out) == {"action": 2, "queue": "q", "seq": 42, "code": 0, "msg_id": 9, "extra": [1], "data": "d"}


def test_produce_answer_drops_the_body_and_times() -> None:
    echo = {"action": 1, "queue": "q", "seq": 1, "data": "big", "delay": 1, "ttl": 2, "retry": 3, "priority": 1}
    out = json.loads(encode_answer(echo, 0, results={"msg_id": 3}, tcp=False))
    assert out == {"action": 1, "queue": "q", "seq": 1, "priority": 1, "code": 0, "msg_id": 3}
    out = json.loads(encode_answer(echo, -1, "time error", tcp=False))
    assert out == {"action": 1, "queue": "q", "seq": 1, "priority": 1, "code": -1, "reason": "time error"}


def test_reason_only_with_an_error_and_udp_has_no_newline() -> None:
    out = encode_answer({"action": 8, "reason": "mine"}, 0, tcp=False)
    assert not out.endswith(b"\n") and json.loads(out) == {"action": 8, "code": 0}
    bad = error_answer(Invalid("bad request: not JSON"), tcp=True)
    assert json.loads(bad) == {"code": -1, "reason": "bad request: not JSON"} and bad.endswith(b"\n")


def test_answers_are_ascii_even_for_lone_surrogates() -> None:
    r = parse_request(b'{"action":2,"queue":"q","seq":"\\ud800"}')
    assert isinstance(r, Request)
    out = encode_answer(r.echo, 0, tcp=True)
    assert json.loads(out)["seq"] == "\ud800"
