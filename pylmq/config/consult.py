"""A reader for Erlang term files (``app.config``, ``sys.config``): what ``file:consult/1`` reads.

Only literal terms are accepted, as Erlang does: atoms, quoted atoms, strings, binaries,
integers (with ``16#ff`` radix, ``$c`` characters and ``1_000`` separators), floats, lists
(including ``[H|T]``), tuples and maps, each form ended by a ``.``. Comments start with ``%``.

Python shapes: atoms are :class:`Atom` (never equal to a ``str``), except ``true``/``false``
which become ``bool``; strings are ``str`` (Erlang reads them as lists of characters, but a
config file means text); binaries are ``bytes``; lists ``list``; tuples ``tuple``; maps
``dict``; an improper list is an :class:`ImproperList`. :class:`Atom` and :class:`ImproperList`
are those of :mod:`pylmq.erlang.terms`, so config and distribution share one atom type.

Syntax errors raise :class:`~pylmq.errors.ConfigSyntaxError` naming file, line and column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from pylmq.erlang.terms import Atom, ImproperList
from pylmq.errors import ConfigError, ConfigSyntaxError

__all__ = ["Atom", "ImproperList", "Term", "parse_terms", "proplist"]


Term: TypeAlias = (
    "Atom | bool | int | float | str | bytes | list[Term] | tuple[Term, ...] | dict[Term, Term] | ImproperList"
)

_PUNCT2 = ("<<", ">>", "#{", "=>")
_PUNCT1 = "{}[],|/-+"
_SIMPLE_ESCAPES = {
    "b": 8, "d": 127, "e": 27, "f": 12, "n": 10, "r": 13, "s": 32, "t": 9, "v": 11,
}  # fmt: skip


@dataclass(slots=True)
class _Token:
    kind: str  # atom, qatom, var, string, int, float, dot, eof, or the punctuation itself
    value: object
    line: int
    column: int
    text: str


class _Lexer:
    def __init__(self, text: str, filename: str) -> None:
        self.text = text
        self.filename = filename
        self.pos = 0
        self.line = 1
        self.line_start = 0

    def error(self, message: str, line: int | None = None, column: int | None = None) -> ConfigSyntaxError:
        if line is None:
            line, column = self.line, self.pos - self.line_start + 1
        return ConfigSyntaxError(self.filename, line, column or 1, message)

    def _peek(self, ahead: int = 0) -> str:
        i = self.pos + ahead
        return self.text[i] if i < len(self.text) else ""

    def _advance(self) -> str:
        ch = self.text[self.pos]
        self.pos += 1
        if ch == "\n":
            self.line += 1
            self.line_start = self.pos
        return ch

    def _skip_blank(self) -> None:
        while self.pos < len(self.text):
            ch = self.text[self.pos]
            if ch == "%":
                while self.pos < len(self.text) and self.text[self.pos] != "\n":
                    self.pos += 1
            elif ch.isspace():
                self._advance()
            else:
                return

    def tokens(self) -> list[_Token]:
        out: list[_Token] = []
        while True:
            self._skip_blank()
            tok = self._next()
            out.append(tok)
            if tok.kind == "eof":
                return out

    def _next(self) -> _Token:
        line, col, start = self.line, self.pos - self.line_start + 1, self.pos

        def tok(kind: str, value: object = None) -> _Token:
            return _Token(kind, value, line, col, self.text[start : self.pos])

        ch = self._peek()
        if not ch:
            return tok("eof")
        if ch.isdigit():
            kind, num = self._number(line, col)
            return tok(kind, num)
        if ch.isalpha() and ch.islower():
            while (c := self._peek()) and (c.isalnum() or c in "_@"):
                self._advance()
            return tok("atom", self.text[start : self.pos])
        if ch.isalpha() or ch == "_":
            while (c := self._peek()) and (c.isalnum() or c in "_@"):
                self._advance()
            return tok("var", self.text[start : self.pos])
        if ch == "'":
            return tok("qatom", self._quoted("'", line, col))
        if ch == '"':
            return tok("string", self._quoted('"', line, col))
        if ch == "$":
            self._advance()
            if not self._peek():
                raise self.error("'$' at end of file: expected a character", line, col)
            return tok("int", self._char())
        if ch == ".":
            self._advance()
            nxt = self._peek()
            if nxt and not nxt.isspace() and nxt != "%":
                raise self.error("'.' ends a term and must be followed by whitespace", line, col)
            return tok("dot")
        two = self.text[self.pos : self.pos + 2]
        if two in _PUNCT2:
            self._advance()
            self._advance()
            return tok(two)
        if ch in _PUNCT1:
            self._advance()
            return tok(ch)
        raise self.error(f"unexpected character {ch!r}", line, col)

    def _digits(self, base: int, line: int, col: int) -> str:
        """Digits of ``base`` with single ``_`` separators between them (OTP 23+)."""
        start = self.pos
        while True:
            c = self._peek()
            separator = c == "_" and self.pos > start and _digit_value(self._peek(1) or "z") < base
            if (c and _digit_value(c) < base) or separator:
                self._advance()
            else:
                break
        return self.text[start : self.pos].replace("_", "")

    def _number(self, line: int, col: int) -> tuple[str, int | float]:
        whole = self._digits(10, line, col)
        if self._peek() == "#":
            base = int(whole)
            if not 2 <= base <= 36:
                raise self.error(f"radix {base} is outside 2..36", line, col)
            self._advance()
            digits = self._digits(base, line, col)
            if not digits:
                raise self.error(f"expected base-{base} digits after '#'", line, col)
            return "int", int(digits, base)
        if self._peek() == "." and self._peek(1).isdigit():
            self._advance()
            frac = self._digits(10, line, col)
            text = f"{whole}.{frac}"
            if self._peek() in ("e", "E"):
                sign = self._peek(1)
                skip = 2 if sign in ("+", "-") else 1
                if self._peek(skip).isdigit():
                    for _ in range(skip):
                        self._advance()
                    text += "e" + (sign if skip == 2 else "") + self._digits(10, line, col)
            return "float", float(text)
        return "int", int(whole)

    def _escape(self) -> str:
        """The character after a backslash (the backslash already consumed)."""
        line, col = self.line, self.pos - self.line_start
        if not self._peek():
            raise self.error("backslash at end of file", line, col)
        c = self._advance()
        if c in _SIMPLE_ESCAPES:
            return chr(_SIMPLE_ESCAPES[c])
        if c in "01234567":
            digits = c
            while len(digits) < 3 and self._peek() in tuple("01234567"):
                digits += self._advance()
            return chr(int(digits, 8))
        if c == "x":
            if self._peek() == "{":
                self._advance()
                digits = ""
                while (d := self._peek()) and d != "}":
                    digits += self._advance()
                if self._peek() != "}" or not digits or any(_digit_value(d) >= 16 for d in digits):
                    raise self.error("bad \\x{...} escape", line, col)
                self._advance()
                return chr(int(digits, 16))
            digits = self.text[self.pos : self.pos + 2]
            if len(digits) != 2 or any(_digit_value(d) >= 16 for d in digits):
                raise self.error("bad \\x escape: expected two hex digits", line, col)
            self._advance()
            self._advance()
            return chr(int(digits, 16))
        if c == "^":
            if not self._peek():
                raise self.error("bad \\^ escape", line, col)
            return chr(ord(self._advance()) & 31)
        # Erlang keeps any other escaped character as itself (\\, \', \", ...).
        return c

    def _quoted(self, quote: str, line: int, col: int) -> str:
        self._advance()
        out: list[str] = []
        while True:
            c = self._peek()
            if not c:
                what = "string" if quote == '"' else "quoted atom"
                raise self.error(f"unterminated {what} starting here", line, col)
            self._advance()
            if c == quote:
                return "".join(out)
            out.append(self._escape() if c == "\\" else c)

    def _char(self) -> int:
        c = self._advance()
        return ord(self._escape() if c == "\\" else c)


def _digit_value(c: str) -> int:
    if c.isdigit():
        return ord(c) - 48
    if "a" <= c.lower() <= "z":
        return ord(c.lower()) - 87
    return 99


class _Parser:
    def __init__(self, tokens: list[_Token], lexer: _Lexer) -> None:
        self.tokens = tokens
        self.lexer = lexer
        self.i = 0

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self) -> _Token:
        tok = self.tokens[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    def error(self, tok: _Token, message: str) -> ConfigSyntaxError:
        return self.lexer.error(message, tok.line, tok.column)

    def expect(self, kind: str, context: str) -> _Token:
        tok = self.take()
        if tok.kind != kind:
            raise self.error(tok, f"expected {_describe_kind(kind)} {context}, found {_describe(tok)}")
        return tok

    def forms(self) -> list[Term]:
        out: list[Term] = []
        while self.peek().kind != "eof":
            out.append(self.term())
            self.expect("dot", "after a term")
        return out

    def term(self) -> Term:
        tok = self.take()
        kind = tok.kind
        if kind == "atom":
            assert isinstance(tok.value, str)
            return {"true": True, "false": False}.get(tok.value, Atom(tok.value))
        if kind == "qatom":
            assert isinstance(tok.value, str)
            return Atom(tok.value)
        if kind == "string":
            assert isinstance(tok.value, str)
            parts = [tok.value]
            while self.peek().kind == "string":  # "a" "b" is "ab", as in Erlang source
                nxt = self.take().value
                assert isinstance(nxt, str)
                parts.append(nxt)
            return "".join(parts)
        if kind in ("int", "float"):
            assert isinstance(tok.value, (int, float))
            return tok.value
        if kind in ("-", "+"):
            num = self.take()
            if num.kind not in ("int", "float"):
                raise self.error(num, f"expected a number after '{kind}', found {_describe(num)}")
            assert isinstance(num.value, (int, float))
            return -num.value if kind == "-" else num.value
        if kind == "{":
            return tuple(self.sequence("}", "in a tuple"))
        if kind == "[":
            return self.list_tail()
        if kind == "<<":
            return self.binary()
        if kind == "#{":
            return self.map(tok)
        if kind == "var":
            raise self.error(tok, f"variables are not allowed in a term file: {tok.text}")
        raise self.error(tok, f"expected a term, found {_describe(tok)}")

    def sequence(self, close: str, context: str) -> list[Term]:
        items: list[Term] = []
        if self.peek().kind == close:
            self.take()
            return items
        while True:
            items.append(self.term())
            tok = self.take()
            if tok.kind == close:
                return items
            if tok.kind != ",":
                raise self.error(tok, f"expected ',' or '{close}' {context}, found {_describe(tok)}")

    def list_tail(self) -> Term:
        items: list[Term] = []
        if self.peek().kind == "]":
            self.take()
            return items
        while True:
            items.append(self.term())
            tok = self.take()
            if tok.kind == "]":
                return items
            if tok.kind == "|":
                tail = self.term()
                self.expect("]", "after the tail of a list")
                if isinstance(tail, list):
                    return items + tail
                if isinstance(tail, ImproperList):
                    return ImproperList((*items, *tail.elements), tail.tail)
                return ImproperList(tuple(items), tail)
            if tok.kind != ",":
                raise self.error(tok, f"expected ',', '|' or ']' in a list, found {_describe(tok)}")

    def binary(self) -> bytes:
        out = bytearray()
        if self.peek().kind == ">>":
            self.take()
            return bytes(out)
        while True:
            seg = self.take()
            if seg.kind not in ("string", "int"):
                raise self.error(seg, f"expected a string or an integer in a binary, found {_describe(seg)}")
            utf8 = False
            if self.peek().kind == "/":
                self.take()
                spec = self.take()
                if spec.kind != "atom" or spec.value != "utf8":
                    raise self.error(spec, f"only the /utf8 type is supported in a binary, found {_describe(seg)}")
                utf8 = True
            chars = [ord(c) for c in seg.value] if isinstance(seg.value, str) else [seg.value]
            for code in chars:
                assert isinstance(code, int)
                if utf8:
                    out += chr(code).encode("utf-8")
                elif 0 <= code <= 255:
                    out.append(code)
                else:
                    raise self.error(seg, f"value {code} does not fit a byte; write it with /utf8")
            tok = self.take()
            if tok.kind == ">>":
                return bytes(out)
            if tok.kind != ",":
                raise self.error(tok, f"expected ',' or '>>' in a binary, found {_describe(tok)}")

    def map(self, start: _Token) -> dict[Term, Term]:
        out: dict[Term, Term] = {}
        if self.peek().kind == "}":
            self.take()
            return out
        while True:
            key_tok = self.peek()
            key = self.term()
            self.expect("=>", "after a map key")
            value = self.term()
            try:
                out[key] = value
            except TypeError:
                raise self.error(key_tok, "a list or map cannot be a map key here") from None
            tok = self.take()
            if tok.kind == "}":
                return out
            if tok.kind != ",":
                raise self.error(tok, f"expected ',' or '}}' in a map, found {_describe(tok)}")


def _describe_kind(kind: str) -> str:
    return {"dot": "'.'", "eof": "end of file"}.get(kind, f"'{kind}'")


def _describe(tok: _Token) -> str:
    if tok.kind == "eof":
        return "end of file"
    if tok.kind == "dot":
        return "'.'"
    return f"{tok.text!r}" if tok.kind not in _PUNCT2 and tok.kind not in _PUNCT1 else f"'{tok.kind}'"


def parse_terms(text: str, filename: str = "<string>") -> list[Term]:
    """Every ``.``-terminated term in ``text``, as ``file:consult/1`` returns them."""
    lexer = _Lexer(text, filename)
    return _Parser(lexer.tokens(), lexer).forms()


def proplist(term: Term, where: str) -> dict[str, Term]:
    """An Erlang proplist ``[{Key, Value}, ...]`` with atom keys, as a dict (``where`` names
    the place in the file for the error)."""
    if not isinstance(term, list):
        raise ConfigError(f"{where}: expected a list of {{Key, Value}}, got {term!r}")
    out: dict[str, Term] = {}
    for item in term:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], Atom)):
            raise ConfigError(f"{where}: expected {{Key, Value}} with an atom key, got {item!r}")
        out[item[0].name] = item[1]
    return out
