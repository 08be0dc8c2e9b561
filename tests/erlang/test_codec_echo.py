"""Property: any term we can build survives a trip through a real Erlang node unchanged."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pylmq.erlang import Atom, BitBinary, ImproperList, Key, Node, decode, encode
from pylmq.erlang.terms import Term, freeze, needs_key
from tests.erlang.otp_nodes import COOKIE, ErlNode, unique_name

pytestmark = pytest.mark.erl

atoms = st.text(st.characters(exclude_categories=["Cs"]), max_size=255).map(Atom)
bit_binaries = st.builds(
    lambda data, bits: BitBinary(data[:-1] + bytes([data[-1] & (0xFF << (8 - bits)) & 0xFF]), bits),
    st.binary(min_size=1, max_size=20),
    st.integers(1, 7),
)
scalars = st.one_of(
    atoms,
    st.integers(),
    st.integers(min_value=-(2**2100), max_value=2**2100),
    st.floats(allow_nan=False, allow_infinity=False),
    st.binary(max_size=40),
    bit_binaries,
)


def _key(term: Term) -> Term:
    return Key(term) if needs_key(term) else term


def _extend(children: st.SearchStrategy[Term]) -> st.SearchStrategy[Term]:
    return st.one_of(
        st.lists(children, max_size=6),
        st.lists(st.integers(0, 255), max_size=10),  # Erlang strings
        st.lists(children, max_size=6).map(tuple),
        st.builds(ImproperList, st.lists(children, min_size=1, max_size=4), scalars.filter(lambda t: t != b"")),
        st.dictionaries(children.map(_key), children, max_size=5),
    )


terms = st.recursive(scalars, _extend, max_leaves=25)


def test_generated_terms_echo_exactly_through_erlang(erl: ErlNode) -> None:
    loop = asyncio.new_event_loop()
    node = loop.run_until_complete(
        Node(unique_name("py") + "@127.0.0.1", COOKIE, listen_host="127.0.0.1").start(register=False)
    )

    async def echo(term: Term) -> tuple[Term, bytes]:
        # term_to_binary on the Erlang side, binary_to_term of that on the Erlang side, back to us
        as_binary = await node.rpc(erl.name, "erlang", "term_to_binary", [term])
        back = await node.rpc(erl.name, "erlang", "binary_to_term", [as_binary])
        return back, as_binary

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(terms)
    def check(term: Term) -> None:
        back, as_binary = loop.run_until_complete(echo(term))
        assert freeze(back) == freeze(term), f"sent {term!r:.300}, got {back!r:.300}"
        assert freeze(decode(as_binary)) == freeze(term)
        assert freeze(decode(encode(term))) == freeze(term)

    try:
        check()
    finally:
        loop.run_until_complete(node.stop())
        loop.close()
