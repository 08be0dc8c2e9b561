"""Pushes answered in one pass of the event loop are announced to the cluster once per queue
(``new_message`` to every node's lmq_event costs each Erlang node a gen_event call); changes the
mirror hears of reach the manager."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from pylmq.cluster import Cluster
from pylmq.erlang.terms import Atom, Term


class _Dist:
    def spawn(self, *_: Any) -> object:
        return SimpleNamespace(alive=True)

    def register_function(self, *_: Any) -> None:
        return None

    def monitor_node(self, *_: Any) -> Any:
        return lambda: None

    def monitor_stalls(self, *_: Any) -> Any:
        return lambda: None


def _cluster() -> tuple[Cluster, list[Term]]:
    store = SimpleNamespace(mirror=SimpleNamespace(listener=None))
    cluster = Cluster(_Dist(), store, SimpleNamespace())  # type: ignore[arg-type]
    sent: list[Term] = []
    cluster._broadcast = sent.append  # type: ignore[method-assign,assignment]
    return cluster, sent


async def test_pushes_of_one_pass_make_one_new_message_per_queue() -> None:
    cluster, sent = _cluster()
    for name in ("a", "b", "a", "a"):
        cluster.pushed(name)
    assert sent == [], "announced when the pass ends, not per push"
    await asyncio.sleep(0)
    assert sorted(sent, key=repr) == [(Atom("new_message"), Atom("a")), (Atom("new_message"), Atom("b"))]
    cluster.pushed("a")
    await asyncio.sleep(0)
    assert sent[-1] == (Atom("new_message"), Atom("a")) and len(sent) == 3


def test_a_virtual_queue_change_has_the_serving_nodes_manager_read_them_again() -> None:
    refreshed: list[int] = []
    store = SimpleNamespace(mirror=SimpleNamespace(listener=None), mode="cluster")
    manager = SimpleNamespace(refresh_virtual=lambda: refreshed.append(1))
    cluster = Cluster(_Dist(), store, manager)  # type: ignore[arg-type]
    cluster.on_virtual()
    assert refreshed == [1]
    store.mode = "local"  # not serving the cluster: its virtual queues are not the manager's
    cluster.on_virtual()
    assert refreshed == [1]
