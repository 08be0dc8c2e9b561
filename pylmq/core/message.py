"""The message record of docs/lmq-contract.md#the-message-record, and its ids.

A record is ``(id, state, type, retry, content)`` where ``id = (ts, uuid)``: ``ts`` is a float of
Unix seconds (the time the record becomes deliverable) and ``uuid`` 16 random bytes (v4). The
queue is ordered by id, so the first record decides delivery.
"""

from __future__ import annotations

import enum
import os
import re
import uuid as _uuid
from dataclasses import dataclass
from typing import Final, Literal

# The item shape is shared with the clients, so it lives in the wire formats; re-exported here.
from pylmq.wire.items import DEFAULT_CONTENT_TYPE, Item, Metadata, content_type_of, make_item

__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "MSG_KEY_BITS",
    "Content",
    "DeadLetter",
    "DeadReason",
    "DedupClaim",
    "Inherit",
    "Item",
    "MessageExt",
    "MessageId",
    "Metadata",
    "PushOptions",
    "Retry",
    "State",
    "StoredMessage",
    "StoredMessageType",
    "content_type_of",
    "make_item",
    "msg_key",
    "new_uuid",
    "parse_uuid",
    "uuid_text",
]

Content = Item | list[Item]
"""A normal message holds one item; a compound message a list of them."""

Retry = int | None
"""Deliveries still allowed; ``None`` is LMQ's ``infinity``."""

MessageId = tuple[float, bytes]


class State(enum.Enum):
    AVAILABLE = "available"
    PROCESSING = "processing"
    ACCUM = "accum"


class StoredMessageType(enum.Enum):
    NORMAL = "normal"
    COMPOUND = "compound"


DeadReason = Literal["retries", "expired"]


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Where a dead letter came from: its origin queue, how many deliveries failed, when the
    last one was, and why it died (``retries`` spent, or ``expired`` after a delivery)."""

    origin: str
    failures: int
    last_at: float | None
    reason: DeadReason


@dataclass(frozen=True, slots=True)
class MessageExt:
    """What a pylmq record holds beyond LMQ's five fields (docs/message-options.md): absolute
    ``expires`` (queue_server's ttl), a per-message redelivery ``interval`` that replaces the
    queue's timeout, a ``priority`` among due messages (higher first), ``once`` (at-most-once:
    one delivery, never redelivered nor dead-lettered), the delivery count and times, the push
    time, and dead-letter provenance. Records without any of this keep ``ext=None``: exactly
    LMQ's record, in the compact form."""

    expires: float | None = None
    interval: float | None = None
    priority: int = 0
    once: bool = False
    attempts: int = 0
    first_at: float | None = None
    last_at: float | None = None
    sent_at: float | None = None
    dead: DeadLetter | None = None
    hard: bool = False
    """``expires`` is a hard expiry (SQS's MessageRetentionPeriod): once it has come the record
    is never delivered again, not even once, and is dropped, never dead-lettered."""
    group: str | None = None
    """A message group (SQS FIFO's MessageGroupId): the table delivers the records of a group in
    ``seq`` order, one at a time (docs/message-options.md#message-groups)."""
    seq: int = 0
    """The record's place in its table's push order, kept for the records of a group (their
    order is this, not their ids: a record made visible again keeps its place)."""


@dataclass(frozen=True, slots=True)
class DedupClaim:
    """An SQS FIFO deduplication key as a send takes it: when, and the answer a duplicate of
    it gets (its MessageId and SequenceNumber)."""

    key: str
    sent: float
    message_id: str
    sequence: str


class Inherit(enum.Enum):
    """A push option left to the queue's property."""

    QUEUE = "queue"


