"""Distribution control message operations (docs/erlang-distribution.md#control-messages) and frame building.

A pass-through frame is ``112``, the control tuple as a full external term, and for the ops
marked "with payload" a second term (the message or exit reason).
"""

from __future__ import annotations

import enum
import struct

from pylmq.erlang.etf import encode_into
from pylmq.erlang.terms import Atom, Pid, Reference, Term

__all__ = ["Op", "frame", "plain_send"]


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


_SEND_OPS = frozenset({Op.SEND, Op.REG_SEND, Op.SEND_SENDER, Op.ALIAS_SEND})
_PLAIN_TYPES = frozenset({Op, int, Atom, Pid, Reference})


def plain_send(control: Term) -> bool:
    """A send control (no trace token) made only of atoms, integers, pids and references. Such
    a control can be kept and shared, by its term or by its encoding: its parts are immutable
    and hashable, and no two such controls are equal yet encoded differently (as 1 and True,
    or 1 and 1.0, would be). A malformed control is never one."""
    return (
        type(control) is tuple
        and bool(control)
        and type(control[0]) in (int, Op)
        and control[0] in _SEND_OPS
        and all(type(x) in _PLAIN_TYPES for x in control)
    )


# Encoded send controls: a node sends to the same few processes (a queue's runner, the peers'
# event managers) over and over, and their control is the same bytes each time. Emptied when full.
_send_controls: dict[tuple[Term, ...], bytes] = {}
_SEND_CONTROLS = 1024


def frame(control: tuple[Term, ...], payload: Term = _NO_PAYLOAD) -> bytearray:
    """A complete frame, 4-byte length prefix included, ready to write."""
    out = bytearray(b"\0\0\0\0p")
    cached = plain_send(control)
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
