"""The handshake state machines against each other, byte for byte, with no sockets."""

from __future__ import annotations

import hashlib
import struct

import pytest

from pylmq.erlang.flags import PYLMQ_FLAGS, Flag, expand
from pylmq.erlang.handshake import Acceptor, Initiator, digest
from pylmq.errors import CookieMismatch, HandshakeError

A_NAME, B_NAME = "a@127.0.0.1", "b@127.0.0.1"


def pair(
    cookie_a: bytes = b"c", cookie_b: bytes = b"c", version: int = 6, flags_a: int = PYLMQ_FLAGS
) -> tuple[Initiator, Acceptor]:
    ini = Initiator(name=A_NAME, peer=B_NAME, cookie=cookie_a, flags=flags_a, creation=11, version=version)
    acc = Acceptor(name=B_NAME, cookie=cookie_b, flags=PYLMQ_FLAGS, creation=22)
    return ini, acc


def run(ini: Initiator, acc: Acceptor, status: str = "ok") -> None:
    to_acc = ini.start()
    while not (ini.done and acc.done):
        to_ini: list[bytes] = []
        for p in to_acc:
            to_ini += acc.receive(p)
            if acc.needs_decision:
                to_ini += acc.decide(status)
        to_acc = []
        for p in to_ini:
            to_acc += ini.receive(p)
        if ini.state == "aborted" or (not to_acc and not ini.done):
            return


def test_digest_is_md5_of_cookie_then_decimal_challenge() -> None:
    assert digest(1234, b"secret") == hashlib.md5(b"secret1234").digest()


def test_v6_name_message_layout() -> None:
    ini, _ = pair()
    (packet,) = ini.start()
    assert packet[:1] == b"N"
    flags, creation, nlen = struct.unpack(">QIH", packet[1:15])
    assert (flags, creation, packet[15:].decode()) == (PYLMQ_FLAGS, 11, A_NAME) and nlen == len(A_NAME)
    assert not flags & Flag.PUBLISHED


def test_v6_handshake_completes_and_exchanges_flags_and_creation() -> None:
    ini, acc = pair()
    run(ini, acc)
    assert ini.done and acc.done
    assert (ini.peer_creation, acc.peer_creation) == (22, 11)
    assert acc.peer == A_NAME and ini.peer_flags == expand(PYLMQ_FLAGS)


def test_v5_name_with_handshake_23_gets_v6_challenge_and_sends_complement() -> None:
    ini, acc = pair(version=5)
    run(ini, acc)
    assert ini.done and acc.done
    assert acc.peer_creation == 11 and acc.peer_flags & Flag.SPAWN  # high flags came in 'c'


def test_v5_name_without_handshake_23_gets_old_challenge() -> None:
    old = PYLMQ_FLAGS & ~Flag.HANDSHAKE_23 & ~Flag.MANDATORY_25_DIGEST
    ini, acc = pair(version=5, flags_a=old)
    run(ini, acc)
    assert ini.done and acc.done and ini.peer_version == 5


def test_wrong_cookie_is_detected_by_the_acceptor() -> None:
    ini, acc = pair(cookie_a=b"one", cookie_b=b"two")
    with pytest.raises(CookieMismatch, match=A_NAME):
        run(ini, acc)


def test_nok_status_means_the_peer_wins_a_simultaneous_connect() -> None:
    ini, acc = pair()
    run(ini, acc, status="nok")
    assert ini.lost_simultaneous and not ini.done


def test_alive_status_is_answered_true_and_continues() -> None:
    ini, acc = pair()
    run(ini, acc, status="alive")
    assert ini.done and acc.done


def test_peer_without_required_flags_is_refused_naming_them() -> None:
    ini, acc = pair(flags_a=int(Flag.EXTENDED_REFERENCES | Flag.EXTENDED_PIDS_PORTS))
    acc.receive(ini.start()[0])
    assert acc.decide("ok") == [b"snot_allowed"]
    assert "UTF8_ATOMS" in acc.refusal and A_NAME in acc.refusal


def test_not_allowed_status_raises_a_clear_error() -> None:
    ini, _ = pair()
    ini.start()
    with pytest.raises(HandshakeError, match="not_allowed"):
        ini.receive(b"snot_allowed")


def test_challenge_from_another_name_is_rejected() -> None:
    ini, _ = pair()
    ini.start()
    ini.receive(b"sok")
    other = Acceptor(name="x@127.0.0.1", cookie=b"c", flags=PYLMQ_FLAGS, creation=1)
    other.receive(Initiator(name=A_NAME, peer="x", cookie=b"c", flags=PYLMQ_FLAGS, creation=1).start()[0])
    challenge = other.decide("ok")[1]
    with pytest.raises(HandshakeError, match=r"x@127\.0\.0\.1 answered"):
        ini.receive(challenge)
