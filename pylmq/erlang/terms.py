"""Python types for Erlang terms that have no exact Python counterpart.

The mapping (both directions, see :mod:`pylmq.erlang.etf`):

==========================  =========================================================
Erlang                      Python
==========================  =========================================================
atom                        :class:`Atom` (never a ``str``; ``true``/``false`` too)
integer (any size)          ``int``
float                       ``float``
binary                      ``bytes``
bitstring                   :class:`BitBinary`
tuple                       ``tuple``
proper list, string         ``list`` (a string is a list of code points: Erlang does
                            not tell ``"hi"`` from ``[104,105]``, nor do we)
improper list               :class:`ImproperList` (e.g. the ``[alias | Ref]`` call tag)
map                         ``dict`` (keys that Python cannot hash or compare exactly
                            are wrapped in :class:`Key`)
pid / reference / port      :class:`Pid` / :class:`Reference` / :class:`Port`
``fun M:F/A``               :class:`Export`
other funs                  :class:`Fun` (opaque, kept as the raw bytes to echo back)
==========================  =========================================================

Encoding also accepts, for convenience: ``str`` (sent as a UTF-8 binary), ``bool`` (the atoms
``true``/``false``), ``None`` (the atom ``undefined``), ``bytearray``/``memoryview`` (binary).
Those are one-way: decoding always gives the types of the table.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any, ClassVar, Final

__all__ = [
    "FALSE",
    "TRUE",
    "UNDEFINED",
    "Atom",
    "BitBinary",
    "Export",
    "Fun",
    "ImproperList",
    "Key",
    "Pid",
    "Port",
    "Reference",
    "Term",
    "erl_string",
    "freeze",
    "needs_key",
    "to_text",
]

Term = Any
"""Any value the codec can encode or decode (see the table above)."""


class Atom:
    """An Erlang atom. Equal only to atoms of the same name, never to a ``str``.

    Atoms are interned: ``Atom("ok") is Atom("ok")``, so comparing with ``is`` works.
    """

    __slots__ = ("__weakref__", "name")
    _interned: ClassVar[dict[str, Atom]] = {}
    name: str

    def __new__(cls, name: str) -> Atom:
        atom = cls._interned.get(name)
        if atom is None:
            if not isinstance(name, str):
                raise TypeError(f"atom name must be str, got {type(name).__name__}")
            if len(name) > 255:
                raise ValueError(f"atom too long ({len(name)} characters, max 255)")
            atom = object.__new__(cls)
            object.__setattr__(atom, "name", name)
            # setdefault keeps one object per name even if two threads race here
            atom = cls._interned.setdefault(name, atom)
        return atom

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError("Atom is immutable")

    def __reduce__(self) -> tuple[type[Atom], tuple[str]]:
        return (Atom, (self.name,))

    def __repr__(self) -> str:
        return f"Atom({self.name!r})"

    def __str__(self) -> str:
        return self.name

    # identity equality and hashing come from object: atoms are interned


TRUE: Final = Atom("true")
FALSE: Final = Atom("false")
UNDEFINED: Final = Atom("undefined")


class _Value:
    """Immutable record with equality and hash over its fields (cheaper than dataclasses)."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()

    def _key(self) -> tuple[Any, ...]:
        return tuple(getattr(self, f) for f in self._fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Value) and type(other) is type(self) and self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash((type(self).__name__, *self._key()))

    def __setattr__(self, key: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __repr__(self) -> str:
        args = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields)
        return f"{type(self).__name__}({args})"


def _set(obj: object, **values: object) -> None:
    for k, v in values.items():
        object.__setattr__(obj, k, v)


# Pids and references are made for every frame a node routes (decoded, or new per call): their
# fields are set straight through object.__setattr__, without _set's keyword dict and loop.
_setattr = object.__setattr__


class Pid(_Value):
    """A process identifier: node atom, id, serial and creation (all 32-bit)."""

    __slots__ = ("_hash", "creation", "id", "node", "serial")
    _fields = ("node", "id", "serial", "creation")
    node: Atom
    id: int
    serial: int
    creation: int
    _hash: int

    def __init__(self, node: Atom, id: int, serial: int, creation: int) -> None:
        _setattr(self, "node", node)
        _setattr(self, "id", id)
        _setattr(self, "serial", serial)
        _setattr(self, "creation", creation)
        _setattr(self, "_hash", hash((node, id, serial, creation)))

    # Pids and references are dict keys on every message a node routes (processes, calls in
    # flight): a hash kept from construction and a field-wise comparison cost a fraction of the
    # generic tuple-building ones.
    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is Pid
            and other._hash == self._hash
            and other.id == self.id
            and other.serial == self.serial
            and other.creation == self.creation
            and other.node is self.node
        )

    def __repr__(self) -> str:
        return f"<{self.node.name}.{self.id}.{self.serial}>"


class Reference(_Value):
    """A reference: node atom, creation and 1 to 5 32-bit words."""

    __slots__ = ("_hash", "creation", "node", "words")
    _fields = ("node", "creation", "words")
    node: Atom
    creation: int
    words: tuple[int, ...]
    _hash: int

    def __init__(self, node: Atom, creation: int, words: Iterable[int]) -> None:
        if type(words) is not tuple:
            words = tuple(words)
        _setattr(self, "node", node)
        _setattr(self, "creation", creation)
        _setattr(self, "words", words)
        _setattr(self, "_hash", hash((node, creation, words)))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is Reference
            and other._hash == self._hash
            and other.words == self.words
            and other.creation == self.creation
            and other.node is self.node
        )

    def __repr__(self) -> str:
        return f"#Ref<{self.node.name}.{'.'.join(map(str, reversed(self.words)))}>"


