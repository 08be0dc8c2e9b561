"""Two Erlang LMQ peers and two pylmq nodes serve the same queues, with no master.

Peers a and b are one Mnesia cluster; pylmq node p1 joined a, p2 joined b. Every queue
operation on a pylmq node is an lmq_lib transaction on an Erlang peer, so what one side does
the other sees at once, with the same ids.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from typing import Any

import pytest

from pylmq.errors import MessageNotFound
from tests.cluster.cluster_helpers import Mixed, eventually
from tests.interop.erlpeer import Message as ErlMessage

pytestmark = [pytest.mark.erl, pytest.mark.slow]


def uuid_bytes(text: str) -> bytes:
    return uuid.UUID(text).bytes


def first_record(mixed: Mixed, queue: str) -> Any:
    got = mixed.erl.a.rpc("lmq_lib", "first", queue)
    return got if got == "empty" else ErlMessage.from_term(got)


def queue_size(mixed: Mixed, py: Any, queue: str) -> int | None:
    """The size of the queue in lmq_console:status() of pylmq node py (None: not listed)."""
    queues = dict(mixed.status(py)["queues"])
    return dict(queues[queue.encode()])["size"] if queue.encode() in queues else None


def test_push_on_erlang_is_pulled_on_pylmq_with_the_id_erlang_holds_and_acked_on_erlang(
    mixed: Mixed, queue: str
) -> None:
    assert mixed.erl.a.push(queue, b"from erlang") == "ok"
    got = mixed.p1.client().pull(queue, 5)
    assert got is not None and got.body == b"from erlang"
    held = first_record(mixed, queue)
    assert (held.uuid, held.state) == (uuid_bytes(got.id), "processing")
    assert mixed.erl.b.call("ack", queue, uuid_bytes(got.id)) == "ok"
    assert first_record(mixed, queue) == "empty"


def test_push_on_pylmq_is_pulled_on_erlang_and_acked_on_the_other_pylmq_node(mixed: Mixed, queue: str) -> None:
    assert mixed.p1.client().push(queue, b"from python", "text/plain") == "no"
    got = mixed.erl.b.pull_message(queue, 5)
    assert got.content == ([(b"content-type", b"text/plain")], b"from python")
    mixed.p2.client().ack(queue, str(uuid.UUID(bytes=got.uuid)))
    assert first_record(mixed, queue) == "empty"
    assert eventually(lambda: mixed.p1.client().stats()["queues"].get(queue, {}).get("size"), lambda s: s == 0) == 0


def test_a_pylmq_long_poll_wakes_within_100_ms_of_an_erlang_push(mixed: Mixed, queue: str) -> None:
    """p95 of 30 wake-ups under 100 ms (one slow wake on a shared machine does not fail it);
    the latency includes the test driver's pipe to Erlang, so it overstates the real one."""
    client = mixed.p1.client()
    client.push(queue, b"warm-up")
    assert client.pull(queue, 1) is not None
    latencies: list[float] = []
    for i in range(30):
        got: list[Any] = []
        puller = threading.Thread(target=lambda got=got: got.append(client.pull(queue, 5)))
        puller.start()
        time.sleep(0.05)  # the pull is waiting
        started = time.monotonic()
        mixed.erl.a.push(queue, f"m{i}".encode())
        puller.join(10)
        latencies.append(time.monotonic() - started)
        assert got and got[0] is not None and got[0].body == f"m{i}".encode()
        client.ack(queue, got[0].id)
    latencies.sort()
    p50, p95, p99 = (latencies[int(len(latencies) * q) - 1] for q in (0.5, 0.95, 0.99))
    print(
        f"long-poll wake after an Erlang push: p50 {p50 * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
        f"p99 {p99 * 1000:.1f} ms, max {latencies[-1] * 1000:.1f} ms, mean {statistics.mean(latencies) * 1000:.1f} ms"
    )
    assert p95 < 0.1, f"expected 95% of wake-ups within 100 ms, got p95 {p95 * 1000:.1f} ms ({latencies})"


def test_a_message_pulled_through_pylmq_and_never_acked_is_redelivered_by_erlang_with_a_new_id(
    mixed: Mixed, queue: str
) -> None:
    client = mixed.p1.client()
    client.update_props(queue, {"timeout": 1})
    client.push(queue, b"not acked")
    first = client.pull(queue, 5)
    assert first is not None
    again = mixed.erl.a.pull_message(queue, 5)
    assert again.body == b"not acked" and again.uuid != uuid_bytes(first.id)
    with pytest.raises(MessageNotFound):
        client.ack(queue, first.id)
    assert mixed.erl.a.call("ack", queue, again.uuid) == "ok"


