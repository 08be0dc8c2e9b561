"""Distribution control message operations (docs/erlang-distribution.md#control-messages) and frame building.

A pass-through frame is ``112``, the control tuple as a full external term, and for the ops
marked "with payload" a second term (the message or exit reason).
"""

from __future__ import annotations

import enum
import struct

from pylmq.erlang.etf import encode_into
from pylmq.erlang.terms import Atom, Pid, Reference, Term

__all__ = ["Op", "frame"]


class Op(enum.IntEnum):
    LINK = 1
    SEND = 2
    EXIT = 3
    UNLINK = 4
    REG_SEND = 6
    GROUP_LEADER = 7
    EXIT2 = 8
    SEND_TT = 12
    EXIT_TT = 13
    REG_SEND_TT = 16
    EXIT2_TT = 18
    MONITOR_P = 19
    DEMONITOR_P = 20
    MONITOR_P_EXIT = 21
    SEND_SENDER = 22
    SEND_SENDER_TT = 23
    PAYLOAD_EXIT = 24
    PAYLOAD_EXIT_TT = 25
    PAYLOAD_EXIT2 = 26
    PAYLOAD_EXIT2_TT = 27
    PAYLOAD_MONITOR_P_EXIT = 28
    SPAWN_REQUEST = 29
    SPAWN_REQUEST_TT = 30
    SPAWN_REPLY = 31
    SPAWN_REPLY_TT = 32
    ALIAS_SEND = 33
    ALIAS_SEND_TT = 34
    UNLINK_ID = 35
    UNLINK_ID_ACK = 36


SPAWN_REPLY_LINKED = 1
SPAWN_REPLY_MONITORED = 2

_NO_PAYLOAD = object()


# Encoded send controls: a node sends to the same few processes (a queue's runner, the peers'
# event managers) over and over, and their control is the same bytes each time. Emptied when full.
_SEND_OPS = frozenset({Op.SEND, Op.REG_SEND, Op.SEND_SENDER, Op.ALIAS_SEND})
_send_controls: dict[tuple[Term, ...], bytes] = {}
_CACHED_TYPES = frozenset({Op, int, Atom, Pid, Reference})
_SEND_CONTROLS = 1024


def frame(control: tuple[Term, ...], payload: Term = _NO_PAYLOAD) -> bytearray:
    """A complete frame, 4-byte length prefix included, ready to write."""
    out = bytearray(b"\0\0\0\0p")
    # Only controls of exactly these types: no two of them are equal and encoded differently
    # (as 1 and True, or 1 and 1.0, would be), and all are hashable.
    cached = control[0] in _SEND_OPS and all(type(x) in _CACHED_TYPES for x in control)
    known = _send_controls.get(control) if cached else None
    if known is not None:
        out += known
    else:
        encode_into(control, out)
        if cached:
            if len(_send_controls) >= _SEND_CONTROLS:
                _send_controls.clear()
            _send_controls[control] = bytes(out[5:])
    if payload is not _NO_PAYLOAD:
        encode_into(payload, out)
    struct.pack_into(">I", out, 0, len(out) - 4)
    return out
