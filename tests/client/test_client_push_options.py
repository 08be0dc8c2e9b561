"""The clients' side of pylmq's push options and delivery metadata, without a node (the API
tests run them against one)."""

from __future__ import annotations

import pytest

from pylmq.client import DeadLetterInfo, PushOptions
from pylmq.client import _http_proto as http
from pylmq.client import _rpc_proto as rpc
from pylmq.errors import BadRequest, ProtocolError


def test_options_go_as_query_text_and_as_an_rpc_map() -> None:
    opts = PushOptions(delay=0.5, ttl=60, retry="infinity", interval=2.5, priority=9, once=False)
    assert opts.query() == {"delay": "0.5", "ttl": "60", "interval": "2.5", "retry": "infinity", "priority": "9"}
    assert PushOptions(once=True).params() == {"once": True}
    assert PushOptions(once=True).query() == {"once": "1"}
    assert PushOptions().params() == {}
    req = http.push_with("a/b", b"x", None, PushOptions(delay=1))
    assert (req.method, req.target) == ("POST", "/messages/a%2Fb?delay=1")


@pytest.mark.parametrize("bad", [PushOptions(delay=float("nan")), PushOptions(ttl=True)])
def test_non_numbers_are_refused_before_sending(bad: PushOptions) -> None:
    with pytest.raises(BadRequest):
        bad.params()


def test_push_answers_become_queue_to_id() -> None:
    req = http.push_with("q", b"x")
    ok = http.HttpResponse(200, {}, b'{"accum":"no","id":"I"}')
    assert req.decode(ok) == {"q": "I"}
    virtual = http.HttpResponse(200, {}, b'{"queues":{"a":{"accum":"no","id":"A"},"b":{"accum":"no","id":"B"}}}')
    assert req.decode(virtual) == {"a": "A", "b": "B"}
    with pytest.raises(ProtocolError):
        req.decode(http.HttpResponse(200, {}, b'{"accum":"no"}'))
    call = rpc.push_with("q", 1, PushOptions(priority=3))
    assert (call.method, call.params) == ("push", ["q", 1, {"priority": 3}])
    assert call.decode({"id": "I"}) == {"q": "I"} and call.decode({b"queues": {b"a": b"A"}}) == {"a": "A"}


def _delivery(extra: dict[str, str]) -> http.HttpResponse:
    head = {"x-lmq-queue-name": "q", "x-lmq-message-id": "I", "x-lmq-retry-remaining": "0"}
    return http.HttpResponse(200, head | extra, b"body")


def test_deliveries_carry_attempts_and_dead_letter_metadata_when_sent() -> None:
    plain = http.pull("q").decode(_delivery({}))
    assert plain is not None and (plain.attempts, plain.dead) == (None, None)
    dead_headers = {
        "x-lmq-attempts": "1", "x-lmq-dead-origin": "orders", "x-lmq-dead-failures": "3",
        "x-lmq-dead-last-delivery": "12.5", "x-lmq-dead-reason": "retries",
    }  # fmt: skip
    msg = http.pull("q").decode(_delivery(dead_headers))
    assert msg is not None and msg.attempts == 1
    assert msg.dead == DeadLetterInfo("orders", 3, 12.5, "retries")
    with pytest.raises(ProtocolError):
        http.pull("q").decode(_delivery({"x-lmq-attempts": "many"}))
    base = {"queue": "q", "id": "I", "type": "normal", "retry": 0, "content": 1}
    got = rpc.pull("q").decode(
        base | {"attempts": 2, "dead": {"origin": "o", "failures": 1, "last_delivery": None, "reason": "expired"}}
    )
    assert got is not None and (got.attempts, got.dead) == (2, DeadLetterInfo("o", 1, None, "expired"))
    plain_rpc = rpc.pull("q").decode(base)
    assert plain_rpc is not None and (plain_rpc.attempts, plain_rpc.dead) == (None, None)
