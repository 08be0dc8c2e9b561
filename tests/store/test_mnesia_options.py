"""Per-message options of the Mnesia store in the cluster, without Erlang nodes (a scripted
PeerLink): the rows a push writes, the refusals made before any call, virtual queues as
lmq_info rows. The same against real LMQ nodes: tests/cluster/test_reference_queue_options.py."""

from __future__ import annotations

import pytest

from pylmq.cluster.mnesia_store import MnesiaStore, erlang_props_problem, mixed_options_problem
from pylmq.core.clock import ManualClock
from pylmq.core.message import PushOptions
from pylmq.erlang.terms import Atom, Export, Term
from pylmq.errors import ClusterError, InvalidProps, NotSupported
from pylmq.store.memory import MemoryStore
from tests.store.store_helpers import QuietLink

A = Atom
NOW = 1_800_000_000.0
REFUSED = "not available while the node serves an Erlang LMQ cluster: its Erlang nodes would"
ITEM = (((b"content-type", b"text/plain"),), b"body")
WRITE3 = Export(A("mnesia"), A("write"), 3)


class ScriptedLink(QuietLink):
    """One Erlang peer; ``answers`` are given to the mnesia:transaction calls in turn, every
    lmq_lib call answers as LMQ does for a queue that does not exist yet."""

    def __init__(self, *answers: Term) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, list[Term]]] = []
        self.pushes: list[str] = []

    def peers(self) -> list[str]:
        return ["erl1@h"]

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        self.calls.append((module, function, args))
        if module == "mnesia":
            return self.answers.pop(0) if self.answers else (A("atomic"), A("ok"))
        return A("not_found") if function == "queue_info" else A("ok")

    def pushed(self, name: str) -> None:
        self.pushes.append(name)


def joined(link: ScriptedLink) -> MnesiaStore:
    store = MnesiaStore(MemoryStore(), ManualClock(NOW))
    store.become_cluster(link)
    return store


@pytest.mark.parametrize(
    ("options", "feature"),
    [
        (PushOptions(expires=NOW + 60), "a ttl (expiry time) is"),
        (PushOptions(not_before=NOW + 5, expires=NOW + 60, retry=3), "a ttl (expiry time) is"),
        (PushOptions(interval=5.0), "a retry interval (per-message timeout) is"),
        (PushOptions(interval=5.0, once=True), "a retry interval (per-message timeout) is"),
        (PushOptions(priority=1), "a message priority is"),
        (PushOptions(priority=2, once=True), "a message priority is"),
        (PushOptions(group="g"), "a message group (an SQS FIFO queue's MessageGroupId) is"),
        (PushOptions(group="g", once=True), "a message group (an SQS FIFO queue's MessageGroupId) is"),
    ],
)
async def test_options_the_erlang_nodes_cannot_honour_are_refused_before_any_call(
    options: PushOptions, feature: str
) -> None:
    assert (problem := mixed_options_problem(options, 2)) is not None and problem.startswith(feature), problem
    link = ScriptedLink()
    store = joined(link)
    with pytest.raises(NotSupported) as e:
        await store.push("q", ITEM, 2, options)
    assert e.value.detail == f"{feature} {REFUSED} redeliver or discard these messages"
    assert link.calls == [] and link.pushes == []


async def test_unlimited_retries_are_refused_for_the_message_or_inherited_from_the_queue() -> None:
    assert mixed_options_problem(PushOptions(retry=None), 2) is not None
    assert mixed_options_problem(PushOptions(), None) is not None
    assert mixed_options_problem(PushOptions(once=True), None) is None  # once: LMQ's retry 0
    link = ScriptedLink()
    with pytest.raises(NotSupported, match='retry "infinity" is not available'):
        await joined(link).push("q", ITEM, 2, PushOptions(retry=None))
    assert link.calls == []


@pytest.mark.parametrize(
    ("options", "queue_retry", "ts", "stored_retry"),
    [
        (PushOptions(not_before=NOW + 30.5), 2, NOW + 30.5, 3),
        (PushOptions(not_before=NOW - 100), 2, NOW, 3),  # past: due now, as LMQ stamps it
        (PushOptions(retry=0), 5, NOW, 1),
        (PushOptions(retry=7, not_before=NOW + 1), 2, NOW + 1, 8),
        (PushOptions(once=True, expires=NOW + 60), 5, NOW, 1),
    ],
)
async def test_a_push_writes_lmqs_row_keyed_by_its_due_time_with_its_retry(
    options: PushOptions, queue_retry: int, ts: float, stored_retry: int
) -> None:
    link = ScriptedLink()
    store = joined(link)
    uuid = await store.push("q", ITEM, queue_retry, options)
    [(module, function, args)] = link.calls
    assert (module, function, args[0]) == ("mnesia", "transaction", WRITE3)
    table, row, lock = args[1]
    assert (table, lock) == (A("q"), A("write"))
    assert row == (
        A("message"),
        (ts, uuid),
        A("available"),
        A("normal"),
        stored_retry,
        ([(b"content-type", b"text/plain")], b"body"),
    )
    assert isinstance(row[1][0], float)  # LMQ's keys are floats: an integer would sort apart
    assert link.pushes == ["q"], "the Erlang queue processes must hear of the new row"