@dataclass(frozen=True, slots=True)
class PushOptions:
    """Per-message options of a push (HTTP/RPC extensions, queue_server's produce, SQS). All
    times are absolute Unix seconds on the node's clock. ``not_before`` None means now;
    ``retry`` is deliveries after the first (None: unlimited), or the queue's ``retry``."""

    not_before: float | None = None
    expires: float | None = None
    interval: float | None = None
    retry: Retry | Inherit = Inherit.QUEUE
    priority: int = 0
    once: bool = False
    track: bool = False
    """Keep the delivery count and times (a :class:`MessageExt`) even on a queue without a
    dead-letter queue: for a front end that reports them (SQS's ApproximateReceiveCount)."""
    hard: bool = False
    """``expires`` is a hard expiry (:attr:`MessageExt.hard`): it may come before the message is
    due (SQS counts retention from the send), and once it has come nothing is delivered."""
    group: str | None = None
    """The message's group (:attr:`MessageExt.group`): one of a group in processing at a time."""
    dedup: DedupClaim | None = None
    """The SQS FIFO deduplication id this push takes. A store shared by several nodes records it
    in the push's own transaction and refuses the push with :class:`~pylmq.errors.Duplicate`
    when another send took it within the window; a node's own store ignores it (the SQS layer's
    check before the push is atomic there)."""

    def needs_ext(self) -> bool:
        """Whether a record pushed with these options needs a :class:`MessageExt` (a delay
        alone, or a retry alone, fits LMQ's record)."""
        return (
            self.expires is not None
            or self.interval is not None
            or self.priority != 0
            or self.once
            or self.group is not None
        )


@dataclass(slots=True, eq=True)
class StoredMessage:
    """A message as a queue holds it (LMQ's ``#message`` record): its id (time and uuid), state,
    type, retries left and content, plus pylmq's :class:`MessageExt` where one applies. Clients
    get their own view of a delivery, :class:`pylmq.client.Message`."""

    id: MessageId
    state: State
    type: StoredMessageType
    retry: Retry
    content: Content
    ext: MessageExt | None = None

    @property
    def ts(self) -> float:
        return self.id[0]

    @property
    def uuid(self) -> bytes:
        return self.id[1]

    def items(self) -> list[Item]:
        """The content as a list of items, whatever the type."""
        if self.type is StoredMessageType.COMPOUND:
            assert isinstance(self.content, list)
            return self.content
        assert isinstance(self.content, tuple)
        return [self.content]

    def nbytes(self) -> int:
        """Approximate payload size (bodies and metadata), for `status` and `/stats`."""
        return sum(len(body) + sum(len(k) + len(v) for k, v in md) for md, body in self.items())


# Random v4 uuids, drawn in blocks: one urandom call per 1024 ids instead of one each, and the
# version and variant bits set for the whole block at once with two big-int operations.
_BLOCK = 1024
_V4_AND = int.from_bytes(bytes.fromhex("ffffffffffff0fff3fffffffffffffff") * _BLOCK, "big")
_V4_OR = int.from_bytes(bytes.fromhex("00000000000040008000000000000000") * _BLOCK, "big")
_pool: list[bytes] = []


def new_uuid() -> bytes:
    if not _pool:
        n = 16 * _BLOCK
        raw = ((int.from_bytes(os.urandom(n), "big") & _V4_AND) | _V4_OR).to_bytes(n, "big")
        _pool.extend([raw[i : i + 16] for i in range(0, n, 16)])
    return _pool.pop()


MSG_KEY_BITS: Final = 53
"""Bits of a uuid that make its integer key (:func:`msg_key`): small enough for a JSON number
that every client parses exactly (queue_server's protocol has integer message ids)."""
_MSG_KEY_MASK: Final = (1 << MSG_KEY_BITS) - 1


def msg_key(u: bytes) -> int:
    """The integer key of a uuid: its last 53 bits (random in a v4 uuid). Tables index
    processing records by it and keep it unique among them; queue_server's ``msg_id``."""
    return int.from_bytes(u[8:16], "big") & _MSG_KEY_MASK


def uuid_text(u: bytes) -> str:
    """The id as LMQ prints it: canonical lower-case UUID text."""
    h = u.hex()
    return f"{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


_CANONICAL_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def parse_uuid(text: str | bytes) -> bytes | None:
    """Parse UUID text (as sent back in ack/nack/ext); ``None`` when it is not one."""
    if isinstance(text, bytes):
        if len(text) == 16:
            return text
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            return None
    if len(text) == 36 and _CANONICAL_UUID.fullmatch(text):
        return bytes.fromhex(text.replace("-", ""))  # what LMQ hands out: the common case
    try:
        return _uuid.UUID(text).bytes
    except (ValueError, AttributeError, TypeError):
        return None
