"""Erlang external term format: a sans-IO codec.

``encode(term) -> bytes`` and ``decode(bytes) -> term`` (both with the leading version byte
131), plus ``decode_from(data, pos)`` for the distribution's back-to-back terms. The Python
types are those of :mod:`pylmq.erlang.terms`; every tag an OTP 17-28 peer can send is decoded
(the atom-cache and dist-header tags are not: pylmq never negotiates them).

Encoding follows what ``term_to_binary(T, [{minor_version, 2}])`` produces, so outputs are
byte-identical to Erlang's for everything but map key order (Erlang sorts small maps' keys,
we keep the dict's order; both decode to the same map).
"""

from __future__ import annotations

import math
import struct
import zlib
from typing import Any

from pylmq.erlang.terms import (
    FALSE,
    TRUE,
    UNDEFINED,
    Atom,
    BitBinary,
    Export,
    Fun,
    ImproperList,
    Key,
    Pid,
    Port,
    Reference,
    Term,
    needs_key,
)

__all__ = ["DecodeError", "EncodeError", "decode", "decode_from", "encode", "encode_into"]

VERSION = 131


class DecodeError(ValueError):
    """The bytes are not a valid external term (truncated, unknown tag, bad data)."""


class EncodeError(ValueError):
    """The Python value has no Erlang term form (unsupported type, NaN, infinity...)."""


_u16 = struct.Struct(">H").unpack_from
_u32 = struct.Struct(">I").unpack_from
_s32 = struct.Struct(">i").unpack_from
_u64 = struct.Struct(">Q").unpack_from
_f64 = struct.Struct(">d").unpack_from
_pid_tail = struct.Struct(">III").unpack_from
_ref_words = {n: struct.Struct(f">{n}I").unpack_from for n in range(1, 6)}

_utf8_atoms: dict[bytes, Atom] = {}
# Pids by their encoding: the same few pids (a peer's Mnesia processes, this node's) come in
# nearly every frame, and a lookup costs a fraction of decoding one. Emptied when full.
_pids: dict[bytes, Pid] = {}
_PID_CACHE = 4096
_latin1_atoms: dict[bytes, Atom] = {}


