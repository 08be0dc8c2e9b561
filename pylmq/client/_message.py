"""What a pull returns: :class:`Message` over HTTP, :class:`RpcMessage` over MessagePack-RPC.

The two APIs deliver different things. HTTP hands back the pushed bytes with their headers;
MessagePack-RPC hands back the pushed *value* (the server re-packs what it was given). Each gets
its own plain record instead of one type with fields that are meaningless half the time.
Both are data only: acknowledging is a client call (``ack(msg.queue, msg.id)``), so a message
can be handed to another process or thread and answered from anywhere.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, Literal, NamedTuple, TypeVar

from pylmq.client._options import DeadLetterInfo

__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "ClaimResult",
    "Message",
    "MessageType",
    "Part",
    "PullFormat",
    "ReplyMany",
    "ReplyResult",
    "RpcMessage",
]

DEFAULT_CONTENT_TYPE = "application/octet-stream"

MessageType = Literal["normal", "compound"]
ReplyMany = Literal["ack", "nack", "ext"]
"""The reply :meth:`reply_many` gives every id."""
PullFormat = Literal["multipart", "msgpack"]
"""How the HTTP API encodes a compound message (``cf`` query parameter)."""


class Part(NamedTuple):
    """One pushed item of a compound message: its headers (lower-case names) and its body."""

    headers: dict[str, str]
    body: bytes

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", DEFAULT_CONTENT_TYPE)


@dataclass(frozen=True, slots=True)
class Message:
    """A message delivered by the HTTP API.

    ``id`` is this delivery's id (UUID text): every delivery carries a fresh one, so ack, nack
    and ext must use the id of the delivery being answered. ``retry`` is how many more
    deliveries are allowed (``None``: infinity). For a normal message ``body`` is the pushed
    body and ``content_type`` its content-type. For a compound message (accumulated pushes)
    ``parts`` holds one :class:`Part` per push, in push order; ``body`` and ``content_type``
    are then the raw encoded response (``multipart/mixed`` or ``application/x-msgpack``).

    pylmq's extensions: ``attempts`` counts the deliveries so far, this one included, of a
    message pushed with options (or to a queue with a dead-letter queue), else None; ``dead``
    is set on a dead letter: where it came from and why.
    """

    queue: str
    id: str
    type: MessageType
    retry: int | None
    content_type: str
    body: bytes
    parts: tuple[Part, ...] = field(default=())
    attempts: int | None = None
    dead: DeadLetterInfo | None = None


@dataclass(frozen=True, slots=True)
class RpcMessage:
    """A message delivered by the MessagePack-RPC API.

    ``content`` is the value that was pushed (bytes, str, numbers, lists, maps...). For a
    compound message (``type == "compound"``, LMQ's ``"package"``) it is the list of the pushed
    values, in push order. ``attempts`` and ``dead`` as in :class:`Message`.
    """

    queue: str
    id: str
    type: MessageType
    retry: int | None
    content: Any
    attempts: int | None = None
    dead: DeadLetterInfo | None = None


@dataclass(frozen=True, slots=True)
class ReplyResult:
    """What ``reply_many`` did (a pylmq extension): the ids answered, and those that name no
    message in processing (unknown, expired and redelivered, or answered before), as sent."""

    ok: tuple[str, ...]
    not_found: tuple[str, ...]


M = TypeVar("M", Message, RpcMessage)


@dataclass(frozen=True, slots=True)
class ClaimResult(Generic[M]):
    """What ``claim`` took back (a pylmq extension): the messages, in the order asked, each
    with the id it was claimed by (same id, same retry, a new deadline), and the ids that name
    no message in processing or available under that id (acked, redelivered, unknown). The
    ids in ``later`` were left alone because the answer reached the node's size bound (16 MiB
    of payload): claim them again."""

    messages: tuple[M, ...]
    not_found: tuple[str, ...]
    later: tuple[str, ...] = ()
