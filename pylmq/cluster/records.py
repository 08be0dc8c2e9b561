"""LMQ's Mnesia records and props as Erlang terms, and back (docs/lmq-contract.md#tables).

Pure functions, no I/O. The shapes are LMQ's: a queue table row is
``{message, {Ts, Uuid16}, State, Type, Retry, Content}`` (a simple Mnesia table event carries the
table name in place of ``message``), content ``{[{Bin, Bin}], Bin}`` or a list of those, retry an
integer or ``infinity``; queue props the proplist ``[{accum, Ms}, {retry, N}, {timeout, Secs}]``;
the default list ``[{Regex, Props}]``. A queue name is the atom LMQ makes with
``binary_to_atom(Name, latin1)`` from the UTF-8 bytes of the name, so a name with non-ASCII
characters names the same table on both sides.
"""

from __future__ import annotations

from typing import Any

from pylmq.core.message import Content, Item, Retry, State, StoredMessage, StoredMessageType
from pylmq.core.props import DefaultList, RawProps
from pylmq.erlang.terms import Atom, Term

__all__ = [
    "INFINITY",
    "MESSAGE",
    "default_list_from_term",
    "default_list_to_term",
    "item_to_term",
    "message_from_term",
    "message_to_term",
    "name_from_atom",
    "name_to_atom",
    "props_from_term",
    "props_to_term",
    "retry_to_term",
]

A = Atom
MESSAGE = A("message")
INFINITY = A("infinity")
_ACCUM, _RETRY, _TIMEOUT = A("accum"), A("retry"), A("timeout")
_STATES = {A(s.value): s for s in State}
_TYPES = {A(t.value): t for t in StoredMessageType}


def name_to_atom(name: str) -> Atom:
    return A(name.encode("utf-8").decode("latin-1"))


def name_from_atom(atom: Atom) -> str:
    try:
        return atom.name.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return atom.name  # made by an Erlang client from something other than UTF-8 bytes


def _bytes(term: Term) -> bytes:
    """A binary, or an Erlang string (list of code points) that an Erlang client stored."""
    if isinstance(term, bytes):
        return term
    if isinstance(term, list) and all(isinstance(c, int) for c in term):
        try:
            return bytes(term)
        except ValueError:
            return "".join(map(chr, term)).encode()
    if isinstance(term, Atom):
        return term.name.encode()
    return repr(term).encode()


def _item_from_term(term: Term) -> Item:
    if isinstance(term, tuple) and len(term) == 2 and isinstance(term[0], list):
        md = tuple((_bytes(h[0]), _bytes(h[1])) for h in term[0] if isinstance(h, tuple) and len(h) == 2)
        return (md, _bytes(term[1]))
    return ((), _bytes(term))


def item_to_term(item: Item) -> Term:
    md, body = item
    return ([(k, v) for k, v in md], body)


def retry_from_term(term: Term) -> Retry:
    return term if isinstance(term, int) and not isinstance(term, bool) else None


def retry_to_term(retry: Retry) -> Term:
    return INFINITY if retry is None else retry


def message_from_term(term: Term) -> StoredMessage:
    """A row of a queue table (record tag ``message`` or the table name); ValueError if not one."""
    if not (isinstance(term, tuple) and len(term) == 6 and isinstance(term[1], tuple) and len(term[1]) == 2):
        raise ValueError(f"not a message record: {term!r:.200}")
    _, (ts, uuid), state, type_, retry, content = term
    mtype = _TYPES.get(type_, StoredMessageType.NORMAL)
    body: Content
    if mtype is StoredMessageType.COMPOUND and isinstance(content, list):
        body = [_item_from_term(c) for c in content]
    else:
        mtype = StoredMessageType.NORMAL
        body = _item_from_term(content)
    return StoredMessage(
        (float(ts), _bytes(uuid)), _STATES.get(state, State.AVAILABLE), mtype, retry_from_term(retry), body
    )


def message_to_term(msg: StoredMessage) -> Term:
    if msg.type is StoredMessageType.COMPOUND:
        content: Term = [item_to_term(i) for i in msg.items()]
    else:
        content = item_to_term(msg.items()[0])
    return (MESSAGE, msg.id, A(msg.state.value), A(msg.type.value), retry_to_term(msg.retry), content)


def _number(x: Term) -> float | None:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else None


def props_from_term(term: Term) -> RawProps:
    """LMQ's proplist (accum in ms) as raw props (accum in s); other keys (hooks) are not ours."""
    out: RawProps = {}
    if not isinstance(term, list):
        return out
    for entry in term:
        if not (isinstance(entry, tuple) and len(entry) == 2):
            continue
        key, value = entry
        if key is _ACCUM and (n := _number(value)) is not None:
            out["accum"] = n / 1000.0
        elif key is _RETRY:
            out["retry"] = retry_from_term(value)
        elif key is _TIMEOUT and (n := _number(value)) is not None:
            out["timeout"] = n
    return out


def _whole(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def props_to_term(props: RawProps) -> Term:
    """Raw props as LMQ's proplist, sorted by key as LMQ keeps it."""
    out: list[Term] = []
    if "accum" in props:
        out.append((_ACCUM, round(float(props["accum"]) * 1000)))
    if "retry" in props:
        out.append((_RETRY, retry_to_term(props["retry"])))
    if "timeout" in props:
        out.append((_TIMEOUT, _whole(float(props["timeout"]))))
    return out


def _text(term: Term) -> str | None:
    if isinstance(term, bytes):
        return term.decode("utf-8", "replace")
    if isinstance(term, list) and all(isinstance(c, int) for c in term):
        return "".join(map(chr, term))
    return None


def default_list_from_term(term: Term) -> DefaultList:
    """``[{Regex, Props}]`` with the regex a binary or a string; malformed entries are skipped."""
    out: DefaultList = []
    if not isinstance(term, list):
        return out
    for entry in term:
        if isinstance(entry, tuple) and len(entry) == 2 and (regex := _text(entry[0])) is not None:
            out.append((regex, props_from_term(entry[1])))
    return out


def default_list_to_term(defaults: DefaultList) -> Term:
    # Binaries, as LMQ's APIs store them (lmq_api:normalize_default_props).
    return [(regex.encode(), props_to_term(props)) for regex, props in defaults]


def is_message_term(term: Any) -> bool:
    return isinstance(term, tuple) and len(term) == 6
