"""Holder tags (a pylmq extension): which client a message's delivery went to, by name.

A pull-many may name its caller with a *holder tag*; the node remembers, for each message it
delivered, the tag it went to, so that a caller that lost the ids it was given (a stream
reader killed between its pull and the write of the offset naming them) can take them all
back by the tag alone (:meth:`QueueManager.claim_holder
<pylmq.core.manager.QueueManager.claim_holder>`).

A record lives as long as its delivery: an ack or nack through this node drops it; one whose
delivery ended otherwise (deadline passed and redelivered under a new uuid, answered through
another node) stays until a claim by its tag finds it gone or the book, full, drops its oldest
records. A put-back (the caller left before it had the answer) keeps it: put back, a message
sorts behind the ones pushed before the put-back, and a stream reader killed during its
pull-many claims it back by the tag, first, when it restarts. The book is bounded:
:data:`MAX_RECORDS` records and :data:`MAX_HOLDERS` tags per queue, the least recently used
tag going first.

Kept in memory only: a node restart forgets every tag (the messages themselves stay and come
back by their deadline as before); journaling the tags is left for later.
"""

from __future__ import annotations

from collections.abc import Iterable

from pylmq.errors import BadRequest

__all__ = ["MAX_HOLDERS", "MAX_HOLDER_LENGTH", "MAX_RECORDS", "HolderBook", "check_holder"]

MAX_HOLDER_LENGTH = 64
MAX_HOLDERS = 1024
"""Distinct tags remembered per queue."""
MAX_RECORDS = 200_000
"""Deliveries remembered per queue (about 150 bytes each: 30 MB at most)."""


def check_holder(tag: object) -> str:
    """``tag`` as a holder tag: 1 to :data:`MAX_HOLDER_LENGTH` printable ASCII characters, no
    space (it travels in a query string and in logs)."""
    if not isinstance(tag, str) or not 1 <= len(tag) <= MAX_HOLDER_LENGTH:
        raise BadRequest(f"a holder tag is 1 to {MAX_HOLDER_LENGTH} printable ASCII characters, got {tag!r:.80}")
    if not (tag.isascii() and tag.isprintable()) or " " in tag:
        raise BadRequest(f"a holder tag is printable ASCII without spaces, got {tag!r:.80}")
    return tag


class HolderBook:
    """One queue's records: delivery uuid -> tag, and per tag its uuids in delivery order."""

    __slots__ = ("_by_holder", "_by_uuid", "max_holders", "max_records")

    def __init__(self, max_records: int = MAX_RECORDS, max_holders: int = MAX_HOLDERS) -> None:
        self.max_records = max_records
        self.max_holders = max_holders
        # Both dicts keep insertion order: the oldest record, the least recently used tag first.
        self._by_uuid: dict[bytes, str] = {}
        self._by_holder: dict[str, dict[bytes, None]] = {}

    def __len__(self) -> int:
        return len(self._by_uuid)

    def holders(self) -> list[str]:
        return list(self._by_holder)

    def record(self, holder: str, uuids: Iterable[bytes]) -> None:
        """These deliveries went to ``holder``."""
        by_holder, by_uuid = self._by_holder, self._by_uuid
        own = by_holder.pop(holder, None)
        if own is None:
            while len(by_holder) >= self.max_holders:
                self._drop_holder(next(iter(by_holder)))
            own = {}
        by_holder[holder] = own  # last now: the most recently used tag
        for u in uuids:
            old = by_uuid.pop(u, None)
            if old is not None and old != holder:
                self._unlink(old, u)
            by_uuid[u] = holder
            own[u] = None
        while len(by_uuid) > self.max_records:
            u = next(iter(by_uuid))
            self._unlink(by_uuid.pop(u), u)

    def of(self, holder: str) -> list[bytes]:
        """The uuids recorded for ``holder``, oldest delivery first."""
        own = self._by_holder.get(holder)
        return list(own) if own else []

    def forget(self, uuids: Iterable[bytes]) -> None:
        """These deliveries are over (answered, or found gone)."""
        by_uuid = self._by_uuid
        for u in uuids:
            holder = by_uuid.pop(u, None)
            if holder is not None:
                self._unlink(holder, u)

    def _unlink(self, holder: str, u: bytes) -> None:
        own = self._by_holder.get(holder)
        if own is not None:
            own.pop(u, None)
            if not own:
                del self._by_holder[holder]

    def _drop_holder(self, holder: str) -> None:
        for u in self._by_holder.pop(holder):
            self._by_uuid.pop(u, None)
