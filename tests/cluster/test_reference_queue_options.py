"""Per-message options of a pylmq node serving a cluster of real Erlang LMQ nodes (the kit).

Two real LMQ nodes (lmq1, lmq2: one Mnesia cluster) and two pylmq nodes joined to them, run in
this process on one event loop in a thread (:class:`InProcess`), so that the tests call the
store's methods (push with options, peek, find_delivery, virtual queues) directly, and pull
through each node's HTTP API. Checks of what Mnesia holds go through an Erlang node's eval.
Skipped with the reason where the kit or OTP 25 is missing (see lmq_reference.py).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from pylmq.client import HttpClient, Message, RpcClient
from pylmq.client import PushOptions as ClientOptions
from pylmq.cluster import Cluster
from pylmq.cluster.mnesia_store import MnesiaStore
from pylmq.core.message import PushOptions, State, msg_key, parse_uuid, uuid_text
from pylmq.erlang import start_node
from pylmq.erlang.node import Node
from pylmq.errors import ClusterError, InvalidProps, NotSupported
from pylmq.node import LMQNode, NodeOptions
from pylmq.store.memory import MemoryStore
from tests.cluster.lmq_reference import RefCluster, RefNode, http, reference_cluster, wait_for

pytestmark = [pytest.mark.erl, pytest.mark.slow]

T = TypeVar("T")
REFUSED = "not available while the node serves an Erlang LMQ cluster"
DELAY = 1.5  # seconds a delayed message waits; long enough to see that nothing comes early
EARLY = 0.05  # clock reading slack between the Erlang and Python sides of one host
LATE = 2.0  # generous: a loaded host answers late, a missed wake-up never (the pull times out)


@dataclass
class PyMember:
    node: LMQNode
    store: MnesiaStore
    dist: Node
    cluster: Cluster

    @property
    def url(self) -> str:
        assert self.node.http_address is not None
        return f"http://127.0.0.1:{self.node.http_address[1]}"

    def client(self, timeout: float = 30.0) -> HttpClient:
        return HttpClient(self.url, request_timeout=timeout)


class InProcess:
    """pylmq nodes on one event loop in a thread: ``run`` a coroutine there and get its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="pylmq-nodes", daemon=True)
        self.thread.start()
        self.members: list[PyMember] = []

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return fut.result(timeout)

    async def start(
        self, cookie: str, join: str, before_join: Callable[[LMQNode], Awaitable[None]] | None = None
    ) -> PyMember:
        opts = NodeOptions(http=("127.0.0.1", 0), rpc=("127.0.0.1", 0), store="memory")
        store = MnesiaStore(MemoryStore(), rpc_timeout=5.0)
        node = LMQNode(opts, store=store)
        await node.start()
        if before_join is not None:
            await before_join(node)
        dist = await start_node(f"py{secrets.token_hex(4)}@127.0.0.1", cookie)
        cluster = Cluster(dist, store, node.manager)
        try:
            await cluster.join(join)
        except BaseException:
            await cluster.close()
            await node.stop()
            await dist.stop()
            raise
        member = PyMember(node, store, dist, cluster)
        self.members.append(member)
        return member

    async def _stop(self) -> None:
        for m in self.members:
            await m.cluster.close()
            await m.node.stop()
            await m.dist.stop()

    def close(self) -> None:
        try:
            self.run(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


@dataclass
class Mixed:
    ref: RefCluster
    nodes: InProcess
    py1: PyMember
    py2: PyMember

    @property
    def store(self) -> MnesiaStore:
        return self.py1.store

    def push(self, queue: str, body: bytes, options: PushOptions, retry: int = 2) -> bytes:
        item = (((b"content-type", b"text/plain"),), body)
        return self.nodes.run(self.store.push(queue, item, retry, options))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mixed]:
    with reference_cluster(tmp_path_factory.mktemp("options"), erlang=2, pylmq=0) as ref:
        nodes = InProcess()
        try:
            py1 = nodes.run(nodes.start(ref.cookie, ref.erl[0].name))
            py2 = nodes.run(nodes.start(ref.cookie, ref.erl[1].name))
            yield Mixed(ref, nodes, py1, py2)
        finally:
            nodes.close()