async def test_a_push_to_a_missing_table_creates_the_queue_then_writes_once_more() -> None:
    no_table = (A("aborted"), (A("no_exists"), A("q")))
    link = ScriptedLink(no_table)
    uuid = await joined(link).push("q", ITEM, 2, PushOptions(not_before=NOW + 1))
    assert [(m, f) for m, f, _ in link.calls] == [
        ("mnesia", "transaction"),
        ("lmq_lib", "queue_info"),
        ("lmq_lib", "create"),
        ("mnesia", "transaction"),
    ]
    assert link.calls[0][2] == link.calls[3][2] and link.calls[3][2][1][1][1] == (NOW + 1, uuid)
    assert link.pushes == ["q"]


async def test_a_write_mnesia_aborts_is_a_cluster_error_and_wakes_nobody() -> None:
    link = ScriptedLink((A("aborted"), A("nested_transaction")))
    with pytest.raises(ClusterError, match="mnesia:write of a message to q answered"):
        await joined(link).push("q", ITEM, 2, PushOptions())
    assert link.pushes == []


async def test_the_dead_letter_prop_and_requeue_are_refused_in_the_cluster() -> None:
    problem = erlang_props_problem({"retry": 1, "dead_letter": "dlq"})
    assert problem == f"dead_letter is {REFUSED} redeliver or discard these messages"
    assert erlang_props_problem({"retry": 1, "dead_letter": None}) is None
    link = ScriptedLink()
    store = joined(link)
    with pytest.raises(InvalidProps, match="dead_letter is not available"):
        await store.create("q", {"dead_letter": "dlq"})
    with pytest.raises(NotSupported, match="requeue of dead letters is not available"):
        await store.requeue("dlq", 10, None)
    assert link.calls == []


async def test_the_sqs_prop_is_refused_in_the_cluster_before_any_call() -> None:
    problem = erlang_props_problem({"retry": 1, "sqs": {"DelaySeconds": "5"}})
    assert problem is not None and "'sqs' prop" in problem and "Erlang LMQ nodes" in problem
    assert erlang_props_problem({"retry": 1, "sqs": None}) is None
    link = ScriptedLink()
    store = joined(link)
    with pytest.raises(InvalidProps, match="'sqs' prop"):
        await store.create("q", {"retry": 1, "sqs": {"FifoQueue": "true"}})
    assert link.calls == []


async def test_virtual_queues_are_one_lmq_info_row_per_name() -> None:
    link = ScriptedLink()
    store = joined(link)
    await store.set_virtual("v", ["a", "b"])
    assert store.virtual_queues() == {"v": ["a", "b"]}
    await store.set_virtual("v", [])
    assert store.virtual_queues() == {}
    key = (A("pylmq_virtual_queues"), b"v")
    info = A("__lmq_info__")
    assert [args for _, _, args in link.calls] == [
        [WRITE3, [info, (A("lmq_info"), key, [b"a", b"b"]), A("write")]],
        [Export(A("mnesia"), A("delete"), 3), [info, key, A("write")]],
    ]


async def test_check_push_refuses_in_the_cluster_only() -> None:
    store = MnesiaStore(MemoryStore(), ManualClock(NOW))
    store.check_push(PushOptions(priority=3), 2)  # serving alone: every option is served
    store.become_cluster(ScriptedLink())
    with pytest.raises(NotSupported, match="a message priority is not available"):
        store.check_push(PushOptions(priority=3), 2)
    store.check_push(PushOptions(not_before=NOW + 9, retry=4), 2)


async def test_virtual_queues_follow_the_mode_switches() -> None:
    store = MnesiaStore(MemoryStore(), ManualClock(NOW))
    await store.open()
    await store.set_virtual("mine", ["a"])  # alone: the local store's
    assert store.virtual_queues() == {"mine": ["a"]}
    await store.clear_local()  # after the join put them into the cluster
    store.become_cluster(ScriptedLink())
    assert store.virtual_queues() == {}
    store.mirror.virtual = {"v": ["b", "c"]}
    assert store.virtual_queues() == {"v": ["b", "c"]}
    await store.become_standalone()  # the cluster's, as last seen, served alone
    assert store.local.virtual_queues() == store.virtual_queues() == {"v": ["b", "c"]}
    await store.become_local()  # left: starts over empty
    assert store.virtual_queues() == {}
