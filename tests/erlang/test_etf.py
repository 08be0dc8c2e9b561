"""The external term format codec: byte-exact against erlang:term_to_binary, and strict on bad input."""

from __future__ import annotations

import math
import zlib

import pytest

from pylmq.erlang.etf import DecodeError, EncodeError, decode, decode_from, encode
from pylmq.erlang.terms import (
    Atom,
    BitBinary,
    Export,
    Fun,
    ImproperList,
    Key,
    Pid,
    Port,
    Reference,
    erl_string,
    to_text,
)
from tests.erlang.otp_nodes import Runtime, eval_erl, runtimes

A = Atom

# (Erlang expression, the Python value it must decode to and encode from)
TABLE: list[tuple[str, object]] = [
    ("ok", A("ok")),
    ("''", A("")),
    ("list_to_atom([104,233,26085])", A("hé日")),
    ("list_to_atom(lists:duplicate(255, $a))", A("a" * 255)),
    ("0", 0),
    ("255", 255),
    ("256", 256),
    ("-1", -1),
    ("2147483647", 2147483647),
    ("-2147483648", -2147483648),
    ("2147483648", 2147483648),
    ("-2147483649", -2147483649),
    ("18446744073709551616", 2**64),
    ("-(1 bsl 2039)", -(2**2039)),
    ("1 bsl 2048", 2**2048),
    ("1.5", 1.5),
    ("-0.0", -0.0),
    ("1.0e300", 1.0e300),
    ("<<>>", b""),
    ("<<1,2,3>>", b"\x01\x02\x03"),
    ("<<1:3>>", BitBinary(b"\x20", 3)),
    ("<<255, 5:5>>", BitBinary(b"\xff\x28", 5)),
    ("{}", ()),
    ('{a, 1, <<"x">>}', (A("a"), 1, b"x")),
    ("list_to_tuple(lists:seq(1, 300))", tuple(range(1, 301))),
    ("[]", []),
    ('"hi"', [104, 105]),
    ("[256, 1]", [256, 1]),
    ("[a, [b], {c}]", [A("a"), [A("b")], (A("c"),)]),
    ("lists:seq(1, 70000) -- [] ", list(range(1, 70001))),
    ("lists:duplicate(70000, 7)", [7] * 70000),
    ("[a | b]", ImproperList([A("a")], A("b"))),
    ('[1, 2 | <<"t">>]', ImproperList([1, 2], b"t")),
    ("#{}", {}),
    ("#{a => 1, b => [2]}", {A("a"): 1, A("b"): [2]}),
    ("#{[1, 2] => list}", {Key([1, 2]): A("list")}),
    ("#{#{k => v} => map}", {Key({A("k"): A("v")}): A("map")}),
    ("#{1 => int, 1.0 => float}", {1: A("int"), Key(1.0): A("float")}),
    ("#{{x, [y]} => tuple_with_list}", {Key((A("x"), [A("y")])): A("tuple_with_list")}),
    ("fun lists:seq/2", Export(A("lists"), A("seq"), 2)),
    ('list_to_pid("<0.9.0>")', Pid(A("nonode@nohost"), 9, 0, 0)),
]


@pytest.fixture(scope="module", params=runtimes(), ids=lambda r: r.label)
def erl_encoded(request: pytest.FixtureRequest) -> dict[str, bytes]:
    runtime: Runtime = request.param
    exprs = ",\n".join(e for e, _ in TABLE)
    out = eval_erl(
        runtime,
        f'[io:format("~s~n", [binary:encode_hex(term_to_binary(T, [{{minor_version, 2}}]))]) || T <- [{exprs}]]',
    )
    lines = out.split()
    assert len(lines) == len(TABLE), out[:500]
    return {e: bytes.fromhex(h) for (e, _), h in zip(TABLE, lines, strict=True)}


@pytest.mark.erl
@pytest.mark.parametrize(("expr", "value"), TABLE, ids=[e[:40] for e, _ in TABLE])
def test_encode_is_byte_identical_to_term_to_binary(erl_encoded: dict[str, bytes], expr: str, value: object) -> None:
    if isinstance(value, dict) and len(value) > 1:
        # map key order in the encoding is an implementation detail that changed in OTP 26
        assert decode(encode(value)) == decode(erl_encoded[expr])
        return
    assert encode(value) == erl_encoded[expr], f"{expr}: expected {erl_encoded[expr][:60].hex()}"