@pytest.fixture
def queue() -> str:
    return "oq_" + secrets.token_hex(4)


def mnesia_rows(node: RefNode, queue: str) -> str:
    """The queue table's rows as the Erlang node holds them, or ``none`` without a table. Each
    row without its uuid: ~p would print one that happens to be printable Latin-1 as text,
    which is not UTF-8."""
    return node.eval(
        f"case lists:member('{queue}', mnesia:system_info(tables)) of"
        f" true -> [{{T, S, Y, R, C}} || {{_, {{T, _}}, S, Y, R, C}} <- ets:tab2list('{queue}')];"
        " false -> none end"
    )


def first_row(node: RefNode, queue: str) -> tuple[float, str, str]:
    """(key time, state, retry) of the queue's first row as the Erlang node holds it."""
    out = node.eval(f"{{message, {{T, _}}, S, _, R, _}} = lmq_lib:first('{queue}'), {{T, S, R}}")
    ts, state, retry = out.strip("{}").split(",")
    return float(ts), state, retry


def timed_pull(client: HttpClient, queue: str, timeout: float) -> tuple[Message | None, float]:
    got = client.pull(queue, timeout)
    return got, time.time()


# ------------------------------------------------------------------ delay


def waiters(node: RefNode, queue: str) -> int:
    """Pulls waiting in the node's queue process of ``queue`` (lmq_queue's state: its 5th field)."""
    out = node.eval(
        f"case lmq_queue_mgr:get('{queue}') of not_found -> 0; Pid -> queue:len(element(5, sys:get_state(Pid))) end"
    )
    return int(out)


@contextmanager
def waiting_pull(node: RefNode, queue: str) -> Iterator[list[tuple[Message | None, float]]]:
    """A pull of up to 10 s on ``node`` (in a thread), already waiting in the queue process when
    the block starts; after the block, the list holds its (message, time it came)."""
    result: list[tuple[Message | None, float]] = []
    puller = threading.Thread(target=lambda: result.append(timed_pull(node.client(), queue, 10)))
    puller.start()
    try:
        assert wait_for(lambda: waiters(node, queue), lambda n: n == 1, 10) == 1
        yield result
    finally:
        puller.join(15)


def test_a_delayed_row_comes_neither_early_nor_late_to_a_pull_waiting_on_an_erlang_node(
    mixed: Mixed, queue: str
) -> None:
    erl = mixed.ref.erl[1]
    # The pull waits on an empty queue (its queue process sleeps without a deadline) before
    # the row exists: only the push's new_message makes it look at the row's time.
    with waiting_pull(erl, queue) as result:
        due = time.time() + DELAY
        uuid = mixed.push(queue, b"later", PushOptions(not_before=due))
        ts, state, retry = first_row(erl, queue)
        assert (round(ts, 3), state, retry) == (round(due, 3), "available", "3"), "expected the due time as key"
        assert mixed.py1.client().pull(queue, 0) is None, "pylmq delivered a delayed message early"
    [(got, at)] = result
    assert got is not None and got.body == b"later", f"expected the delayed message from {erl.name}, got {got}"
    assert due - EARLY <= at <= due + LATE, f"delivered {at - due:+.3f} s from its due time"
    assert uuid_text(uuid) != got.id  # a delivery has its own id, as LMQ makes it
    erl.client().ack(queue, got.id)


def test_a_delayed_row_to_a_new_queue_comes_on_time_from_pylmq_and_an_erlang_node(mixed: Mixed, queue: str) -> None:
    erl = mixed.ref.erl[0]
    # A new queue: the first write finds no table, creates the queue, then writes.
    due = time.time() + DELAY
    mixed.push(queue, b"later", PushOptions(not_before=due))
    assert erl.client().pull(queue, 0) is None, "the Erlang node delivered a delayed message early"
    got, at = timed_pull(mixed.py2.client(), queue, 10)
    assert got is not None and got.body == b"later", f"expected the delayed message from pylmq, got {got}"
    assert due - EARLY <= at <= due + LATE, f"pylmq delivered {at - due:+.3f} s from its due time"
    mixed.py2.client().ack(queue, got.id)
    # Past the due time, a pull on an Erlang node (no waiting involved) takes the next at once.
    mixed.push(queue, b"due now", PushOptions(not_before=time.time() - 5))
    got = erl.client().pull(queue, 0)
    assert got is not None and got.body == b"due now"
    erl.client().ack(queue, got.id)