def test_queue_props_set_on_pylmq_are_effective_on_erlang_and_the_reverse(mixed: Mixed, queue: str) -> None:
    mixed.p1.client().update_props(queue, {"retry": 5, "accum": 0.5})
    assert dict(mixed.erl.a.call("props", queue)) == {"accum": 500, "retry": 5, "timeout": 30}
    assert mixed.erl.b.call("update_props", queue, [("timeout", 7)]) == "ok"
    props = eventually(lambda: mixed.p2.client().get_props(queue), lambda p: p["timeout"] == 7)
    assert props == {"accum": 0.5, "retry": 5, "timeout": 7}


def test_accumulation_spans_both_sides(mixed: Mixed, queue: str) -> None:
    mixed.p1.client().update_props(queue, {"accum": 0.5})
    assert mixed.p2.client().push(queue, b"one") == "new"
    assert mixed.erl.a.push(queue, b"two") == ("accum", "yes")
    got = mixed.p1.client().pull(queue, 5)
    assert got is not None and [p.body for p in got.parts] == [b"one", b"two"]


def test_default_props_set_on_either_side_are_effective_on_the_other(mixed: Mixed, queue: str) -> None:
    assert mixed.erl.a.call("set_default_props", [(f"^{queue}".encode(), [("retry", 9)])]) == "ok"
    props = eventually(lambda: mixed.p1.client().get_props(queue + "_x"), lambda p: p["retry"] == 9)
    assert props["retry"] == 9
    mixed.p2.client().set_default_props([(f"^{queue}", {"timeout": 3})])
    assert mixed.erl.b.call("get_default_props") == [(f"^{queue}".encode(), [("timeout", 3)])]
    assert dict(mixed.erl.b.call("props", queue + "_y"))["timeout"] == 3
    mixed.p2.client().set_default_props([])


def test_a_queue_created_on_erlang_appears_on_pylmq_and_one_deleted_on_pylmq_is_gone_on_erlang(
    mixed: Mixed, queue: str
) -> None:
    mixed.erl.a.push(queue, b"x")
    assert eventually(lambda: queue_size(mixed, mixed.p2, queue), lambda n: n == 1) == 1
    mixed.p1.client().delete_queue(queue)
    assert queue not in mixed.erl.b.rpc("lmq_lib", "all_queue_names")
    gone = eventually(lambda: dict(mixed.status(mixed.p2)["queues"]), lambda qs: queue.encode() not in qs)
    assert queue.encode() not in gone


def test_a_queue_deleted_on_erlang_is_gone_on_pylmq(mixed: Mixed, queue: str) -> None:
    mixed.p1.client().push(queue, b"x")
    assert mixed.erl.b.call("delete", queue) == "ok"
    gone = eventually(lambda: dict(mixed.status(mixed.p1)["queues"]), lambda qs: queue.encode() not in qs)
    assert queue.encode() not in gone


def test_pull_any_on_pylmq_sees_a_queue_created_on_erlang_while_it_waits(mixed: Mixed, queue: str) -> None:
    got: list[Any] = []
    puller = threading.Thread(target=lambda: got.append(mixed.p1.client().pull_any(f"^{queue}", 10)))
    puller.start()
    time.sleep(0.3)
    mixed.erl.b.push(queue + "_new", b"to anyone")
    puller.join(15)
    assert got and got[0] is not None and (got[0].queue, got[0].body) == (queue + "_new", b"to anyone")


def test_status_on_a_pylmq_node_lists_all_four_nodes_and_the_queue_sizes(mixed: Mixed, queue: str) -> None:
    for i in range(3):
        mixed.erl.a.push(queue, f"{i}".encode())
    mixed.p2.client().push(queue, b"3")
    four = sorted([mixed.erl.a.name, mixed.erl.b.name, mixed.p1.name, mixed.p2.name])
    status = eventually(
        lambda: mixed.status(mixed.p1),
        lambda s: s["active_nodes"] == four and dict(dict(s["queues"]).get(queue.encode(), [])).get("size") == 4,
    )
    assert (status["all_nodes"], status["active_nodes"], status["mode"]) == (four, four, "cluster")
    assert dict(dict(status["queues"])[queue.encode()])["size"] == 4
