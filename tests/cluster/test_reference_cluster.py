"""pylmq in a cluster of real Erlang LMQ nodes (the reference kit): after each write through
pylmq, every Erlang node serves the queue as if an Erlang node had made the write.

Two real LMQ nodes (lmq1, lmq2: one Mnesia cluster) and one pylmq node joined to lmq1. pylmq
runs its writes on the Erlang nodes in turn, so over a test either node may be the one that ran
it; every check is made on each Erlang node through its own HTTP API. Skipped with the reason
where the kit or OTP 25 is missing (see lmq_reference.py).
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from typing import Any

import boto3
import pytest
from botocore.config import Config

from pylmq.client import Message
from tests.cluster.lmq_reference import RefCluster, RefNode, http, wait_for

pytestmark = [pytest.mark.erl, pytest.mark.slow]

DEFAULT_RETRY = 2


@pytest.fixture
def queue() -> str:
    return "rq_" + secrets.token_hex(4)


def assert_stats_ok_everywhere(ref: RefCluster, queue: str) -> None:
    for node in ref.erl:
        status, body = http("GET", node.url + "/stats")
        assert status == 200, f"GET /stats on {node.name}: expected 200, got {status} {body[:300]!r}"
        assert queue in json.loads(body)["queues"], f"{queue} missing from /stats of {node.name}"


def assert_queue_process_everywhere(ref: RefCluster, queue: str) -> None:
    for node in ref.erl:
        assert queue in node.queue_processes(), f"expected a queue process of {queue} on {node.name}"


def assert_cached_props_equal_mnesia(ref: RefCluster, queue: str) -> None:
    """Each Erlang node's queue process caches the props (merged with the defaults) and the raw
    props that Mnesia holds (lmq_queue's state record: name, props, raw_props, ...)."""
    expr = (
        f"Pid = lmq_queue_mgr:get('{queue}'), S = sys:get_state(Pid),"
        f" {{element(3, S) =:= lmq_lib:get_properties('{queue}'), element(4, S) =:= lmq_lib:queue_info('{queue}')}}"
    )
    for node in ref.erl:
        assert node.eval(expr) == "{true,true}", f"{node.name} caches props of {queue} other than Mnesia's"


def new_queue_through_pylmq(ref: RefCluster, queue: str) -> None:
    """The queue created by a push through pylmq, and left empty."""
    py = ref.py[0].client()
    assert py.push(queue, b"first", "text/plain") == "no"
    got = py.pull(queue, 5)
    assert got is not None and got.body == b"first"
    py.ack(queue, got.id)


def pushed_and_pulled_on(node: RefNode, queue: str) -> Message:
    """A message pushed and pulled through one Erlang node of an empty queue (so its retry is
    what that node's queue process stamped), then acked there."""
    c = node.client()
    probe = secrets.token_hex(4).encode()
    assert c.push(queue, probe, "text/plain") == "no"
    got = c.pull(queue, 5)
    assert got is not None and got.body == probe, f"expected the probe pushed on {node.name} back, got {got}"
    c.ack(queue, got.id)
    return got


# ------------------------------------------------------------------ a new queue through pylmq


def test_a_push_through_pylmq_http_to_a_new_queue_starts_its_queue_process_on_every_erlang_node(
    ref: RefCluster, queue: str
) -> None:
    assert ref.py[0].client().push(queue, b"hi", "text/plain") == "no"
    assert_queue_process_everywhere(ref, queue)
    assert_stats_ok_everywhere(ref, queue)


def test_a_push_through_pylmq_rpc_to_a_new_queue_starts_its_queue_process_on_every_erlang_node(
    ref: RefCluster, queue: str
) -> None:
    with ref.py[0].rpc_client() as rpc:
        assert rpc.push(queue, b"hi") == "ok"
    assert_queue_process_everywhere(ref, queue)
    assert_stats_ok_everywhere(ref, queue)


def test_messages_of_a_queue_created_through_pylmq_are_acked_nacked_and_extended_on_each_erlang_node(
    ref: RefCluster, queue: str
) -> None:
    py = ref.py[0].client()
    for node in ref.erl:
        py.push(queue, f"for {node.name}".encode(), "text/plain")
    for node in ref.erl:
        c = node.client()
        got = py.pull(queue, 5)
        assert got is not None
        status, body = http("POST", f"{node.url}/messages/{queue}/{got.id}?reply=ext")
        assert status == 204, f"ext on {node.name}: expected 204, got {status} {body!r}"
        status, body = http("POST", f"{node.url}/messages/{queue}/{got.id}?reply=nack")
        assert status == 204, f"nack on {node.name}: expected 204, got {status} {body!r}"
        again = py.pull(queue, 5)
        assert again is not None
        c.ack(queue, again.id)  # raises MessageNotFound on a 404
    assert py.pull(queue, 0) is None


def test_delete_queue_on_each_erlang_node_works_for_a_queue_created_through_pylmq(ref: RefCluster) -> None:
    for node in ref.erl:
        queue = "rq_" + secrets.token_hex(4)
        ref.py[0].client().push(queue, b"doomed", "text/plain")
        status, body = http("DELETE", f"{node.url}/queues/{queue}")
        assert status == 204, f"DELETE /queues/{queue} on {node.name}: expected 204, got {status} {body!r}"
        for other in ref.erl:
            left = wait_for(other.queue_processes, lambda names, q=queue: q not in names)
            assert queue not in left, f"{queue} still has a queue process on {other.name}"
        assert queue not in ref.py[0].client().stats()["queues"]


def test_pull_any_on_each_erlang_node_sees_a_queue_created_through_pylmq(ref: RefCluster, queue: str) -> None:
    ref.py[0].client().push(queue, b"any", "text/plain")
    for node in ref.erl:
        got = node.client().pull_any(f"^{queue}$", 2)
        assert got is not None and got.body == b"any", f"pull-any on {node.name} did not see {queue}"
        node.client().nack(queue, got.id)


def waiting_pull_any(regexp: str) -> str:
    """Erlang: how many pull-any processes (lmq_mpull) wait on this regexp."""
    return (
        "length([P || {_, P, _, _} <- supervisor:which_children(lmq_mpull_sup),"
        " case catch sys:get_state(P, 1000) of"
        f' {{waiting, S}} -> lists:member(<<"{regexp}">>, tuple_to_list(S)); _ -> false end])'
    )


def test_a_waiting_pull_any_on_each_erlang_node_takes_a_push_through_pylmq_to_a_new_queue(ref: RefCluster) -> None:
    for node in ref.erl:
        queue = "rq_" + secrets.token_hex(4)
        got: list[Message | None] = []
        waiter = threading.Thread(target=lambda n=node, q=queue, g=got: g.append(n.client().pull_any(f"^{q}$", 10)))
        waiter.start()
        # The pull-any must be waiting before the queue exists.
        waiting = wait_for(lambda n=node, q=queue: n.eval(waiting_pull_any(f"^{q}$")), lambda v: v == "1", 10)
        assert waiting == "1", f"the pull-any on {node.name} is not waiting"
        ref.py[0].client().push(queue, b"late", "text/plain")
        waiter.join(15)
        assert got and got[0] is not None and got[0].body == b"late", f"waiting pull-any on {node.name} got {got}"


def test_an_sqs_long_poll_on_pylmq_is_woken_by_a_push_through_an_erlang_node(ref: RefCluster) -> None:
    py = ref.py[0]
    sqs = boto3.client(
        "sqs",
        endpoint_url=f"http://127.0.0.1:{py.sqs_port}",
        region_name="us-east-1",
        aws_access_key_id="k",
        aws_secret_access_key="s",
        config=Config(retries={"max_attempts": 1}, read_timeout=30),
    )
    queue = "sq_" + secrets.token_hex(4)
    # Made over LMQ with a numeric retry: SQS's CreateQueue asks for retry infinity, which the
    # Erlang nodes cannot serve (docs/sqs.md, a mixed cluster).
    py.client().update_props(queue, {"retry": 2})
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    got: list[tuple[float, dict[str, Any]]] = []

    def poll() -> None:
        start = time.monotonic()
        answer = sqs.receive_message(QueueUrl=url, WaitTimeSeconds=10)
        got.append((time.monotonic() - start, answer))

    waiter = threading.Thread(target=poll)
    waiter.start()
    time.sleep(1.0)  # the poll is waiting on pylmq, with nothing in the queue yet
    assert not got
    ref.erl[1].client().push(queue, b"from erlang", "text/plain")
    waiter.join(15)
    assert got, "the long poll did not answer"
    waited, answer = got[0]
    assert [m["Body"] for m in answer.get("Messages", [])] == ["from erlang"]
    # Woken by the push (after about a second), not at the end of its 10 s wait.
    assert 0.9 <= waited < 8, waited
    sqs.delete_message(QueueUrl=url, ReceiptHandle=answer["Messages"][0]["ReceiptHandle"])


# ------------------------------------------------------------------ props through pylmq


def test_props_patched_through_pylmq_are_served_by_every_erlang_node(ref: RefCluster, queue: str) -> None:
    new_queue_through_pylmq(ref, queue)
    for node in ref.erl:
        assert pushed_and_pulled_on(node, queue).retry == DEFAULT_RETRY
    ref.py[0].client().update_props(queue, {"retry": 7})
    assert_cached_props_equal_mnesia(ref, queue)
    for node in ref.erl:
        got = pushed_and_pulled_on(node, queue)
        assert got.retry == 7, f"{node.name} stamped retry {got.retry} after the PATCH through pylmq, expected 7"


def test_accumulation_set_through_pylmq_is_applied_by_every_erlang_node(ref: RefCluster) -> None:
    py = ref.py[0].client()
    for shift in range(2):
        # pylmq takes the Erlang nodes in turn: with one more call before the PATCH, the node
        # that runs it is the other one, so one of the two rounds runs the PATCH on the node
        # that did not create the queue.
        queue = "rq_" + secrets.token_hex(4)
        new_queue_through_pylmq(ref, queue)
        if shift:
            assert py.pull(queue, 0) is None
        py.update_props(queue, {"accum": 0.5})
        replies = [node.client().push(queue, f"part {i}".encode(), "text/plain") for i, node in enumerate(ref.erl * 2)]
        assert replies == ["new", "yes", "yes", "yes"], f"accumulation replies from lmq1, lmq2, lmq1, lmq2: {replies}"
        got = py.pull(queue, 5)
        assert got is not None and got.type == "compound"
        assert [p.body for p in got.parts] == [b"part 0", b"part 1", b"part 2", b"part 3"]


def test_props_reset_through_pylmq_are_served_by_every_erlang_node(ref: RefCluster, queue: str) -> None:
    py = ref.py[0].client()
    new_queue_through_pylmq(ref, queue)
    py.update_props(queue, {"retry": 7})
    for node in ref.erl:
        assert pushed_and_pulled_on(node, queue).retry == 7
    py.reset_props(queue)
    assert_cached_props_equal_mnesia(ref, queue)
    for node in ref.erl:
        got = pushed_and_pulled_on(node, queue)
        assert got.retry == DEFAULT_RETRY, f"{node.name} stamped retry {got.retry} after the reset through pylmq"


def test_a_reset_on_an_erlang_node_after_a_patch_through_pylmq_is_stored(ref: RefCluster) -> None:
    """The queue process skips a props change equal to the raw props it last stored: after a
    PATCH through pylmq, it must hold the new ones, or the reset below would store nothing."""
    for node in ref.erl:
        queue = "rq_" + secrets.token_hex(4)
        py = ref.py[0].client()
        new_queue_through_pylmq(ref, queue)
        py.update_props(queue, {"retry": 7})
        node.client().reset_props(queue)
        assert node.client().get_props(queue)["retry"] == DEFAULT_RETRY, f"the reset on {node.name} was not stored"
        assert pushed_and_pulled_on(node, queue).retry == DEFAULT_RETRY


def test_default_props_set_and_deleted_through_pylmq_are_served_by_every_erlang_node(
    ref: RefCluster, queue: str
) -> None:
    py = ref.py[0].client()
    new_queue_through_pylmq(ref, queue)
    try:
        py.set_default_props([(f"^{queue}$", {"retry": 4})])
        assert_cached_props_equal_mnesia(ref, queue)
        for node in ref.erl:
            got = pushed_and_pulled_on(node, queue)
            assert got.retry == 4, f"{node.name} stamped retry {got.retry} after PUT /properties through pylmq"
    finally:
        py.delete_default_props()
    assert_cached_props_equal_mnesia(ref, queue)
    for node in ref.erl:
        got = pushed_and_pulled_on(node, queue)
        assert got.retry == DEFAULT_RETRY, f"{node.name} stamped retry {got.retry} after DELETE /properties"


# ------------------------------------------------------------------ delete through pylmq


def test_a_queue_deleted_through_pylmq_has_no_queue_process_left_and_is_recreated_on_push(
    ref: RefCluster, queue: str
) -> None:
    py = ref.py[0].client()
    py.push(queue, b"old", "text/plain")
    assert_queue_process_everywhere(ref, queue)
    py.delete_queue(queue)
    for node in ref.erl:
        assert queue not in node.queue_processes(), f"{queue} kept its queue process on {node.name}"
    for node in ref.erl:
        status, body = http("POST", f"{node.url}/messages/{queue}", b"new")
        assert status == 200, f"push on {node.name} after the delete: expected 200, got {status} {body!r}"
    for node in ref.erl:
        names = wait_for(node.queue_processes, lambda names: queue in names)
        assert queue in names, f"{queue} not recreated on {node.name}"
    assert_stats_ok_everywhere(ref, queue)
    bodies = sorted(m.body for m in iter(lambda: py.pull(queue, 1), None))
    assert bodies == [b"new", b"new"]


# ------------------------------------------------------------------ the other way round


def test_writes_on_an_erlang_node_are_served_by_pylmq(ref: RefCluster, queue: str) -> None:
    lmq1 = ref.erl[0].client()
    py = ref.py[0].client()
    assert lmq1.push(queue, b"from erlang", "text/plain") == "no"
    got = py.pull(queue, 5)
    assert got is not None and got.body == b"from erlang"
    py.ack(queue, got.id)
    lmq1.update_props(queue, {"retry": 5})
    assert wait_for(lambda: py.get_props(queue)["retry"], lambda r: r == 5) == 5
    py.push(queue, b"from pylmq", "text/plain")
    again = py.pull(queue, 5)
    assert again is not None and again.retry == 5
    py.ack(queue, again.id)
    lmq1.delete_queue(queue)
    assert wait_for(lambda: queue in py.stats()["queues"], lambda present: not present) is False