def test_delayed_rows_queue_by_due_time_behind_messages_due_now(mixed: Mixed, queue: str) -> None:
    erl = mixed.ref.erl[0]
    mixed.push(queue, b"second", PushOptions(not_before=time.time() + DELAY))
    assert erl.client().push(queue, b"first", "text/plain") == "no"
    c = erl.client()
    first = c.pull(queue, 0)
    assert first is not None and first.body == b"first"
    c.ack(queue, first.id)
    second = c.pull(queue, 10)
    assert second is not None and second.body == b"second"
    c.ack(queue, second.id)


# ------------------------------------------------------------------ per-message retry


def test_a_per_message_retry_is_the_rows_retry_and_the_erlang_node_honours_it(mixed: Mixed, queue: str) -> None:
    erl = mixed.ref.erl[1]
    c = erl.client()
    assert mixed.nodes.run(mixed.store.create(queue, {"retry": 5, "timeout": 1}))
    mixed.push(queue, b"once more", PushOptions(retry=1), retry=5)
    assert first_row(erl, queue)[1:] == ("available", "2"), "expected the row's retry: 1 + the first delivery"
    got = c.pull(queue, 5)
    assert got is not None and got.retry == 1, f"expected retry 1 left after the first delivery, got {got}"
    again = c.pull(queue, 5)  # not acked: back after the 1 s timeout
    assert again is not None and again.body == b"once more" and again.retry == 0, again
    assert c.pull(queue, 2.5) is None, "the Erlang node redelivered past the message's own retry"
    assert wait_for(lambda: mnesia_rows(erl, queue), lambda rows: rows == "[]", 5) == "[]"


def test_once_is_lmq_retry_0_and_a_ttl_beside_it_is_accepted(mixed: Mixed, queue: str) -> None:
    erl = mixed.ref.erl[0]
    assert mixed.nodes.run(mixed.store.create(queue, {"retry": 5, "timeout": 1}))
    mixed.push(queue, b"at most once", PushOptions(once=True, expires=time.time() + 60), retry=5)
    assert first_row(erl, queue)[1:] == ("available", "1")
    got = erl.client().pull(queue, 5)
    assert got is not None and got.retry == 0, got
    assert erl.client().pull(queue, 2.5) is None, "an at-most-once message came back"


# ------------------------------------------------------------------ refusals


REFUSALS = [
    (PushOptions(expires=time.time() + 60), "ttl"),
    (PushOptions(not_before=time.time() + 5, expires=time.time() + 60), "ttl"),
    (PushOptions(interval=2.0), "retry interval"),
    (PushOptions(priority=3), "priority"),
    (PushOptions(retry=None), 'retry "infinity"'),
]


def test_options_the_erlang_nodes_cannot_honour_are_refused_and_nothing_is_written(mixed: Mixed, queue: str) -> None:
    erl = mixed.ref.erl[0]
    for options, feature in REFUSALS:
        with pytest.raises(NotSupported) as e:
            mixed.push(queue, b"refused", options)
        assert feature in e.value.detail and REFUSED in e.value.detail, e.value.detail
    assert mnesia_rows(erl, queue) == "none", "a refused push to a new queue created it"

    # An existing queue with a message keeps exactly that message.
    mixed.push(queue, b"kept", PushOptions())
    before = mnesia_rows(erl, queue)
    for options, _ in REFUSALS:
        with pytest.raises(NotSupported):
            mixed.push(queue, b"refused", options)
    assert mnesia_rows(erl, queue) == before


def test_the_dead_letter_prop_and_requeue_are_refused_before_any_write(mixed: Mixed, queue: str) -> None:
    erl = mixed.ref.erl[1]
    run, store = mixed.nodes.run, mixed.store
    with pytest.raises(InvalidProps) as e:
        run(store.create(queue, {"dead_letter": "dlq_" + queue}))
    assert "dead_letter" in e.value.detail and REFUSED in e.value.detail, e.value.detail
    assert erl.eval(f"lmq_lib:queue_info('{queue}')") == "not_found"
    run(store.create(queue, {"retry": 1}))
    with pytest.raises(InvalidProps):
        run(store.set_queue_props(queue, {"retry": 1, "dead_letter": "dlq_" + queue}))
    assert erl.eval(f"lmq_lib:queue_info('{queue}')") == "[{retry,1}]"
    with pytest.raises(NotSupported) as e2:
        run(store.requeue(queue, 10, None))
    assert "requeue" in e2.value.detail and REFUSED in e2.value.detail