@pytest.mark.erl
@pytest.mark.parametrize(("expr", "value"), TABLE, ids=[e[:40] for e, _ in TABLE])
def test_decode_of_term_to_binary_gives_the_python_value(
    erl_encoded: dict[str, bytes], expr: str, value: object
) -> None:
    got = decode(erl_encoded[expr])
    assert got == value, f"{expr}: expected {value!r:.200}, got {got!r:.200}"
    assert type(got) is type(value)


@pytest.mark.erl
def test_erlang_only_forms_decode_and_reencode_exactly() -> None:
    # refs, ports, funs, compressed terms and Latin-1 atoms: decoded, then re-encoded byte for byte
    # (Latin-1 atoms re-encode as UTF-8, so compare terms for those)
    runtime = runtimes()[0]
    out = eval_erl(
        runtime,
        "F = fun(X) -> X + 1 end, "
        '[io:format("~s~n", [binary:encode_hex(term_to_binary(T, [{minor_version, 2}]))]) || '
        "T <- [make_ref(), hd(erlang:ports()), F, {F, [F]}]], "
        'io:format("~s~n", [binary:encode_hex(term_to_binary(lists:duplicate(100, ok), [compressed]))]), '
        "io:format(\"~s~n\", [binary:encode_hex(term_to_binary(['héllo', ok], [{minor_version, 1}]))])",
    )
    ref_hex, port_hex, fun_hex, funs_hex, compressed_hex, latin1_hex = out.split()
    ref = decode(bytes.fromhex(ref_hex))
    assert isinstance(ref, Reference) and len(ref.words) == 3
    assert encode(ref) == bytes.fromhex(ref_hex)
    port = decode(bytes.fromhex(port_hex))
    assert isinstance(port, Port)
    assert encode(port) == bytes.fromhex(port_hex)
    fun = decode(bytes.fromhex(fun_hex))
    assert isinstance(fun, Fun)
    assert encode(fun) == bytes.fromhex(fun_hex)
    assert encode(decode(bytes.fromhex(funs_hex))) == bytes.fromhex(funs_hex)
    assert decode(bytes.fromhex(compressed_hex)) == [A("ok")] * 100
    assert decode(bytes.fromhex(latin1_hex)) == [A("héllo"), A("ok")]


def test_atom_is_not_equal_to_str_and_both_keys_survive() -> None:
    m = {A("foo"): 1, b"foo": 2, (A("foo"),): 3, (b"foo",): 4}
    a_string: object = "foo"  # typed object: mypy knows an Atom never equals a str
    assert A("foo") != a_string
    assert decode(encode(m)) == m
    assert A("foo") is A("foo")


def test_alias_call_tag_round_trips_as_an_improper_list() -> None:
    ref = Reference(A("b@127.0.0.1"), 1795299607, (1, 2, 3))
    tag = ImproperList([A("alias")], ref)
    got = decode(encode((tag, A("yes"))))
    assert got == (tag, A("yes"))
    assert hash(got[0]) == hash(tag)


def test_list_ext_tail_that_is_a_list_is_merged_like_erlang() -> None:
    # [1 | [2]] hand-encoded as two LIST_EXTs is the proper list [1, 2]
    raw = bytes([131, 108, 0, 0, 0, 1, 97, 1, 108, 0, 0, 0, 1, 97, 2, 106])
    assert decode(raw) == [1, 2]


def test_strings_are_lists_of_code_points() -> None:
    assert decode(encode(erl_string("héllo"))) == [104, 233, 108, 108, 111]
    assert to_text(decode(encode(erl_string("日本")))) == "日本"
    assert decode(encode("日本")) == "日本".encode()


def test_convenience_values_encode_as_atoms_and_binaries() -> None:
    assert decode(encode([True, False, None])) == [A("true"), A("false"), A("undefined")]
    assert decode(encode(bytearray(b"ab"))) == b"ab"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_rejected(value: float) -> None:
    with pytest.raises(EncodeError, match="no float"):
        encode(value)


def test_unknown_python_type_is_rejected_with_its_name() -> None:
    with pytest.raises(EncodeError, match="object"):
        encode([1, object()])


