"""The store the API suites run on: ``pytest --store {memory,postgres}`` (or ``$PYLMQ_TEST_STORE``).

Tests build their nodes with the ``suite_options`` fixture (tests/conftest.py), a
:class:`SuiteOptions`: the same test then runs on the in-process stores by default and on a
PostgreSQL of the session (tests/pg_helpers.py) under ``--store postgres``, each test on a fresh
database that every node it starts shares (as nodes restarted on one data directory would).

Tests about the in-process stores themselves are marked ``local_store("why")`` and skipped, with
that reason, under ``--store postgres``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pylmq.node import LMQNode, NodeOptions

__all__ = ["DEFAULT_STORE", "ENV", "STORES", "SuiteOptions", "build_options", "node_eager"]

STORES = ("memory", "postgres")
DEFAULT_STORE = "memory"
ENV = "PYLMQ_TEST_STORE"


class SuiteOptions(Protocol):
    def __call__(self, *, durable: bool = False, **kw: Any) -> NodeOptions:
        """Options of a node on the suite's store; ``kw`` as :class:`NodeOptions` but ``store``.

        ``durable``: the test restarts nodes and expects what was answered to survive: the
        durable store on ``data_dir`` (default: the test's) instead of the memory store.
        Under postgres every node is on the test's database, whatever ``durable``."""
        ...


def build_options(
    suite_store: str, data_dir: Path, dsn: str | None, *, durable: bool = False, **kw: Any
) -> NodeOptions:
    if "store" in kw or "dsn" in kw:
        raise TypeError("suite_options chooses the store: pass durable=True for a store that survives a restart")
    kw.setdefault("data_dir", data_dir)
    if suite_store == "postgres":
        assert dsn is not None
        return NodeOptions(store="postgres", dsn=dsn, **kw)
    return NodeOptions(store="durable" if durable else "memory", **kw)


def node_eager(node: LMQNode) -> Callable[[], bool]:
    """The ``eager`` a test's own HttpServer/RpcServer over ``node``'s manager needs: the node's
    own, which lets requests start outside a task only on an in-process store (a postgres
    store's calls wait with asyncio.timeout, which needs one)."""
    return node._in_process
