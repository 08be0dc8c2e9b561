"""pylmq's batch extensions (push-many, pull-many, reply-many, claim) on a pylmq node that serves
the queues of a cluster of real Erlang LMQ nodes (the reference kit).

The extensions are pylmq's own, so the Erlang nodes never see them: what must hold is that each
message a batch writes or settles is, on every Erlang node, what the same single calls would
have made it (pushed once, in order; delivered and acked once; a nack or an ext as LMQ's own),
and that an operation LMQ's transactions cannot do (claim by id or by holder tag) is refused with
a clear error rather than half done. Skipped with the reason where the kit or OTP 25 is missing
(see lmq_reference.py).
"""

from __future__ import annotations

import json

import pytest

from pylmq.client import HttpClient
from pylmq.errors import NotSupported
from tests.cluster.lmq_reference import RefCluster, http

pytestmark = [pytest.mark.erl, pytest.mark.slow]


def sizes(ref: RefCluster, queue: str) -> list[int]:
    """The queue's size as each Erlang node's /stats reports it."""
    out = []
    for node in ref.erl:
        status, body = http("GET", node.url + "/stats")
        assert status == 200, f"GET /stats on {node.name}: {status} {body[:300]!r}"
        out.append(json.loads(body)["queues"][queue]["size"])
    return out


def test_a_push_many_through_pylmq_is_pulled_in_order_once_on_the_erlang_nodes(ref: RefCluster, queue: str) -> None:
    py = ref.py[0].client()
    bodies = [f"m{i}".encode() for i in range(30)]
    assert py.push_many(queue, [("text/plain", b) for b in bodies]) == 30
    assert sizes(ref, queue) == [30, 30]
    lmq1, lmq2 = (n.client() for n in ref.erl)
    got: list[bytes] = []
    for i in range(30):
        m = (lmq1 if i % 2 else lmq2).pull(queue, 5)
        assert m is not None, f"expected 30 messages on the Erlang nodes, got {len(got)}"
        (lmq1 if i % 2 else lmq2).ack(queue, m.id)
        got.append(m.body)
    assert got == bodies
    assert lmq1.pull(queue, 0) is None and lmq2.pull(queue, 0) is None
    assert sizes(ref, queue) == [0, 0]


def nacked_by_lmq(lmq: HttpClient, queue: str) -> int:
    """The retry a message has when pulled again after a nack, all on one Erlang node."""
    lmq.update_props(queue, {"timeout": 30, "retry": 3})
    lmq.push(queue, b"probe", "text/plain")
    m = lmq.pull(queue, 5)
    assert m is not None
    lmq.nack(queue, m.id)
    m = lmq.pull(queue, 5)
    assert m is not None and m.body == b"probe" and m.retry is not None, m
    lmq.ack(queue, m.id)
    return m.retry


def test_a_pull_many_and_reply_many_through_pylmq_settle_each_message_as_lmq_does(ref: RefCluster, queue: str) -> None:
    lmq1, lmq2 = (n.client() for n in ref.erl)
    py = ref.py[0].client()
    lmq1.update_props(queue, {"timeout": 30, "retry": 3})
    for i in range(12):
        (lmq1 if i % 2 else lmq2).push(queue, f"e{i}".encode(), "text/plain")
    got = py.pull_many(queue, 12, 5)
    assert [m.body for m in got] == [f"e{i}".encode() for i in range(12)]
    assert lmq1.pull(queue, 0) is None, "a message pull-many delivered is in processing on the Erlang nodes too"
    acked, nacked, extended = got[:6], got[6:9], got[9:]
    done = py.reply_many(queue, "ack", [m.id for m in acked])
    assert (len(done.ok), done.not_found) == (6, ())
    assert py.reply_many(queue, "ext", [m.id for m in extended]).not_found == ()
    done = py.reply_many(queue, "nack", [m.id for m in nacked])
    assert (len(done.ok), done.not_found) == (3, ())
    # The nacked come back on an Erlang node at once, with the retry LMQ's own nack leaves.
    again = [lmq2.pull(queue, 5) for _ in range(3)]
    assert [m.body if m else None for m in again] == [b"e6", b"e7", b"e8"]
    assert [m.retry for m in again if m] == [nacked_by_lmq(lmq1, queue + "_base")] * 3
    for m in again:
        assert m is not None
        lmq2.ack(queue, m.id)
    # The extended ones are still in processing (an ext through pylmq reached Mnesia).
    assert lmq1.pull(queue, 0) is None
    for m in extended:
        lmq1.ack(queue, m.id)
    assert sizes(ref, queue) == [0, 0]
    # An ack of ids already settled answers not_found for each, as LMQ's single ack answers 404.
    stale = py.reply_many(queue, "ack", [m.id for m in acked])
    assert (stale.ok, len(stale.not_found)) == ((), 6)


def test_a_claim_on_a_node_serving_an_erlang_cluster_is_refused_and_changes_nothing(
    ref: RefCluster, queue: str
) -> None:
    py = ref.py[0].client()
    lmq1 = ref.erl[0].client()
    lmq1.update_props(queue, {"timeout": 30, "retry": 3})
    lmq1.push(queue, b"held", "text/plain")
    got = py.pull_many(queue, 1, 5, holder="reader-1")
    assert [m.body for m in got] == [b"held"]
    with pytest.raises(NotSupported, match="Erlang LMQ cluster"):
        py.claim(queue, [got[0].id])
    with pytest.raises(NotSupported, match="Erlang LMQ cluster"):
        py.claim(queue, holder="reader-1")
    # Still the same delivery: its id acks it on an Erlang node.
    lmq1.ack(queue, got[0].id)
    assert sizes(ref, queue) == [0, 0]