class Port(_Value):
    """A port identifier: node atom, id (up to 64-bit) and creation."""

    __slots__ = ("creation", "id", "node")
    _fields = ("node", "id", "creation")
    node: Atom
    id: int
    creation: int

    def __init__(self, node: Atom, id: int, creation: int) -> None:
        _set(self, node=node, id=id, creation=creation)


class BitBinary(_Value):
    """A bitstring whose length is not a whole number of bytes.

    ``bits`` (1..8) is how many high bits of the last byte of ``data`` belong to it; the other
    bits of that byte are zero.
    """

    __slots__ = ("bits", "data")
    _fields = ("data", "bits")
    data: bytes
    bits: int

    def __init__(self, data: bytes, bits: int) -> None:
        if not data or not 1 <= bits <= 8:
            raise ValueError(f"bitstring needs data and 1..8 bits in its last byte, got {bits}")
        _set(self, data=bytes(data), bits=bits)


class Export(_Value):
    """``fun Module:Function/Arity``."""

    __slots__ = ("arity", "function", "module")
    _fields = ("module", "function", "arity")
    module: Atom
    function: Atom
    arity: int

    def __init__(self, module: Atom, function: Atom, arity: int) -> None:
        _set(self, module=module, function=function, arity=arity)


class Fun(_Value):
    """A fun defined in Erlang code, opaque: ``raw`` is its whole NEW_FUN_EXT, tag included."""

    __slots__ = ("raw",)
    _fields = ("raw",)
    raw: bytes

    def __init__(self, raw: bytes) -> None:
        _set(self, raw=bytes(raw))


class ImproperList(_Value):
    """A list whose tail is not ``[]``: ``[e1, e2, ... | tail]``.

    The gen_server call tag ``[alias | Ref]`` is ``ImproperList([Atom("alias")], ref)``.
    Hashable when its parts are, so it can key a table of pending calls.
    """

    __slots__ = ("elements", "tail")
    _fields = ("elements", "tail")
    elements: tuple[Term, ...]
    tail: Term

    def __init__(self, elements: Iterable[Term], tail: Term) -> None:
        elems = tuple(elements)
        if not elems:
            raise ValueError("an improper list needs at least one element")
        if isinstance(tail, list):
            raise ValueError("the tail of an improper list cannot be a list; extend the list")
        _set(self, elements=elems, tail=tail)

    def __repr__(self) -> str:
        return f"ImproperList({list(self.elements)!r} | {self.tail!r})"


class Key(_Value):
    """A map key that Python cannot use as is: a key containing a list, a map or a float.

    Erlang compares map keys exactly (``1`` and ``1.0`` are different keys, so are ``0.0``
    and ``-0.0``), Python's ``dict`` does not, and lists and dicts cannot be hashed at all.
    ``Key(term)`` hashes and compares by an exact frozen form; ``term`` is the original.
    """

    __slots__ = ("frozen", "term")
    _fields = ("frozen",)
    term: Term
    frozen: Any

    def __init__(self, term: Term) -> None:
        _set(self, term=term, frozen=freeze(term))

    def __repr__(self) -> str:
        return f"Key({self.term!r})"


_pack_d = struct.Struct(">d").pack


def freeze(term: Term) -> Any:
    """A hashable form of ``term`` that is equal for exactly the terms Erlang calls equal (=:=)."""
    t = type(term)
    if t is int or t is bytes or t is Atom:
        return term
    if t is float:
        return ("f", _pack_d(term))
    if t is list:
        return ("l", *map(freeze, term))
    if t is tuple:
        return ("t", *map(freeze, term))
    if t is dict:
        return ("m", frozenset((freeze(k), freeze(v)) for k, v in term.items()))
    if t is Key:
        return term.frozen
    if t is ImproperList:
        return ("i", tuple(map(freeze, term.elements)), freeze(term.tail))
    if t is str:
        return term.encode()
    if t is bool:
        return TRUE if term else FALSE
    if term is None:
        return UNDEFINED
    if isinstance(term, (bytearray, memoryview)):
        return bytes(term)
    return term


def needs_key(term: Term) -> bool:
    """Whether ``term`` must be wrapped in :class:`Key` to be an exact dict key."""
    t = type(term)
    if t is int or t is bytes or t is Atom or t is Pid or t is Reference:
        return False
    if t is tuple:
        return any(needs_key(e) for e in term)
    if t is ImproperList:
        return any(needs_key(e) for e in term.elements) or needs_key(term.tail)
    return t is list or t is dict or t is float


def erl_string(text: str) -> list[int]:
    """The Erlang string (list of code points) for ``text``; a plain ``str`` encodes as a binary."""
    return [ord(c) for c in text]


def to_text(term: Term) -> str:
    """Text from an Erlang string (list of code points), binary (UTF-8) or atom."""
    if isinstance(term, list):
        return "".join(map(chr, term))
    if isinstance(term, (bytes, bytearray)):
        return bytes(term).decode()
    if isinstance(term, Atom):
        return term.name
    raise TypeError(f"not text: {term!r}")