# ------------------------------------------------------------------ peek and find_delivery


def test_peek_pages_the_mirror_and_find_delivery_resolves_an_erlang_delivery_by_key(mixed: Mixed, queue: str) -> None:
    erl = mixed.ref.erl[1]
    store, run = mixed.py2.store, mixed.nodes.run
    ids = [mixed.push(queue, f"m{i}".encode(), PushOptions()) for i in range(3)]
    mixed.push(queue, b"later", PushOptions(not_before=time.time() + 600))
    got = erl.client().pull(queue, 5)
    assert got is not None and got.body == b"m0"
    delivery = parse_uuid(got.id)
    assert delivery is not None

    def page() -> list[Any]:
        return run(store.peek(queue, None, 10))

    # The pull's delete of m0's row and write of its delivery are two table events, which may
    # reach the mirror in separate reads: wait until both are applied.
    rows = wait_for(page, lambda rows: len(rows) == 4 and any(r.id[1] == delivery for r in rows), 5)
    # Id order: the delivery's deadline (now + 30 s) before the message due in 600 s.
    assert [r.content[1] for r in rows] == [b"m1", b"m2", b"m0", b"later"]
    assert [r.state for r in rows] == [State.AVAILABLE] * 2 + [State.PROCESSING, State.AVAILABLE]
    assert [r.id[1] for r in rows[:2]] == ids[1:]
    assert all(r.ext is None for r in rows)
    assert [r.content[1] for r in run(store.peek(queue, rows[0].id, 2))] == [b"m2", b"m0"]
    assert run(store.peek(queue, rows[-1].id, 2)) == []

    assert store.find_delivery(queue, msg_key(delivery)) == delivery
    assert store.find_delivery(queue, msg_key(ids[1])) is None, "an available record is no delivery"
    assert store.find_delivery(queue, msg_key(delivery) ^ 1) is None
    assert store.find_delivery("no_such_" + queue, msg_key(delivery)) is None
    erl.client().ack(queue, got.id)


# ------------------------------------------------------------------ virtual queues


def test_virtual_queues_are_shared_by_the_pylmq_nodes_through_lmq_info(mixed: Mixed, queue: str) -> None:
    run, erl = mixed.nodes.run, mixed.ref.erl[0]
    name = "v_" + queue
    run(mixed.py1.store.set_virtual(name, [queue + "_a", queue + "_b"]))
    seen = wait_for(lambda: mixed.py2.store.virtual_queues().get(name), lambda v: v is not None, 5)
    assert seen == [queue + "_a", queue + "_b"]
    stored = erl.eval(f'lmq_lib:get_lmq_info({{pylmq_virtual_queues, <<"{name}">>}})')
    assert stored.replace("\n", "").replace(" ", "") == f'{{ok,[<<"{queue}_a">>,<<"{queue}_b">>]}}'
    # An Erlang node knows nothing of it: a push there to the virtual name makes a real queue.
    assert erl.client().push(name, b"to the name", "text/plain") == "no"
    assert erl.eval(f"lmq_lib:queue_info('{name}')") == "[]"
    status, _ = http("GET", erl.url + "/stats")
    assert status == 200, "an Erlang node's /stats fails beside the lmq_info rows"
    assert http("DELETE", f"{erl.url}/queues/{name}")[0] == 204
    # The other node rebinds and unbinds; both see each change.
    run(mixed.py2.store.set_virtual(name, [queue + "_c"]))
    assert wait_for(lambda: mixed.py1.store.virtual_queues().get(name), lambda v: v == [queue + "_c"], 5) == [
        queue + "_c"
    ]
    run(mixed.py2.store.set_virtual(name, []))
    assert wait_for(lambda: name in mixed.py1.store.virtual_queues(), lambda present: not present, 5) is False
    assert erl.eval(f'lmq_lib:get_lmq_info({{pylmq_virtual_queues, <<"{name}">>}})') == "{error,not_found}"


