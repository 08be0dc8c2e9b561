"""Fixtures for the dist tests: real erl nodes (one per module and runtime) and a Python node per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from pylmq.erlang import Node
from tests.erlang.otp_nodes import COOKIE, ErlNode, Runtime, ensure_epmd, runtimes, unique_name

RUNTIMES = runtimes()


@pytest.fixture(scope="module", params=RUNTIMES, ids=[r.label for r in RUNTIMES])
def runtime(request: pytest.FixtureRequest) -> Runtime:
    rt: Runtime = request.param
    return rt


@pytest.fixture(scope="module")
def erl(runtime: Runtime) -> Iterator[ErlNode]:
    """A running ``erl -name eXXXX@127.0.0.1`` shared by the tests of one module."""
    ensure_epmd()
    node = ErlNode(runtime, unique_name("e")).start()
    yield node
    node.stop()


@pytest.fixture
async def py() -> AsyncIterator[Node]:
    node = await Node(unique_name("py") + "@127.0.0.1", COOKIE, listen_host="127.0.0.1").start()
    yield node
    await node.stop()
