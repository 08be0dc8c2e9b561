"""The `memory` store: LMQ's own behaviour (Mnesia ``ram_copies``): nothing survives a restart."""

from __future__ import annotations

from pylmq.store.local import LocalStore

__all__ = ["MemoryStore"]


class MemoryStore(LocalStore):
    kind = "memory"
