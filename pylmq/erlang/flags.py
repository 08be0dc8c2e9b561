"""Distribution capability flags (docs/erlang-distribution.md#flags) and their negotiation."""

from __future__ import annotations

import enum

__all__ = ["PYLMQ_FLAGS", "REQUIRED_FLAGS", "Flag", "describe", "expand", "missing"]


class Flag(enum.IntFlag):
    PUBLISHED = 0x1
    ATOM_CACHE = 0x2
    EXTENDED_REFERENCES = 0x4
    DIST_MONITOR = 0x8
    FUN_TAGS = 0x10
    DIST_MONITOR_NAME = 0x20
    HIDDEN_ATOM_CACHE = 0x40
    NEW_FUN_TAGS = 0x80
    EXTENDED_PIDS_PORTS = 0x100
    EXPORT_PTR_TAG = 0x200
    BIT_BINARIES = 0x400
    NEW_FLOATS = 0x800
    UNICODE_IO = 0x1000
    DIST_HDR_ATOM_CACHE = 0x2000
    SMALL_ATOM_TAGS = 0x4000
    UTF8_ATOMS = 0x10000
    MAP_TAG = 0x20000
    BIG_CREATION = 0x40000
    SEND_SENDER = 0x80000
    BIG_SEQTRACE_LABELS = 0x100000
    EXIT_PAYLOAD = 0x400000
    FRAGMENTS = 0x800000
    HANDSHAKE_23 = 0x1000000
    UNLINK_ID = 0x2000000
    # The protocol document says 1 bsl 36; every OTP code base uses bit 26 (docs/erlang-distribution.md#flags).
    MANDATORY_25_DIGEST = 0x4000000
    SPAWN = 1 << 32
    NAME_ME = 1 << 33
    V4_NC = 1 << 34
    ALIAS = 1 << 35


# The eleven flags the DIGEST bit stands for.
DIGEST_EXPANSION = (
    Flag.EXTENDED_REFERENCES
    | Flag.FUN_TAGS
    | Flag.EXTENDED_PIDS_PORTS
    | Flag.UTF8_ATOMS
    | Flag.NEW_FUN_TAGS
    | Flag.BIG_CREATION
    | Flag.NEW_FLOATS
    | Flag.MAP_TAG
    | Flag.EXPORT_PTR_TAG
    | Flag.BIT_BINARIES
    | Flag.HANDSHAKE_23
)

# Hidden (no PUBLISHED), no atom cache and no fragments (pass-through framing), no ALIAS (our call
# tags are plain refs), SPAWN so that OTP 25+ rpc:call/erpc into pylmq works.
PYLMQ_FLAGS = (
    DIGEST_EXPANSION
    | Flag.MANDATORY_25_DIGEST
    | Flag.DIST_MONITOR
    | Flag.DIST_MONITOR_NAME
    | Flag.EXIT_PAYLOAD
    | Flag.UNLINK_ID
    | Flag.SPAWN
    | Flag.V4_NC
)

# What our codec and control handling need from a peer: the OTP 23 mandatory set (our pids use
# NEW_PID_EXT with 32-bit creation, our atoms are UTF-8, our floats NEW_FLOAT_EXT).
REQUIRED_FLAGS = (
    Flag.EXTENDED_REFERENCES
    | Flag.EXTENDED_PIDS_PORTS
    | Flag.UTF8_ATOMS
    | Flag.NEW_FUN_TAGS
    | Flag.BIG_CREATION
    | Flag.NEW_FLOATS
)


def expand(flags: int) -> int:
    """The flag word with the DIGEST shorthand replaced by what it stands for."""
    if flags & Flag.MANDATORY_25_DIGEST:
        flags |= DIGEST_EXPANSION
    return flags


def missing(peer_flags: int, required: int = REQUIRED_FLAGS) -> int:
    return required & ~expand(peer_flags)


def describe(flags: int) -> list[str]:
    """Names of the set bits, for error messages (``["MAP_TAG", "UNLINK_ID"]``)."""
    return [f.name or hex(f.value) for f in Flag if flags & f.value]
