"""Fixtures for the dist tests: real erl nodes (one per module and runtime) and a Python node per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from otp_nodes import COOKIE, ErlNode, Runtime, ensure_epmd, runtimes, unique_name

from pylmq.dist import Node
from pylmq.dist.terms import Term, erl_string

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


async def erl_eval(node: Node, peer: str, code: str, timeout: float = 20.0) -> Term:
    """Evaluate Erlang expressions (``"X = 1, X + 1."``) on ``peer`` in a rex worker; return the value."""
    scanned = await node.rpc(peer, "erl_scan", "string", [erl_string(code)], timeout)
    assert scanned[0].name == "ok", f"scan of {code!r} failed: {scanned!r}"
    parsed = await node.rpc(peer, "erl_parse", "parse_exprs", [scanned[1]], timeout)
    assert parsed[0].name == "ok", f"parse of {code!r} failed: {parsed!r}"
    value = await node.rpc(peer, "erl_eval", "exprs", [parsed[1], []], timeout)
    return value[1]
