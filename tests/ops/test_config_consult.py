"""The Erlang term file reader: what file:consult/1 reads, with line/column errors."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from pylmq.config import Atom, ImproperList, Term, parse_terms
from pylmq.errors import ConfigSyntaxError

TRICKY = r"""
%% every literal form a config file may hold
{atoms, [plain, with_under@at, 'Quoted Atom', 'Q/N', 'it\'s', true, false]}.
{strings, ["", "plain", "tab\there", "q\"uote", "\x41\x{263A}\101\^a\s", "con" "cat"]}.
{binaries, [<<>>, <<"bin">>, <<1,2,255>>, <<"é"/utf8>>, <<"a", 0, "b">>]}.
{numbers, [0, 42, -7, +7, 16#ff, 2#1010, 36#zz, 1_000_000, $a, $\n, $\s, 1.5, -1.5e3, 2.0E-2, 1.0e10]}.
{lists, [[], [a], [a, b | c], [a | [b, c]], [[nested, [deep]]]]}.
{tuples, {}, {{a}, {b, {c}}}}.
#{key => value, "s" => 1, {t} => [x]}.
"other.config".
"""


def test_parses_lmq_app_config_layout(lmq_files: tuple[Path, Path]) -> None:
    _, app_config = lmq_files
    (term,) = parse_terms(app_config.read_text(), str(app_config))
    assert isinstance(term, list)
    apps = {t[0]: t[1] for t in term if isinstance(t, tuple)}
    assert set(apps) == {Atom("lmq"), Atom("lager"), Atom("statsderl"), Atom("sasl")}
    assert apps[Atom("lmq")][:2] == [(Atom("port"), 18800), (Atom("stats_interval"), 20000)]  # type: ignore[index]
    handlers = dict(apps[Atom("lager")])[Atom("handlers")]  # type: ignore[arg-type]
    first_file = handlers[0][1][0]  # type: ignore[index]
    assert first_file == [
        (Atom("file"), "./log/error.log"),
        (Atom("level"), Atom("error")),
        (Atom("size"), 0),
        (Atom("date"), "$D0"),
        (Atom("count"), 14),
    ]
    assert dict(apps[Atom("lager")])[Atom("error_logger_redirect")] is True  # type: ignore[arg-type]


def test_atoms_strings_and_booleans_stay_distinct() -> None:
    (t,) = parse_terms("{error, \"error\", true, 'true'}.")
    assert t == (Atom("error"), "error", True, Atom("true"))
    a_string: object = "error"  # typed object: mypy knows an Atom never equals a str
    assert Atom("error") != a_string


def test_literal_forms() -> None:
    terms = parse_terms(TRICKY, "tricky.config")
    assert terms[0] == (
        Atom("atoms"),
        [Atom("plain"), Atom("with_under@at"), Atom("Quoted Atom"), Atom("Q/N"), Atom("it's"), True, False],
    )
    assert terms[1] == (Atom("strings"), ["", "plain", "tab\there", 'q"uote', "A\u263aA\x01 ", "concat"])
    assert terms[2] == (Atom("binaries"), [b"", b"bin", b"\x01\x02\xff", "é".encode(), b"a\x00b"])
    assert terms[3] == (
        Atom("numbers"),
        [0, 42, -7, 7, 255, 10, 36 * 36 - 1, 1_000_000, 97, 10, 32, 1.5, -1500.0, 0.02, 1e10],
    )
    assert terms[4] == (
        Atom("lists"),
        [[], [Atom("a")], ImproperList((Atom("a"), Atom("b")), Atom("c")), [Atom("a"), Atom("b"), Atom("c")],
         [[Atom("nested"), [Atom("deep")]]]],
    )  # fmt: skip
    assert terms[5] == (Atom("tuples"), (), ((Atom("a"),), (Atom("b"), (Atom("c"),))))
    assert terms[6] == {Atom("key"): Atom("value"), "s": 1, (Atom("t"),): [Atom("x")]}
    assert terms[7] == "other.config"


@pytest.mark.parametrize(
    ("text", "line", "column", "message"),
    [
        ("[{lmq, [{port, 18800}]}]", 1, 25, "expected '.' after a term, found end of file"),
        ("[\n  {lmq, [{port 18800}]}\n].\n", 2, 16, "expected ',' or '}' in a tuple, found '18800'"),
        ("{a, 1+2}.", 1, 6, "expected ',' or '}' in a tuple, found '+'"),
        ("{a,\n   Port}.", 2, 4, "variables are not allowed in a term file: Port"),
        ('{file, "log/console.log}.\n', 1, 8, "unterminated string starting here"),
        ("{a, 'atom}.", 1, 5, "unterminated quoted atom starting here"),
        ("[a, b.\n", 1, 6, "expected ',', '|' or ']' in a list, found '.'"),
        ("{a}.{b}.", 1, 4, "'.' ends a term and must be followed by whitespace"),
        ("{a, ,}.", 1, 5, "expected a term, found ','"),
        ("{a, 37#1}.", 1, 5, "radix 37 is outside 2..36"),
        ("{a, <<256>>}.", 1, 7, "value 256 does not fit a byte; write it with /utf8"),
        ("{a, ; }.", 1, 5, "unexpected character ';'"),
        ("%% only a comment\n\n  }.", 3, 3, "expected a term, found '}'"),
    ],
)
def test_syntax_error_names_line_and_column(text: str, line: int, column: int, message: str) -> None:
    with pytest.raises(ConfigSyntaxError) as info:
        parse_terms(text, "etc/app.config")
    err = info.value
    assert (err.filename, err.line, err.column, err.message) == ("etc/app.config", line, column, message)
    assert str(err) == f"etc/app.config:{line}:{column}: {message}"


def test_empty_file_has_no_terms() -> None:
    assert parse_terms("%% nothing here\n") == []


def _to_erlang(term: Term) -> str:
    """Canonical Erlang source for a parsed term (strings as code-point lists)."""
    if isinstance(term, bool):
        return "true" if term else "false"
    if isinstance(term, Atom):
        return "'" + term.name.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(term, int):
        return str(term)
    if isinstance(term, float):
        text = repr(term)
        return text.replace("e", ".0e") if "e" in text and "." not in text else text
    if isinstance(term, str):
        return "[" + ",".join(str(ord(c)) for c in term) + "]"
    if isinstance(term, bytes):
        return "<<" + ",".join(str(b) for b in term) + ">>"
    if isinstance(term, list):
        return "[" + ",".join(_to_erlang(t) for t in term) + "]"
    if isinstance(term, tuple):
        return "{" + ",".join(_to_erlang(t) for t in term) + "}"
    if isinstance(term, ImproperList):
        return "[" + ",".join(_to_erlang(t) for t in term.elements) + "|" + _to_erlang(term.tail) + "]"
    return "#{" + ",".join(f"{_to_erlang(k)} => {_to_erlang(v)}" for k, v in term.items()) + "}"


@pytest.mark.erl
def test_reads_what_file_consult_reads(tmp_path: Path, lmq_files: tuple[Path, Path]) -> None:
    erl = shutil.which("erl")
    assert erl is not None, "erl must be on PATH for interop tests"
    ours = tmp_path / "ours.config"
    source = tmp_path / "tricky.config"
    source.write_text(TRICKY + lmq_files[1].read_text(), encoding="utf-8")
    ours.write_text("".join(_to_erlang(t) + ".\n" for t in parse_terms(source.read_text(), "tricky")))
    check = (
        f'{{ok, A}} = file:consult("{source}"), {{ok, B}} = file:consult("{ours}"), '
        'io:format("~p~n", [A =:= B]), halt().'
    )
    out = subprocess.run([erl, "-noshell", "-eval", check], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "true", f"file:consult disagrees: {out.stdout} {out.stderr}"
