"""Helpers for store tests (``from tests.store.store_helpers import ...``)."""

from __future__ import annotations

import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from pylmq.core.message import StoredMessage
from pylmq.erlang.terms import Term
from pylmq.store.durable import DurableStore
from pylmq.store.local import LocalStore

# What the open_store fixture (conftest.py) gives a test: ``await open_store(dir=None, **options)``.
OpenStore = Callable[..., Awaitable[DurableStore]]


async def crash_copy(store: DurableStore, dest: Path) -> Path:
    """What a restart after ``kill -9`` finds once every mutation so far was answered: the
    files as written after a barrier, without a close.

    The store holds an exclusive lock on its directory, so the crashed state is reopened from a
    copy of its files taken while it still runs (nothing is flushed or synced for the copy).
    """
    await store.barrier()
    dest.mkdir(parents=True)
    for p in store.data_dir.iterdir():
        if p.name != "LOCK":
            shutil.copy2(p, dest / p.name)
    return dest


def message_view(m: StoredMessage) -> tuple[Any, ...]:
    return (m.id, m.state, m.type, m.retry, m.content)


def state_of(store: LocalStore) -> dict[str, Any]:
    """Everything a store holds, comparable with ==."""
    return {
        "defaults": store.default_props(),
        "queues": {
            n: (store.queue_props(n), [message_view(m) for m in store.messages(n)]) for n in sorted(store.queue_names())
        },
    }


def body_of(m: StoredMessage) -> bytes:
    """The body of a message of one item (not a compound one)."""
    ((_, body),) = m.items()
    return body


class QuietLink:
    """The PeerLink notifications (new messages, queue changes) done as nothing: a base for the
    fake links of the Mnesia store tests, which script only peers and rpc answers (no peer is
    stalled; node lists, which no test scripts unless it overrides them, fail the test if asked).
    A queue's transactions go to its peers in :meth:`peers` order, each run as the link's rpc
    (the runners themselves are tested against real LMQ nodes, tests/cluster/test_reference_runners.py)."""

    def stalled(self) -> dict[str, float]:
        return {}

    def peers(self) -> list[str]:
        raise AssertionError("peers are not scripted by this test's link")

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        raise AssertionError("rpcs are not scripted by this test's link")

    def queue_peers(self, queue: str) -> list[str]:
        return self.peers()

    async def run(self, queue: str, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        return await self.rpc(peer, module, function, args, timeout)

    def runner_wait(self, queue: str) -> float:
        return 0.0

    def node_lists(self) -> tuple[list[str], list[str]]:
        raise AssertionError("node_lists is not scripted by this test's link")

    def pushed(self, name: str) -> None:
        return None

    async def queue_created(self, name: str, props: object) -> None:
        return None

    async def queue_deleted(self, name: str) -> None:
        return None

    async def defaults_changed(self) -> None:
        return None