def _unended_zlib(data: bytes) -> bytes:
    z = zlib.compressobj()
    return z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"", "truncated"),
        (bytes([130, 97, 1]), "start with 131"),
        (bytes([131, 109, 0, 0, 0, 5, 1]), "truncated"),
        (bytes([131, 104, 2, 97, 1]), "truncated"),
        # an atom in a tuple cut short where what is left is a known atom ('ok'): still cut short
        (bytes([131, 104, 1, 119, 3]) + b"ok", "truncated"),
        (bytes([131, 104, 1, 119, 2, 0xFF, 0xFE]), "not UTF-8"),
        (bytes([131, 200]), "unsupported term tag 200"),
        (bytes([131, 97, 1, 0]), "trailing"),
        (bytes([131, 116, 0, 0, 0, 2, 97, 1, 97, 1, 97, 1, 97, 2]), "duplicate keys"),
        (bytes([131, 119, 2, 0xFF, 0xFE]), "not UTF-8"),
        (bytes([131, 80, 0, 0, 0, 9]) + zlib.compress(b"\x61\x01"), "expected 9 bytes"),
        # a zlib stream that never ends: what follows it could pass for the same term's bytes
        (bytes([131, 80, 0, 0, 0, 2]) + _unended_zlib(b"\x61\x01"), "does not end"),
        (bytes([131, 108, 0, 0, 0, 0, 97, 1]), "malformed"),  # no elements, yet a tail
    ],
)
def test_bad_input_raises_decode_error(raw: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode(raw)


def test_decode_from_reads_back_to_back_terms() -> None:
    raw = encode(A("a")) + encode((1, 2))
    first, pos = decode_from(raw)
    second, end = decode_from(raw, pos)
    assert (first, second, end) == (A("a"), (1, 2), len(raw))


def test_key_distinguishes_what_erlang_distinguishes() -> None:
    assert Key(1.0) != Key(1) and Key(0.0) != Key(-0.0)
    assert Key([1, [2]]) == Key([1, [2]])
    assert Key((1,)) != Key([1])


def test_pids_and_references_are_equal_exactly_when_every_field_is() -> None:
    # They are dict keys (processes, calls in flight): equal values must hash alike whether
    # decoded or built, and any one differing field must make them different keys.
    node, other = A("a@h"), A("b@h")
    pid = Pid(node, 1, 2, 3)
    decoded = decode(encode(pid))
    assert decoded == pid and hash(decoded) == hash(pid) and {pid: 1}[decoded] == 1
    for changed in (Pid(other, 1, 2, 3), Pid(node, 9, 2, 3), Pid(node, 1, 9, 3), Pid(node, 1, 2, 9)):
        assert changed != pid and changed not in {pid}
    ref = Reference(node, 3, [1, 2, 3])
    assert decode(encode(ref)) == ref and {ref: 1}[Reference(node, 3, (1, 2, 3))] == 1
    for changed_ref in (Reference(other, 3, (1, 2, 3)), Reference(node, 4, (1, 2, 3)), Reference(node, 3, (1, 2))):
        assert changed_ref != ref and changed_ref not in {ref}
    assert pid != Port(node, 1, 3) and ref != (node, 3, (1, 2, 3))


def test_pids_decode_and_encode_the_same_through_the_codecs_caches() -> None:
    # The decoder keeps pids by their encoding and the encoder encodings by pid: a second pass
    # (a cache hit) must give what the first one did, and a pid differing in any field its own.
    node = A("a@h")
    pids = [Pid(node, 1, 2, 3), Pid(node, 9, 2, 3), Pid(node, 1, 9, 3), Pid(node, 1, 2, 9), Pid(A("b@h"), 1, 2, 3)]
    raw = encode(pids)
    for _ in range(2):
        assert encode(pids) == raw
        decoded = decode(raw)
        assert decoded == pids and all(d.node is p.node for d, p in zip(decoded, pids, strict=True))
    one = encode(pids[0])
    with pytest.raises(DecodeError, match="truncated"):
        decode(one[:-1])  # its full encoding is known: the cut one still fails
    assert decode_from(bytearray(one))[0] == pids[0], "a bytearray decodes as the bytes it holds"