def _atom_utf8(raw: bytes) -> Atom:
    atom = _utf8_atoms.get(raw)
    if atom is None:
        try:
            atom = Atom(raw.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise DecodeError(f"atom is not UTF-8: {raw!r}") from e
        _utf8_atoms[raw] = atom
    return atom


def _atom_latin1(raw: bytes) -> Atom:
    atom = _latin1_atoms.get(raw)
    if atom is None:
        atom = _latin1_atoms[raw] = Atom(raw.decode("latin-1"))
    return atom


def _take(b: bytes, i: int, n: int) -> bytes:
    j = i + n
    if j > len(b):
        raise DecodeError(f"truncated term: need {n} bytes at offset {i}, have {len(b) - i}")
    return b[i:j]


def _node_atom(b: bytes, i: int) -> tuple[Atom, int]:
    node, i = _dec(b, i)
    if type(node) is not Atom:
        raise DecodeError(f"node of a pid/ref/port is not an atom: {node!r}")
    return node, i


def _dec(b: bytes, i: int) -> tuple[Term, int]:  # one dispatch chain keeps it fast
    tag = b[i]
    # Ordered by how often each tag occurs in LMQ traffic.
    if tag == 97:  # SMALL_INTEGER_EXT
        return b[i + 1], i + 2
    if tag == 119:  # SMALL_ATOM_UTF8_EXT
        n = b[i + 1]
        return _atom_utf8(_take(b, i + 2, n)), i + 2 + n
    if tag == 104:  # SMALL_TUPLE_EXT
        n = b[i + 1]
        i += 2
        items: list[Term] = []
        append = items.append
        for _ in range(n):
            # Atoms, small integers and binaries, most of a tuple's elements, without a call each.
            if b[i] == 119:
                j = i + 2 + b[i + 1]
                raw = b[i + 2 : j]
                atom = _utf8_atoms.get(raw)
                if atom is None or len(raw) != j - i - 2:
                    atom = _atom_utf8(_take(b, i + 2, j - i - 2))
                append(atom)
                i = j
            elif b[i] == 97:
                append(b[i + 1])
                i += 2
            elif b[i] == 109:  # binaries: a message's id and body
                (size,) = _u32(b, i + 1)
                append(_take(b, i + 5, size))
                i += 5 + size
            else:
                t, i = _dec(b, i)
                append(t)
        return tuple(items), i
    if tag == 109:  # BINARY_EXT
        (n,) = _u32(b, i + 1)
        return _take(b, i + 5, n), i + 5 + n
    if tag == 98:  # INTEGER_EXT
        return _s32(b, i + 1)[0], i + 5
    if tag == 108:  # LIST_EXT
        (n,) = _u32(b, i + 1)
        i += 5
        items = []
        for _ in range(n):
            t, i = _dec(b, i)
            items.append(t)
        if b[i] == 106:
            return items, i + 1
        tail, i = _dec(b, i)
        return _improper(items, tail), i
    if tag == 106:  # NIL_EXT
        return [], i + 1
    if tag == 107:  # STRING_EXT
        (n,) = _u16(b, i + 1)
        return list(_take(b, i + 3, n)), i + 3 + n
    if tag == 70:  # NEW_FLOAT_EXT
        return _f64(b, i + 1)[0], i + 9
    if tag == 116:  # MAP_EXT
        (n,) = _u32(b, i + 1)
        i += 5
        m: dict[Any, Any] = {}
        for _ in range(n):
            k, i = _dec(b, i)
            v, i = _dec(b, i)
            tk = type(k)
            if not (tk is Atom or tk is bytes or tk is int) and needs_key(k):
                k = Key(k)
            m[k] = v
        if len(m) != n:
            raise DecodeError(f"map with {n} entries has duplicate keys")
        return m, i
    if tag == 118:  # ATOM_UTF8_EXT
        (n,) = _u16(b, i + 1)
        return _atom_utf8(_take(b, i + 3, n)), i + 3 + n
    if tag == 100:  # ATOM_EXT (Latin-1)
        (n,) = _u16(b, i + 1)
        return _atom_latin1(_take(b, i + 3, n)), i + 3 + n
    if tag == 115:  # SMALL_ATOM_EXT (Latin-1)
        n = b[i + 1]
        return _atom_latin1(_take(b, i + 2, n)), i + 2 + n
    if tag == 88:  # NEW_PID_EXT
        # Kept only with the node a SMALL_ATOM_UTF8_EXT, as every OTP node sends it. A cut
        # ``raw`` is shorter than any kept one with the same atom length: never found.
        raw = b[i : i + 15 + b[i + 2]] if b[i + 1] == 119 else b""
        pid = _pids.get(raw) if raw else None
        if pid is not None:
            return pid, i + len(raw)
        node, k = _node_atom(b, i + 1)
        pid_id, serial, creation = _pid_tail(b, k)  # raises if cut: ``raw`` is then whole
        pid = Pid(node, pid_id, serial, creation)
        if raw:
            if len(_pids) >= _PID_CACHE:
                _pids.clear()
            _pids[raw] = pid
        return pid, k + 12
    if tag == 90 or tag == 114:  # NEWER_REFERENCE_EXT / NEW_REFERENCE_EXT
        (n,) = _u16(b, i + 1)
        if not 1 <= n <= 5:
            raise DecodeError(f"reference with {n} words")
        node, i = _node_atom(b, i + 3)
        if tag == 90:
            (creation,) = _u32(b, i)
            i += 4
        else:
            creation = b[i] & 3
            i += 1
        return Reference(node, creation, _ref_words[n](b, i)), i + 4 * n
    if tag == 110 or tag == 111:  # SMALL_BIG_EXT / LARGE_BIG_EXT
        if tag == 110:
            n = b[i + 1]
            i += 2
        else:
            (n,) = _u32(b, i + 1)
            i += 5
        sign = b[i]
        v = int.from_bytes(_take(b, i + 1, n), "little")
        return (-v if sign else v), i + 1 + n
    if tag == 105:  # LARGE_TUPLE_EXT
        (n,) = _u32(b, i + 1)
        i += 5
        items = []
        for _ in range(n):
            t, i = _dec(b, i)
            items.append(t)
        return tuple(items), i
    if tag == 77:  # BIT_BINARY_EXT
        (n,) = _u32(b, i + 1)
        bits = b[i + 5]
        data = _take(b, i + 6, n)
        if n == 0:
            return b"", i + 6
        try:
            return BitBinary(data, bits), i + 6 + n
        except ValueError as e:
            raise DecodeError(str(e)) from e
    if tag == 89:  # NEW_PORT_EXT
        node, i = _node_atom(b, i + 1)
        port_id, creation = _u32(b, i)[0], _u32(b, i + 4)[0]
        return Port(node, port_id, creation), i + 8
    if tag == 120:  # V4_PORT_EXT
        node, i = _node_atom(b, i + 1)
        return Port(node, _u64(b, i)[0], _u32(b, i + 8)[0]), i + 12
    if tag == 113:  # EXPORT_EXT
        mod, i = _dec(b, i + 1)
        fun, i = _dec(b, i)
        arity, i = _dec(b, i)
        if type(mod) is not Atom or type(fun) is not Atom or type(arity) is not int:
            raise DecodeError(f"bad export fun {mod!r}:{fun!r}/{arity!r}")
        return Export(mod, fun, arity), i
    if tag == 112:  # NEW_FUN_EXT: opaque, its Size field covers everything but the tag
        (size,) = _u32(b, i + 1)
        return Fun(_take(b, i, size + 1)), i + 1 + size
    if tag == 103:  # PID_EXT (pre OTP 23)
        node, i = _node_atom(b, i + 1)
        pid_id, serial = _u32(b, i)[0], _u32(b, i + 4)[0]
        return Pid(node, pid_id, serial, b[i + 8] & 3), i + 9
    if tag == 102:  # PORT_EXT (pre OTP 23)
        node, i = _node_atom(b, i + 1)
        return Port(node, _u32(b, i)[0], b[i + 4] & 3), i + 5
    if tag == 101:  # REFERENCE_EXT (ancient)
        node, i = _node_atom(b, i + 1)
        return Reference(node, b[i + 4] & 3, (_u32(b, i)[0],)), i + 5
    if tag == 99:  # FLOAT_EXT (old text floats)
        text = _take(b, i + 1, 31).split(b"\0", 1)[0]
        try:
            return float(text), i + 32
        except ValueError as e:
            raise DecodeError(f"bad FLOAT_EXT {text!r}") from e
    raise DecodeError(f"unsupported term tag {tag} at offset {i}")


def _improper(items: list[Term], tail: Term) -> Term:
    # A hand-made encoding may nest LIST_EXTs; Erlang sees one list, so do we.
    if type(tail) is list:
        return items + tail
    if type(tail) is ImproperList:
        return ImproperList(items + list(tail.elements), tail.tail)
    return ImproperList(items, tail)


def decode_from(data: bytes | bytearray, pos: int = 0) -> tuple[Term, int]:
    """Decode one term starting with the version byte at ``pos``; return it and the next offset."""
    if type(data) is not bytes:
        data = bytes(data)  # slices of it become binaries, and keys of the decoder's caches
    try:
        if data[pos] != VERSION:
            raise DecodeError(f"external term must start with 131, got {data[pos]} at offset {pos}")
        if data[pos + 1] == 80:  # compressed
            (size,) = _u32(data, pos + 2)
            d = zlib.decompressobj()
            inner = d.decompress(data[pos + 6 :], size + 1)
            if len(inner) != size:
                raise DecodeError(f"compressed term: expected {size} bytes, got {len(inner)}")
            if not d.eof:
                # A stream that never ends would run to the end of the data: what follows it
                # would not be a term of its own.
                raise DecodeError("compressed term: the zlib stream does not end")
            term, used = _dec(inner, 0)
            if used != size:
                raise DecodeError("compressed term has trailing bytes")
            return term, len(data) - len(d.unused_data)
        return _dec(data, pos + 1)
    except (IndexError, struct.error) as e:
        raise DecodeError(f"truncated term ({len(data)} bytes)") from e
    except DecodeError:
        raise
    except ValueError as e:  # a form no Erlang node sends (a LIST_EXT of no elements with a tail)
        raise DecodeError(f"malformed term: {e}") from e
    except RecursionError as e:
        raise DecodeError("term nested too deeply") from e
    except zlib.error as e:
        raise DecodeError(f"bad compressed term: {e}") from e


def decode(data: bytes) -> Term:
    """Decode exactly one term; trailing bytes are an error."""
    term, end = decode_from(bytes(data))
    if end != len(data):
        raise DecodeError(f"{len(data) - end} trailing bytes after the term")
    return term


# --------------------------------------------------------------------------- encoding

_p_bi = struct.Struct(">Bi").pack
_p_bI = struct.Struct(">BI").pack
_p_bH = struct.Struct(">BH").pack
_p_bd = struct.Struct(">Bd").pack
_p_III = struct.Struct(">III").pack
_p_I = struct.Struct(">I").pack
_p_QI = struct.Struct(">QI").pack
_p_II = struct.Struct(">II").pack
_p_bIb = struct.Struct(">BIB").pack
_p_bbb = struct.Struct(">BBB").pack

_atom_ext: dict[Atom, bytes] = {}
_pid_ext: dict[Pid, bytes] = {}  # as _pids, the other way


def _atom_bytes(atom: Atom) -> bytes:
    raw = _atom_ext.get(atom)
    if raw is None:
        name = atom.name.encode("utf-8")
        raw = (bytes((119, len(name))) if len(name) < 256 else _p_bH(118, len(name))) + name
        _atom_ext[atom] = raw
    return raw


def _enc_int(v: int, out: bytearray) -> None:
    if 0 <= v < 256:
        out.append(97)
        out.append(v)
    elif -2147483648 <= v < 2147483648:
        out += _p_bi(98, v)
    else:
        mag = -v if v < 0 else v
        n = (mag.bit_length() + 7) // 8
        out += _p_bbb(110, n, v < 0) if n < 256 else _p_bIb(111, n, v < 0)
        out += mag.to_bytes(n, "little")


def _enc_list(v: list[Term], out: bytearray) -> None:
    n = len(v)
    if n == 0:
        out.append(106)
    elif n < 65536 and all(type(x) is int and 0 <= x < 256 for x in v):
        out += _p_bH(107, n)
        out += bytes(v)
    else:
        out += _p_bI(108, n)
        for x in v:
            _enc(x, out)
        out.append(106)


def _enc(t: Term, out: bytearray) -> None:  # one dispatch chain keeps it fast
    tt = type(t)
    if tt is Atom:
        out += _atom_ext.get(t) or _atom_bytes(t)
    elif tt is int:
        _enc_int(t, out)
    elif tt is bytes:
        out += _p_bI(109, len(t))
        out += t
    elif tt is tuple:
        n = len(t)
        out += bytes((104, n)) if n < 256 else _p_bI(105, n)
        for x in t:
            if type(x) is Atom:  # most of a tuple's elements, without a call each
                out += _atom_ext.get(x) or _atom_bytes(x)
            else:
                _enc(x, out)
    elif tt is list:
        _enc_list(t, out)
    elif tt is float:
        if not math.isfinite(t):
            raise EncodeError(f"Erlang has no float {t}")
        out += _p_bd(70, t)
    elif tt is dict:
        out += _p_bI(116, len(t))
        for k, x in t.items():
            _enc(k, out)
            _enc(x, out)
    elif tt is str:
        raw = t.encode("utf-8")
        out += _p_bI(109, len(raw))
        out += raw
    elif tt is Pid:
        raw = _pid_ext.get(t)
        if raw is None:
            raw = b"X" + _atom_bytes(t.node) + _p_III(t.id, t.serial, t.creation)
            if len(_pid_ext) >= _PID_CACHE:
                _pid_ext.clear()
            _pid_ext[t] = raw
        out += raw
    elif tt is Reference:
        out += _p_bH(90, len(t.words))
        out += _atom_bytes(t.node)
        out += _p_I(t.creation)
        for w in t.words:
            out += _p_I(w)
    elif tt is ImproperList:
        out += _p_bI(108, len(t.elements))
        for x in t.elements:
            _enc(x, out)
        _enc(t.tail, out)
    elif tt is bool:
        out += _atom_bytes(TRUE if t else FALSE)
    elif t is None:
        out += _atom_bytes(UNDEFINED)
    elif tt is Key:
        _enc(t.term, out)
    elif tt is BitBinary:
        out += _p_bI(77, len(t.data))
        out.append(t.bits)
        out += t.data
    elif tt is Port:
        out.append(89 if t.id < 1 << 32 else 120)
        out += _atom_bytes(t.node)
        out += _p_II(t.id, t.creation) if t.id < 1 << 32 else _p_QI(t.id, t.creation)
    elif tt is Export:
        out.append(113)
        out += _atom_bytes(t.module)
        out += _atom_bytes(t.function)
        _enc_int(t.arity, out)
    elif tt is Fun:
        out += t.raw
    elif isinstance(t, (bytearray, memoryview)):
        raw = bytes(t)
        out += _p_bI(109, len(raw))
        out += raw
    elif isinstance(t, bool):
        _enc(bool(t), out)
    elif isinstance(t, int):
        _enc_int(int(t), out)
    elif isinstance(t, (tuple, list, dict, str, bytes, float)):
        # subclasses (named tuples, str enums...) encode as their base type
        base: Any = next(b for b in (tuple, list, dict, str, bytes, float) if isinstance(t, b))
        _enc(base(t), out)
    else:
        raise EncodeError(f"cannot encode {tt.__name__} as an Erlang term: {t!r}")


def encode_into(term: Term, out: bytearray) -> None:
    """Append ``131`` and the encoding of ``term`` to ``out``."""
    out.append(VERSION)
    try:
        _enc(term, out)
    except RecursionError as e:
        raise EncodeError("term nested too deeply") from e
    except struct.error as e:
        raise EncodeError(f"value out of range in {term!r:.200}: {e}") from e


def encode(term: Term) -> bytes:
    """The external term format of ``term``, starting with the version byte 131."""
    out = bytearray()
    encode_into(term, out)
    return bytes(out)
