"""Frames of send controls: the encodings kept per control are exactly what encoding the control
gives, whatever controls came before (equal values of other types are not mistaken for them)."""

from __future__ import annotations

from pylmq.erlang.control import Op, frame
from pylmq.erlang.etf import decode, decode_from, encode
from pylmq.erlang.terms import Atom, Pid, Term

A = Atom
PID = Pid(A("peer@host"), 5, 0, 3)


def _control_of(f: bytearray) -> tuple[Term, bytes]:
    control, end = decode_from(bytes(f), 5)
    return control, bytes(f[5:end])


def test_equal_controls_of_other_types_get_their_own_encoding() -> None:
    # 1 == True == 1.0 in Python; in Erlang they are three terms with three encodings.
    for _ in range(2):  # the second pass finds whatever the first one kept
        for second in (1, True, 1.0, A("")):
            control = (Op.SEND, second, PID)
            got, raw = _control_of(frame(control, b"x"))
            assert raw == encode(control), f"{control!r} framed as another control's bytes"
            assert got == decode(encode(control))


def test_a_control_holding_a_list_is_encoded_not_refused() -> None:
    control = (Op.SEND, [1, 2], PID)
    assert _control_of(frame(control, b"x"))[1] == encode(control)


def test_a_send_control_and_its_int_spelling_frame_alike() -> None:
    assert frame((Op.REG_SEND, PID, A(""), A("n")), 1) == frame((6, PID, A(""), A("n")), 1)
