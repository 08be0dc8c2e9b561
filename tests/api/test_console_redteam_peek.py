"""Red team: the size of a peek's answer. A batch pull stops at MAX_BATCH_BYTES of bodies; a
peek with ``body=1`` (or a large ``preview``) encodes up to 1000 whole bodies into one JSON
document, and JSON escapes a control character into six bytes: one request made the node
build several times what the queue holds. Now a page stops at MAX_BATCH_BYTES of JSON and says
it was cut (``x-lmq-peek-cut``); test_peek_budget.py covers the walk on."""

from __future__ import annotations

from pylmq.core.manager import MAX_BATCH_BYTES
from tests.api.api_helpers import Api

BODY = b"\x01" * (2 * 1024 * 1024)  # valid UTF-8, so sent as text: 12 MiB once JSON-escaped


async def test_a_peek_answer_is_bounded_in_bytes_like_a_batch_pull(api: Api) -> None:
    for _ in range(2):
        r = await api.request("POST", "/messages/big", data=BODY, headers={"Content-Type": "text/plain"})
        assert r.status == 200, r
    r = await api.request("GET", "/peek/big", {"n": 2, "body": 1})
    assert r.status == 200, r
    # Two bodies of 2 MiB came back as 24 MiB of JSON: more than a batch pull ever answers.
    assert len(r.body) <= MAX_BATCH_BYTES, len(r.body)
    [first] = r.json()  # 12 MiB: the second would take it past 16
    assert first["body"] == BODY.decode() and r.headers["x-lmq-peek-cut"] == "true"
    r = await api.request("GET", "/peek/big", {"n": 2, "body": 1, "after": first["id"]})
    [second] = r.json()
    assert second["id"] != first["id"] and second["body"] == BODY.decode()
    assert "x-lmq-peek-cut" not in r.headers