def test_a_joining_pylmq_node_loads_the_clusters_virtual_queues_and_puts_its_own_in(
    mixed: Mixed, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    run, erl = mixed.nodes.run, mixed.ref.erl[1]
    shared, own = "vs_" + queue, "vo_" + queue

    async def alone(node: LMQNode) -> None:
        # Before the join: a virtual queue and a message with a priority of this node's own.
        await node.manager.set_virtual(own, [queue])
        await node.manager.push_with(queue, (((b"content-type", b"text/plain"),), b"mine"), PushOptions(priority=7))

    run(mixed.py1.store.set_virtual(shared, [queue + "_x"]))
    late = run(mixed.nodes.start(mixed.ref.cookie, erl.name, alone))
    try:
        assert late.store.virtual_queues() == {**mixed.py1.store.virtual_queues(), own: [queue]}
        assert late.store.virtual_queues()[shared] == [queue + "_x"]
        seen = wait_for(lambda: mixed.py1.store.virtual_queues().get(own), lambda v: v is not None, 5)
        assert seen == [queue], "the joining node's own virtual queue did not reach the cluster"
        # The message went in as LMQ's row: served by an Erlang node, its priority gone (logged).
        got = erl.client().pull(queue, 5)
        assert got is not None and got.body == b"mine"
        erl.client().ack(queue, got.id)
        assert "without their expiry, interval, priority or dead-letter data" in caplog.text
    finally:
        run(mixed.py1.store.set_virtual(shared, []))
        run(mixed.py1.store.set_virtual(own, []))


def test_a_node_with_a_dead_letter_queue_is_refused_at_join_and_writes_nothing(mixed: Mixed, queue: str) -> None:
    erl = mixed.ref.erl[0]

    async def alone(node: LMQNode) -> None:
        await node.manager.update_props(queue, {"retry": 1, "dead_letter": "dlq_" + queue})

    with pytest.raises(ClusterError) as e:
        mixed.nodes.run(mixed.nodes.start(mixed.ref.cookie, erl.name, alone))
    assert f"queue {queue!r}" in e.value.detail and "dead_letter is not available" in e.value.detail, e.value.detail
    assert erl.eval(f"lmq_lib:queue_info('{queue}')") == "not_found"


# ------------------------------------------------------------------ through the queue manager


def test_the_managers_push_peek_and_key_lookup_serve_the_cluster(mixed: Mixed, queue: str) -> None:
    run, manager, erl = mixed.nodes.run, mixed.py1.node.manager, mixed.ref.erl[0]
    item = (((b"content-type", b"text/plain"),), b"via manager")
    due = time.time() + DELAY
    [(name, uuid)] = run(manager.push_with(queue, item, PushOptions(not_before=due)))
    assert name == queue
    assert erl.client().pull(queue, 0) is None
    got, at = timed_pull(erl.client(), queue, 10)
    assert got is not None and got.body == b"via manager" and due - EARLY <= at <= due + LATE, (got, at - due)
    delivery = parse_uuid(got.id)
    assert delivery is not None

    async def key_of(key: int) -> bytes | None:
        return manager.resolve_key(queue, key)

    assert wait_for(lambda: run(key_of(msg_key(delivery))), lambda u: u is not None, 5) == delivery
    run(manager.push_with(queue, item, PushOptions(not_before=time.time() + 600)))
    # The mirror hears of the row from its subscription peer, which may not be the peer that
    # answered the push: the peek shows it once that table event has arrived.
    page = wait_for(lambda: run(manager.peek(queue, None, 10)), lambda p: len(p) == 2, 5)
    assert [m.state for m in page] == [State.PROCESSING, State.AVAILABLE]
    assert run(manager.peek(queue, uuid_text(page[0].id[1]), 10)) == page[1:]
    with pytest.raises(NotSupported, match="message priority"):
        run(manager.push_with(queue + "_p", item, PushOptions(priority=1)))
    # Refused before anything is written: not even the queue was created.
    assert mnesia_rows(erl, queue + "_p") == "none"
    erl.client().ack(queue, got.id)
    assert uuid != delivery


# ------------------------------------------------------------------ through pylmq's HTTP and RPC APIs


def test_over_http_a_delayed_push_to_pylmq_reaches_a_pull_waiting_on_an_erlang_node(mixed: Mixed, queue: str) -> None:
    erl = mixed.ref.erl[0]
    with waiting_pull(erl, queue) as result:
        due = time.time() + DELAY
        ids = mixed.py1.client().push_with(queue, b"over http", "text/plain", ClientOptions(delay=DELAY, retry=0))
        assert list(ids) == [queue]
        page = mixed.py2.client().peek(queue)  # the other pylmq node's mirror
        assert [(e["id"], e["state"], e["retry"]) for e in page] == [(ids[queue], "available", 1)], page
    [(got, at)] = result
    assert got is not None and got.body == b"over http" and got.retry == 0, got
    assert due - EARLY <= at <= due + LATE, f"delivered {at - due:+.3f} s from its due time"
    erl.client().ack(queue, got.id)


def test_over_http_and_rpc_what_the_erlang_nodes_cannot_honour_is_refused_with_the_reason(
    mixed: Mixed, queue: str
) -> None:
    erl, py = mixed.ref.erl[1], mixed.py2
    refused = [
        (ClientOptions(ttl=60), "a ttl (expiry time) is"),
        (ClientOptions(delay=5, ttl=60), "a ttl (expiry time) is"),
        (ClientOptions(interval=2), "a retry interval (per-message timeout) is"),
        (ClientOptions(priority=5), "a message priority is"),
        (ClientOptions(retry="infinity"), 'retry "infinity" is'),
    ]
    for options, feature in refused:
        with pytest.raises(NotSupported) as e:
            py.client().push_with(queue, b"refused", "text/plain", options)
        assert f"{feature} {REFUSED}: its Erlang nodes" in e.value.detail or "infinity" in feature, e.value.detail
        assert f"{feature} {REFUSED}" in e.value.detail, e.value.detail
    status, body = http("POST", f"{py.url}/messages/{queue}?priority=5", b"refused")
    assert status == 501 and json.loads(body)["error"] == "not_supported", (status, body)
    assert py.node.rpc_address is not None
    with RpcClient("127.0.0.1", py.node.rpc_address[1], request_timeout=30) as rpc, pytest.raises(NotSupported):
        rpc.push_with(queue, "refused", ClientOptions(ttl=60))
    # Nothing reached Mnesia, not even the queue.
    assert mnesia_rows(erl, queue) == "none"

    status, body = http("PATCH", f"{py.url}/properties/{queue}", b'{"dead_letter": "dlq"}', "application/json")
    assert status == 400 and "dead_letter is not available" in json.loads(body)["detail"], (status, body)
    http("POST", f"{py.url}/messages/{queue}", b"plain")  # a queue to requeue from
    with pytest.raises(NotSupported, match="requeue of dead letters is not available"):
        py.client().requeue(queue)
    assert erl.eval(f"lmq_lib:queue_info('{queue}')") in ("not_found", "[]")


def test_a_virtual_queue_bound_over_one_pylmq_node_routes_pushes_on_the_other(mixed: Mixed, queue: str) -> None:
    name, members = "vr_" + queue, [queue + "_x", queue + "_y"]
    status, body = http("PUT", f"{mixed.py1.url}/virtual/{name}", json.dumps({"queues": members}).encode())
    assert status in (200, 204), (status, body)
    # The other node's manager (its routing, not only its store) learns of it from the mirror.
    assert wait_for(lambda: mixed.py2.node.manager.virtual_members(name), lambda v: v is not None, 5) == members
    status, body = http("POST", f"{mixed.py2.url}/messages/{name}", b"fanned")
    assert status == 200, (status, body)
    assert sorted(json.loads(body)["queues"]) == members, body
    for m in members:
        got = mixed.ref.erl[0].client().pull(m, 5)
        assert got is not None and got.body == b"fanned", m
        mixed.ref.erl[0].client().ack(m, got.id)
    assert http("DELETE", f"{mixed.py2.url}/virtual/{name}")[0] in (200, 204)
    assert wait_for(lambda: mixed.py1.node.manager.virtual_members(name), lambda v: v is None, 5) is None
