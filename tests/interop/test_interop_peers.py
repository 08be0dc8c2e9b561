"""Two real Erlang LMQ test peers in one Mnesia cluster behave as one LMQ.

Peer b joined peer a (`lmq_console:join`), so every queue table has a RAM copy
on both; what one node does to a queue the other sees, and lmq_event carries
queue_created / queue_deleted / new_message between them.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from tests.interop.erlpeer import LOCAL, Cluster, Message

pytestmark = pytest.mark.erl

T = TypeVar("T")


def eventually(probe: Callable[[], T], until: Callable[[T], bool], timeout: float = 10.0) -> T:
    """Probes until `until` holds or `timeout` passes; returns the last value seen."""
    deadline = time.monotonic() + timeout
    value = probe()
    while not until(value) and time.monotonic() < deadline:
        time.sleep(0.02)
        value = probe()
    return value


def queue_events(events: Any, queue: str) -> list[Any]:
    return [e for e in events if isinstance(e, tuple) and len(e) == 2 and e[1] == queue]


# ---------------------------------------------------------------- membership


def test_join_makes_both_peers_running_db_nodes(cluster: Cluster) -> None:
    status = dict(cluster.a.call("status"))
    both = sorted([cluster.a.name, cluster.b.name])
    assert (status["all_nodes"], status["active_nodes"]) == (both, both)


def test_join_gives_the_new_peer_a_copy_of_the_admin_tables(cluster: Cluster) -> None:
    copies = cluster.a.rpc("mnesia", "table_info", "__lmq_queue_info__", "ram_copies")
    assert sorted(copies) == sorted([cluster.a.name, cluster.b.name])


def test_join_puts_each_peer_in_the_others_broadcast_list(cluster: Cluster) -> None:
    a_list = eventually(lambda: cluster.a.call("event_nodes"), lambda n: cluster.b.name in n)
    b_list = cluster.b.call("event_nodes")
    assert (a_list, b_list) == ([cluster.b.name], [cluster.a.name])


# ---------------------------------------------------------------- messages


def test_push_on_a_is_pulled_on_b_as_the_record_a_holds(cluster: Cluster, queue: str) -> None:
    assert cluster.a.push(queue, b"hello") == "ok"
    pulled = cluster.b.pull_message(queue)
    on_a = Message.from_term(cluster.a.rpc("lmq_lib", "first", queue))
    assert (pulled.body, pulled.state, pulled.type, pulled.retry) == (b"hello", "processing", "normal", 2)
    assert on_a == pulled


def test_ack_on_the_other_peer_removes_the_message(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"m")
    pulled = cluster.b.pull_message(queue)
    assert cluster.a.call("ack", queue, pulled.uuid) == "ok"
    assert (cluster.a.rpc("lmq_lib", "first", queue), cluster.b.rpc("lmq_lib", "first", queue)) == (
        "empty",
        "empty",
    )


def test_a_second_ack_is_not_found(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"m")
    pulled = cluster.a.pull_message(queue)
    assert cluster.b.call("ack", queue, pulled.uuid) == "ok"
    assert cluster.a.call("ack", queue, pulled.uuid) == "not_found"


def test_ack_accepts_the_uuid_as_text(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"m")
    pulled = cluster.a.pull_message(queue)
    text = cluster.a.call("uuid_text", pulled.uuid)
    assert cluster.b.call("ack", queue, text) == "ok"


def test_nack_on_the_other_peer_makes_the_message_available_with_its_retry_spent(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"again")
    first = cluster.b.pull_message(queue)
    assert cluster.a.call("nack", queue, first.uuid) == "ok"
    second = cluster.a.pull_message(queue)
    assert (second.body, first.retry, second.retry) == (b"again", 2, 1)


def test_ext_on_the_other_peer_keeps_the_uuid_and_moves_the_deadline(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"slow")
    pulled = cluster.b.pull_message(queue)
    assert cluster.a.call("ext", queue, pulled.uuid) == "ok"
    kept = Message.from_term(cluster.b.rpc("lmq_lib", "first", queue))
    assert (kept.uuid, kept.state) == (pulled.uuid, "processing")
    assert kept.ts >= pulled.ts


def test_put_back_on_the_other_peer_gives_the_spent_retry_back(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"undelivered")
    first = cluster.b.pull_message(queue)
    assert cluster.a.call("put_back", queue, first.uuid) == "ok"
    second = cluster.b.pull_message(queue)
    assert (second.body, second.retry) == (b"undelivered", first.retry)


def test_redelivery_after_timeout_gives_a_new_id_and_the_old_one_is_not_found(cluster: Cluster, queue: str) -> None:
    cluster.a.call("update_props", queue, [("timeout", 0.3)])
    cluster.a.push(queue, b"lost")
    first = cluster.b.pull_message(queue)
    again = cluster.a.pull_message(queue, timeout=10)
    assert isinstance(first.retry, int), first
    assert (again.body, again.retry) == (b"lost", first.retry - 1)
    assert again.uuid != first.uuid
    assert cluster.b.call("ack", queue, first.uuid) == "not_found"
    assert cluster.b.call("ack", queue, again.uuid) == "ok"


def test_message_out_of_retries_is_discarded(cluster: Cluster, queue: str) -> None:
    cluster.a.call("update_props", queue, [("retry", 0), ("timeout", 0.2)])
    cluster.a.push(queue, b"once")
    assert cluster.b.pull_message(queue).retry == 0
    assert cluster.a.pull(queue, timeout=1) == "empty"
    assert cluster.b.rpc("lmq_lib", "first", queue) == "empty"


def test_accumulation_packs_pushes_on_both_peers_into_one_compound_message(cluster: Cluster, queue: str) -> None:
    cluster.a.call("update_props", queue, [("accum", 1500)])
    replies = [cluster.a.push(queue, b"1"), cluster.b.push(queue, b"2")]
    packed = cluster.b.pull_message(queue, timeout=10)
    assert replies == [("accum", "new"), ("accum", "yes")]
    assert (packed.type, packed.bodies) == ("compound", [b"1", b"2"])


def test_concurrent_pulls_on_both_peers_deliver_each_message_once(cluster: Cluster, queue: str) -> None:
    bodies = {str(i).encode() for i in range(20)}
    for body in sorted(bodies):
        cluster.a.push(queue, body)
    requests = [peer.send("pull", queue, 5) for peer in (cluster.a, cluster.b) for _ in range(10)]
    got = [Message.from_term(cluster.driver.result(r, timeout=30)) for r in requests]
    assert {m.body for m in got} == bodies
    assert len({m.uuid for m in got}) == 20


# ---------------------------------------------------------------- waiting


def test_pull_waiting_on_b_wakes_on_a_push_to_a(cluster: Cluster, queue: str) -> None:
    request = cluster.b.send("pull", queue, 60)
    waiting = eventually(
        lambda: cluster.b.rpc("pg", "get_local_members", "lmq_peer_waiters", queue),
        lambda pids: len(pids) == 1,
    )
    assert len(waiting) == 1, f"expected one puller waiting on b, got {waiting!r}"
    cluster.a.push(queue, b"wake up")
    # The pull may wait 60 s; an answer well before that can only come from the
    # new_message that a broadcast to b.
    woken = Message.from_term(cluster.driver.result(request, timeout=20))
    assert woken.body == b"wake up"


def test_pull_with_nothing_to_take_answers_empty(cluster: Cluster, queue: str) -> None:
    assert cluster.b.pull(queue, timeout=0.2) == "empty"


# ---------------------------------------------------------------- props


def test_queue_props_set_on_a_are_seen_on_b(cluster: Cluster, queue: str) -> None:
    cluster.a.call("update_props", queue, [("retry", 5), ("timeout", 7)])
    assert cluster.b.call("props", queue) == [("accum", 0), ("retry", 5), ("timeout", 7)]


def test_update_props_merges_with_the_queues_own_props(cluster: Cluster, queue: str) -> None:
    cluster.a.call("update_props", queue, [("retry", 5)])
    cluster.b.call("update_props", queue, [("timeout", 7)])
    assert cluster.a.call("props", queue) == [("accum", 0), ("retry", 5), ("timeout", 7)]


def test_default_props_set_on_b_apply_to_matching_queues_on_a(cluster: Cluster) -> None:
    prefix = "dp_" + secrets.token_hex(3)
    try:
        assert cluster.b.call("set_default_props", [(f"^{prefix}".encode(), [("retry", 9)])]) == "ok"
        matching = cluster.a.call("props", prefix + "_q")
        other = cluster.a.call("props", "x" + prefix)
    finally:
        cluster.b.call("set_default_props", [])
    assert matching == [("accum", 0), ("retry", 9), ("timeout", 30)]
    assert other == [("accum", 0), ("retry", 2), ("timeout", 30)]


def test_invalid_default_props_are_refused_and_the_old_ones_kept(cluster: Cluster) -> None:
    kept = [(b"^kept_", [("timeout", 5)])]
    try:
        cluster.a.call("set_default_props", kept)
        refused = cluster.a.call("set_default_props", [(b"(", [("retry", 1)])])
        now = cluster.b.call("get_default_props")
    finally:
        cluster.a.call("set_default_props", [])
    assert (refused, now) == (("error", "invalid_syntax"), kept)


# ---------------------------------------------------------------- lmq_event


def test_queue_created_on_a_is_broadcast_to_b(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"first use")
    events = eventually(
        lambda: queue_events(cluster.b.call("received"), queue),
        lambda e: ("queue_created", queue) in e,
    )
    assert ("queue_created", queue) in events


def test_new_message_on_a_is_broadcast_to_b(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"news")
    events = eventually(
        lambda: queue_events(cluster.b.call("received"), queue),
        lambda e: ("new_message", queue) in e,
    )
    assert ("new_message", queue) in events


def test_queue_deleted_on_b_is_broadcast_to_a_and_drops_the_queue(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"doomed")
    assert cluster.b.call("delete", queue) == "ok"
    events = eventually(
        lambda: queue_events(cluster.a.call("received"), queue),
        lambda e: ("queue_deleted", queue) in e,
    )
    assert ("queue_deleted", queue) in events
    assert queue not in cluster.a.rpc("lmq_lib", "all_queue_names")
    assert cluster.a.rpc("lmq_lib", "first", queue) == ("error", "no_queue_exists")


def test_add_new_node_without_mnesia_joins_every_broadcast_list_only(cluster: Cluster) -> None:
    # The driver node runs no Mnesia: it stands for a hidden pylmq node.
    driver = cluster.driver.name
    cluster.driver.call(LOCAL, "lmq_peer_driver", "listen")
    assert cluster.a.rpc("lmq_console", "add_new_node", driver) == "ok"
    lists = (cluster.a.call("event_nodes"), cluster.b.call("event_nodes"))
    db_nodes = cluster.a.rpc("mnesia", "system_info", "db_nodes")
    assert (driver in lists[0], driver in lists[1], driver in db_nodes) == (True, True, False)


def test_a_node_without_mnesia_hears_the_remote_notify_messages(cluster: Cluster, queue: str) -> None:
    driver = cluster.driver.name
    cluster.driver.call(LOCAL, "lmq_peer_driver", "listen")
    cluster.a.rpc("lmq_console", "add_new_node", driver)
    cluster.b.push(queue, b"for python")
    expected = [("notify", ("remote", ("queue_created", queue))), ("notify", ("remote", ("new_message", queue)))]
    heard = eventually(
        lambda: cluster.driver.call(LOCAL, "lmq_peer_driver", "heard"),
        lambda h: all(m in h for m in expected),
    )
    assert [m for m in heard if m in expected] == expected


# ---------------------------------------------------------------- lmq_lib by rpc


def test_lmq_lib_enqueue_with_accum_answers_new_then_yes(cluster: Cluster, queue: str) -> None:
    props = [("accum", 5000), ("retry", 1), ("timeout", 30)]
    assert cluster.a.rpc("lmq_lib", "create", queue, props) == "ok"
    first = cluster.b.rpc("lmq_lib", "enqueue", queue, ([], b"1"), props)
    second = cluster.a.rpc("lmq_lib", "enqueue", queue, ([], b"2"), props)
    assert (first, second) == (("accum", "new"), ("accum", "yes"))


def test_lmq_lib_enqueue_without_retry_in_props_delivers_forever(cluster: Cluster, queue: str) -> None:
    cluster.a.rpc("lmq_lib", "create", queue)
    assert cluster.a.rpc("lmq_lib", "enqueue", queue, ([(b"content-type", b"text/plain")], b"x"), []) == "ok"
    taken = Message.from_term(cluster.b.rpc("lmq_lib", "dequeue", queue, 30))
    assert (taken.retry, taken.content) == ("infinity", ([(b"content-type", b"text/plain")], b"x"))


def test_lmq_lib_dequeue_of_a_missing_queue_is_no_queue_exists(cluster: Cluster, queue: str) -> None:
    assert cluster.a.rpc("lmq_lib", "dequeue", queue, 30) == ("error", "no_queue_exists")


def test_lmq_lib_done_of_an_unknown_uuid_is_not_found(cluster: Cluster, queue: str) -> None:
    cluster.a.rpc("lmq_lib", "create", queue)
    assert cluster.b.rpc("lmq_lib", "done", queue, bytes(16)) == "not_found"


def test_ack_with_a_malformed_id_is_not_found_and_keeps_the_message(cluster: Cluster, queue: str) -> None:
    cluster.a.push(queue, b"keep me")
    pulled = cluster.a.pull_message(queue)
    assert cluster.b.call("ack", queue, b"not-a-uuid") == "not_found"
    assert Message.from_term(cluster.b.rpc("lmq_lib", "first", queue)) == pulled


def test_lmq_lib_waittime_of_an_empty_queue_is_infinity(cluster: Cluster, queue: str) -> None:
    cluster.a.rpc("lmq_lib", "create", queue)
    assert cluster.b.rpc("lmq_lib", "waittime", queue) == "infinity"


def test_lmq_lib_get_lmq_info_of_a_missing_key_is_not_found(cluster: Cluster) -> None:
    assert cluster.a.rpc("lmq_lib", "get_lmq_info", "no_such_key") == ("error", "not_found")


def test_lmq_lib_set_lmq_info_is_read_on_the_other_peer(cluster: Cluster) -> None:
    key = "k_" + secrets.token_hex(3)
    assert cluster.a.rpc("lmq_lib", "set_lmq_info", key, [1, 2]) == "ok"
    assert cluster.b.rpc("lmq_lib", "get_lmq_info", key) == ("ok", [1, 2])
