"""The durable store's write buffer: the journal records the tables make, until the store writes
them out as one group (see :mod:`pylmq.store.durable`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from pylmq.core.message import Item, StoredMessage
from pylmq.store.journal import Encoder

__all__ = ["WriteBuffer", "wake_all"]


class WriteBuffer:
    """The :class:`~pylmq.core.table.Journal` the tables write to: frames into the buffer."""

    __slots__ = ("buf", "carry", "carry_bytes", "enc", "failed", "kick", "waiters")

    def __init__(self) -> None:
        self.enc = Encoder()
        self.buf = bytearray()
        # Frames since a compaction froze the state: they go into the new segment as well.
        self.carry: list[bytes] | None = None
        self.carry_bytes = 0
        # One future per barrier() waiting for the records in buf (the next group).
        self.waiters: list[asyncio.Future[None]] = []
        # Called when the buffer stops being empty: the store then writes it out soon.
        self.kick: Callable[[], None] | None = None
        self.failed = False

    def add(self, frame: bytes) -> None:
        if self.failed:
            return
        if not self.buf and self.kick is not None:
            self.kick()
        self.buf += frame
        if self.carry is not None:
            self.carry.append(frame)
            self.carry_bytes += len(frame)

    def put(self, queue: str, msg: StoredMessage) -> None:
        self.add(self.enc.put(queue, msg))

    def move(self, queue: str, old_uuid: bytes, msg: StoredMessage) -> None:
        self.add(self.enc.move(queue, old_uuid, msg))

    def append(self, queue: str, uuid: bytes, item: Item) -> None:
        self.add(self.enc.append(queue, uuid, item))

    def delete(self, queue: str, uuid: bytes) -> None:
        self.add(self.enc.delete(queue, uuid))

    def transfer(self, from_queue: str, uuid: bytes, to_queue: str, msg: StoredMessage) -> None:
        # One frame: replay sees the record in one queue or the other, never both or neither.
        self.add(self.enc.transfer(from_queue, uuid, to_queue, msg))


def wake_all(waiters: list[asyncio.Future[None]]) -> None:
    for fut in waiters:
        if not fut.done():  # cancelled: its client went away
            fut.set_result(None)
