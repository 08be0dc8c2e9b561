"""Helpers for the dist tests: Erlang code evaluated on a peer over rpc.

Test modules import these package-qualified (``from tests.erlang.dist_helpers import ...``).
"""

from __future__ import annotations

from pylmq.erlang import Node
from pylmq.erlang.terms import Term, erl_string


async def erl_eval(node: Node, peer: str, code: str, timeout: float = 20.0) -> Term:
    """Evaluate Erlang expressions (``"X = 1, X + 1."``) on ``peer`` in a rex worker; return the value."""
    scanned = await node.rpc(peer, "erl_scan", "string", [erl_string(code)], timeout)
    assert scanned[0].name == "ok", f"scan of {code!r} failed: {scanned!r}"
    parsed = await node.rpc(peer, "erl_parse", "parse_exprs", [scanned[1]], timeout)
    assert parsed[0].name == "ok", f"parse of {code!r} failed: {parsed!r}"
    value = await node.rpc(peer, "erl_eval", "exprs", [parsed[1], []], timeout)
    return value[1]
