"""The distribution handshake as two sans-IO state machines (docs/erlang-distribution.md#handshake).

Both machines take handshake packets (the bytes after the 2-byte length prefix) and return the
packets to send. :class:`Initiator` dials, :class:`Acceptor` answers. Version 6 (``'N'``) is
spoken by default; version 5 (``'n'``) only when the peer's EPMD entry says 5, with the
complement ``'c'`` when a version-5 name gets a version-6 challenge.
"""

from __future__ import annotations

import hashlib
import secrets
import struct

from pylmq.erlang.flags import REQUIRED_FLAGS, Flag, describe, expand, missing
from pylmq.errors import CookieMismatch, HandshakeError

__all__ = ["Acceptor", "Initiator", "digest"]

_name_v6 = struct.Struct(">cQIH")  # 'N', flags, creation, name length
_challenge_v6 = struct.Struct(">cQIIH")  # 'N', flags, challenge, creation, name length
_name_v5 = struct.Struct(">cHI")  # 'n', version, flags
_challenge_v5 = struct.Struct(">cHII")  # 'n', version, flags, challenge
_complement = struct.Struct(">cII")  # 'c', flags high word, creation
_reply = struct.Struct(">cI")  # 'r', challenge


def digest(challenge: int, cookie: bytes) -> bytes:
    """MD5 of the cookie followed by the challenge in decimal: cookie FIRST."""
    return hashlib.md5(cookie + str(challenge).encode(), usedforsecurity=False).digest()


def _new_challenge() -> int:
    return secrets.randbits(32)


def _check_peer_flags(peer: str, flags: int) -> None:
    lacking = missing(flags, REQUIRED_FLAGS)
    if lacking:
        raise HandshakeError(f"node {peer} cannot handle {describe(lacking)}; pylmq needs them (peer too old?)")


class Initiator:
    """We dial ``peer``. ``start()`` gives the name packet; feed every packet to ``receive()``."""

    def __init__(self, *, name: str, peer: str, cookie: bytes, flags: int, creation: int, version: int = 6) -> None:
        self.name = name
        self.peer = peer
        self.cookie = cookie
        self.flags = flags
        self.creation = creation
        self.version = version
        self.state = "start"
        self.status = ""
        self.peer_flags = 0
        self.peer_creation = 0
        self.peer_version = version
        self._challenge = _new_challenge()
        self._peer_challenge = 0

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def lost_simultaneous(self) -> bool:
        """The peer refused with ``nok``: it is dialling us too and its attempt wins."""
        return self.status == "nok"

    def start(self) -> list[bytes]:
        name = self.name.encode()
        self.state = "await_status"
        if self.version >= 6:
            return [_name_v6.pack(b"N", self.flags, self.creation, len(name)) + name]
        return [_name_v5.pack(b"n", 5, self.flags & 0xFFFFFFFF) + name]

    def expecting_ack(self) -> bool:
        return self.state == "await_ack"

    def receive(self, packet: bytes) -> list[bytes]:
        if not packet:
            raise HandshakeError(f"empty handshake packet from {self.peer}")
        tag = packet[:1]
        if self.state == "await_status" and tag == b"s":
            return self._on_status(packet[1:].decode(errors="replace"))
        if self.state == "await_challenge" and tag in (b"N", b"n"):
            return self._on_challenge(packet)
        if self.state == "await_ack" and tag == b"a":
            if packet[1:17] != digest(self._challenge, self.cookie):
                raise CookieMismatch(f"node {self.peer} answered with a wrong digest: the cookies differ")
            self.state = "done"
            return []
        raise HandshakeError(f"unexpected handshake packet {packet[:1]!r} from {self.peer} in state {self.state}")

    def _on_status(self, status: str) -> list[bytes]:
        self.status = status
        if status in ("ok", "ok_simultaneous"):
            self.state = "await_challenge"
            return []
        if status == "alive":
            # The peer still holds a connection from our name; we have none, so it is stale.
            self.state = "await_challenge"
            return [b"strue"]
        if status == "nok":
            self.state = "aborted"
            return []
        if status == "not_allowed":
            raise HandshakeError(
                f"node {self.peer} refused the connection (not_allowed): it rejects our flags "
                f"{describe(self.flags)} or our name {self.name}"
            )
        raise HandshakeError(f"node {self.peer} answered status {status!r}")

    def _on_challenge(self, packet: bytes) -> list[bytes]:
        out: list[bytes] = []
        if packet[:1] == b"N":
            _, flags, challenge, creation, nlen = _challenge_v6.unpack_from(packet)
            name = packet[_challenge_v6.size : _challenge_v6.size + nlen].decode(errors="replace")
            self.peer_version = 6
            if self.version < 6:
                # we sent 'n' with HANDSHAKE_23 and the peer speaks 6: complete our flags/creation
                out.append(_complement.pack(b"c", self.flags >> 32, self.creation))
        else:
            _, _version, flags, challenge = _challenge_v5.unpack_from(packet)
            name = packet[_challenge_v5.size :].decode(errors="replace")
            creation = 0
            self.peer_version = 5
        if name != self.peer:
            raise HandshakeError(f"dialled {self.peer} but {name} answered")
        _check_peer_flags(self.peer, flags)
        self.peer_flags = expand(flags)
        self.peer_creation = creation
        self._peer_challenge = challenge
        out.append(_reply.pack(b"r", self._challenge) + digest(challenge, self.cookie))
        self.state = "await_ack"
        return out


