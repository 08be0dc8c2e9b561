"""The mnesia store and the many-id extensions: reply_many works on it (one lmq_lib call per
id on the Erlang peers), claim is refused while it serves a cluster's tables and works alone."""

from __future__ import annotations

import pytest

from pylmq.cluster.mnesia_store import MnesiaStore
from pylmq.core import QueueManager, make_item
from pylmq.core.message import uuid_text
from pylmq.erlang.terms import Atom, Term
from pylmq.errors import NotSupported
from pylmq.store.memory import MemoryStore
from tests.store.store_helpers import QuietLink


class OkLink(QuietLink):
    """Erlang peers that answer every lmq_lib call ``ok``."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def peers(self) -> list[str]:
        return ["lmq@h"]

    async def rpc(self, peer: str, module: str, function: str, args: list[Term], timeout: float) -> Term:
        self.calls.append(function)
        return Atom("ok")


async def test_reply_many_on_a_cluster_makes_one_call_per_id() -> None:
    store = MnesiaStore(MemoryStore(), rpc_timeout=1.0)
    manager = QueueManager(store)
    await manager.start()
    try:
        await manager.ensure("q")
        link = OkLink()
        store.become_cluster(link)
        ids = ["0f8fad5b-d9cb-469f-a165-70867728950e", "7c9e6679-7425-40de-944b-e07fc1f90ae7"]
        out = await manager.reply_many("q", "ack", ids)
        assert out.ok == ids and link.calls == ["done", "done"]
        with pytest.raises(NotSupported):
            await manager.claim("q", ids)
        assert link.calls == ["done", "done"], "a claim sends nothing to the peers"
    finally:
        await manager.close()


async def test_claim_works_while_the_store_serves_alone() -> None:
    manager = QueueManager(MnesiaStore(MemoryStore(), rpc_timeout=1.0))
    await manager.start()
    try:
        await manager.push("q", make_item(b"x"))
        d = await manager.pull("q", 0)
        assert d is not None
        out = await manager.claim("q", [uuid_text(d.message.uuid)])
        assert [x.message.content[1] for x in out.delivered] == [b"x"]
    finally:
        await manager.close()