class Acceptor:
    """A peer dialled us. Feed packets to ``receive()``; after the name, call ``decide(status)``."""

    def __init__(self, *, name: str, cookie: bytes, flags: int, creation: int) -> None:
        self.name = name
        self.cookie = cookie
        self.flags = flags
        self.creation = creation
        self.state = "await_name"
        self.peer = ""
        self.peer_flags = 0
        self.peer_creation = 0
        self.peer_version = 6
        self._challenge = _new_challenge()
        self._status = ""

    @property
    def done(self) -> bool:
        return self.state == "done"

    @property
    def needs_decision(self) -> bool:
        return self.state == "await_decision"

    def receive(self, packet: bytes) -> list[bytes]:
        if not packet:
            raise HandshakeError(f"empty handshake packet from {self.peer or 'a dialling node'}")
        tag = packet[:1]
        if self.state == "await_name" and tag in (b"N", b"n"):
            self._on_name(packet)
            return []
        if self.state == "await_alive_answer" and tag == b"s":
            if packet[1:] == b"true":
                return self._challenge_packet()
            self.state = "aborted"
            return []
        if self.state == "await_complement" and tag == b"c":
            _, high, creation = _complement.unpack_from(packet)
            self.peer_flags = expand(self.peer_flags | high << 32)
            self.peer_creation = creation
            self.state = "await_reply"
            return []
        if self.state == "await_reply" and tag == b"r":
            return self._on_reply(packet)
        raise HandshakeError(
            f"unexpected handshake packet {packet[:1]!r} from {self.peer or 'a dialling node'} in state {self.state}"
        )

    def _on_name(self, packet: bytes) -> None:
        if packet[:1] == b"N":
            _, flags, creation, nlen = _name_v6.unpack_from(packet)
            self.peer = packet[_name_v6.size : _name_v6.size + nlen].decode(errors="replace")
            self.peer_version = 6
        else:
            _, _version, flags = _name_v5.unpack_from(packet)
            self.peer = packet[_name_v5.size :].decode(errors="replace")
            creation = 0
            self.peer_version = 5
        if "@" not in self.peer:
            raise HandshakeError(f"a dialling node sent the malformed name {self.peer!r}")
        self.peer_flags = flags
        self.peer_creation = creation
        self.state = "await_decision"

    def decide(self, status: str) -> list[bytes]:
        """Answer the name with ``ok``, ``ok_simultaneous``, ``nok``, ``alive`` or ``not_allowed``."""
        lacking = missing(self.peer_flags, REQUIRED_FLAGS)
        if lacking and status != "nok":
            self.state = "aborted"
            self.refusal = f"node {self.peer} cannot handle {describe(lacking)}; refused"
            return [b"snot_allowed"]
        self._status = status
        out = [b"s" + status.encode()]
        if status in ("nok", "not_allowed"):
            self.state = "aborted"
            return out
        if status == "alive":
            self.state = "await_alive_answer"
            return out
        return out + self._challenge_packet()

    refusal = ""

    def _challenge_packet(self) -> list[bytes]:
        name = self.name.encode()
        v6 = self.peer_version >= 6 or bool(self.peer_flags & Flag.HANDSHAKE_23)
        if v6:
            self.state = "await_reply" if self.peer_version >= 6 else "await_complement"
            packet = _challenge_v6.pack(b"N", self.flags, self._challenge, self.creation, len(name)) + name
        else:
            self.state = "await_reply"
            packet = _challenge_v5.pack(b"n", 5, self.flags & 0xFFFFFFFF, self._challenge) + name
        if self.peer_version >= 6:
            self.peer_flags = expand(self.peer_flags)
        return [packet]

    def _on_reply(self, packet: bytes) -> list[bytes]:
        _, peer_challenge = _reply.unpack_from(packet)
        if packet[_reply.size : _reply.size + 16] != digest(self._challenge, self.cookie):
            raise CookieMismatch(f"node {self.peer} sent a wrong challenge digest: the cookies differ")
        self.state = "done"
        self.peer_flags = expand(self.peer_flags)
        return [b"a" + digest(peer_challenge, self.cookie)]
