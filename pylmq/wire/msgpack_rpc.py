"""MessagePack-RPC framing without I/O, for both ends of a connection.

The wire format (msgpack-rpc spec) is a stream of msgpack arrays with no other framing:

- request ``[0, msgid, method, params]``
- response ``[1, msgid, error, result]`` (``error`` nil on success)
- notification ``[2, method, params]``

:class:`Decoder` is fed bytes as they arrive and returns the complete messages they finish, as
:class:`Request`, :class:`Response` and :class:`Notification` values; a server uses the first
and last, a client the middle one. A frame that is msgpack but not a message becomes
:class:`Invalid` (the stream stays usable); bytes that are not msgpack, or a frame larger than
``max_message_size``, end the stream with an :class:`Invalid` whose ``fatal`` is true. Either
way ``msgid`` is the request's id whenever it could be read, so the server can answer it before
closing. :attr:`Decoder.pending` is how many bytes of a frame not yet whole it holds (a
server charges them to its budget), and a decoder lets go of its buffer once it is broken or
:meth:`Decoder.discard` ed, and after a large frame (the unpacker's buffer never shrinks: an idle
connection would keep the largest frame it ever received). The ``encode_*`` functions build
frames; :func:`encode_result_raw` embeds an already encoded result (the server stores pushed
content as msgpack and sends it back untouched).

pylmq puts errors in the error slot as ``[reason, detail]``: ``reason`` the short
:attr:`pylmq.errors.LMQError.reason` (``not_found``, ``queue_not_found``, ``invalid_props`` ...),
``detail`` a sentence for humans. :func:`error_parts` reads that shape, and Erlang LMQ's
(a bare reason), back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Final

import msgpack

from pylmq.errors import MAX_DETAIL, BadMessage, LMQError, MessageTooLarge, shown_detail

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "MAX_DETAIL",
    "MAX_MSGID",
    "NOTIFICATION",
    "REQUEST",
    "RESPONSE",
    "Decoder",
    "Event",
    "Invalid",
    "Notification",
    "Request",
    "Response",
    "encode_error",
    "encode_notification",
    "encode_request",
    "encode_response",
    "encode_result_raw",
    "error_parts",
    "pack",
    "peek_msgid",
]

REQUEST: Final = 0
RESPONSE: Final = 1
NOTIFICATION: Final = 2

DEFAULT_MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024
MAX_MSGID: Final = 2**32 - 1

# Invalid UTF-8 inside a msgpack str survives a decode/encode round trip byte for byte.
_UNICODE_ERRORS: Final = "surrogateescape"
# Enough of a frame's start to read its array header, type and msgid (1 + 9 + 9 bytes at most).
_HEAD: Final = 20
# Bytes handed to the unpacker at once; bounds how far past the limit a buffer can grow.
_SLICE: Final = 1 << 20
# A frame at least this large is followed, once nothing else is pending, by a new unpacker.
_SHRINK_AFTER: Final = 1 << 20


_local = threading.local()


def pack(obj: Any) -> bytes:
    """msgpack with str as str and bytes as bin (the 2013 spec every current client reads)."""
    # A Packer per thread: packb builds one per call, which costs more than the packing of
    # the small values replies are made of. Packers are not thread-safe, hence per thread.
    try:
        packer = _local.packer
    except AttributeError:
        packer = _local.packer = msgpack.Packer(use_bin_type=True, unicode_errors=_UNICODE_ERRORS)
    return packer.pack(obj)  # type: ignore[no-any-return]


@dataclass(slots=True, frozen=True)
class Request:
    msgid: int
    method: str
    params: list[Any] | tuple[Any, ...]


@dataclass(slots=True, frozen=True)
class Response:
    msgid: int
    error: Any
    result: Any


@dataclass(slots=True, frozen=True)
class Notification:
    method: str
    params: list[Any] | tuple[Any, ...]


@dataclass(slots=True, frozen=True)
class Invalid:
    """A frame that is not a valid message. ``fatal``: the byte stream itself is broken (not
    msgpack, or too large) and nothing after it can be read."""

    msgid: int | None
    error: LMQError
    fatal: bool


Event = Request | Response | Notification | Invalid


def _is_int(x: Any) -> bool:
    return type(x) is int


def _is_name(x: Any) -> bool:
    return type(x) is str or type(x) is bytes


def _method(x: Any) -> str:
    return x if type(x) is str else bytes(x).decode("utf-8", _UNICODE_ERRORS)


def _classify(obj: Any) -> Event:
    """One decoded msgpack object as a message (the shapes of the msgpack-rpc spec)."""
    if type(obj) is not list and type(obj) is not tuple:
        return Invalid(None, BadMessage(f"a message must be an array, got {type(obj).__name__}"), False)
    n = len(obj)
    kind = obj[0] if n else None
    if kind == REQUEST and _is_int(kind):
        msgid = obj[1] if n > 1 and _is_int(obj[1]) else None
        if n != 4 or msgid is None:
            return Invalid(msgid, BadMessage("a request must be [0, msgid, method, params]"), False)
        method, params = obj[2], obj[3]
        if not _is_name(method):
            return Invalid(msgid, BadMessage(f"method must be a string, got {type(method).__name__}"), False)
        if type(params) is not list and type(params) is not tuple:
            return Invalid(msgid, BadMessage(f"params must be an array, got {type(params).__name__}"), False)
        return Request(msgid, _method(method), params)
    if kind == NOTIFICATION and _is_int(kind):
        if n != 3 or not _is_name(obj[1]) or (type(obj[2]) is not list and type(obj[2]) is not tuple):
            return Invalid(None, BadMessage("a notification must be [2, method, params]"), False)
        return Notification(_method(obj[1]), obj[2])
    if kind == RESPONSE and _is_int(kind):
        if n != 4 or not _is_int(obj[1]):
            return Invalid(None, BadMessage("a response must be [1, msgid, error, result]"), False)
        return Response(obj[1], obj[2], obj[3])
    return Invalid(None, BadMessage(f"unknown message type {kind!r}"), False)


def _read_uint(head: bytes, i: int) -> tuple[int, int] | None:
    """A non-negative msgpack int at ``head[i:]``: (value, next index), or None."""
    if i >= len(head):
        return None
    b = head[i]
    if b <= 0x7F:
        return b, i + 1
    size = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4, 0xD3: 8}.get(b)
    if size is None or i + 1 + size > len(head):
        return None
    v = int.from_bytes(head[i + 1 : i + 1 + size], "big", signed=b >= 0xD0)
    return (v, i + 1 + size) if v >= 0 else None


def peek_msgid(head: bytes) -> int | None:
    """The msgid of a request from the first bytes of its frame, or None if they do not start
    ``[0, msgid, ...]`` with four elements. Used when the rest cannot be decoded."""
    if not head:
        return None
    b = head[0]
    if b == 0x94:
        i = 1
    elif b == 0xDC and head[1:3] == b"\x00\x04":
        i = 3
    elif b == 0xDD and head[1:5] == b"\x00\x00\x00\x04":
        i = 5
    else:
        return None
    kind = _read_uint(head, i)
    if kind is None or kind[0] != REQUEST:
        return None
    msgid = _read_uint(head, kind[1])
    return None if msgid is None else msgid[0]


class Decoder:
    """Turns a byte stream into messages; one per connection.

    ``use_list`` False decodes arrays as tuples, which is faster and also accepts maps whose
    keys are arrays (a server re-packs pushed content, so tuples lose nothing there).
    """

    def __init__(self, *, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE, use_list: bool = True) -> None:
        if max_message_size < 16:
            raise ValueError("max_message_size must be at least 16 bytes")
        self.max_message_size = max_message_size
        self._use_list = use_list
        self._unpacker = self._new_unpacker()
        self._fed = 0
        self._pos = 0
        # The first bytes of the frame still incomplete after the last slice, and the stream
        # offset where it starts: enough to name its msgid if it later proves broken.
        self._head = b""
        self._head_pos = -1
        self.broken = False

    def _new_unpacker(self) -> msgpack.Unpacker:
        limit = self.max_message_size
        # The unpacker's own buffer limit counts unconsumed bytes plus the new slice, so it gets
        # one slice of slack; the frame limit is checked exactly in _feed_slice.
        return msgpack.Unpacker(
            max_buffer_size=limit + _SLICE,
            max_str_len=limit,
            max_bin_len=limit,
            max_array_len=limit,
            max_map_len=limit,
            max_ext_len=limit,
            raw=False,
            use_list=self._use_list,
            strict_map_key=False,
            unicode_errors=_UNICODE_ERRORS,
        )

    @property
    def pending(self) -> int:
        """Bytes held of a frame not yet whole."""
        return 0 if self.broken else self._fed - self._pos

    @property
    def pending_msgid(self) -> int | None:
        """The msgid of the frame not yet whole, when its first bytes name one."""
        return None if self.broken or not self.pending else peek_msgid(self._head)

    def discard(self) -> None:
        """Drop what is buffered and read nothing more (the connection is being closed)."""
        self.broken = True
        self._unpacker = None
        self._head = b""

    def feed(self, data: bytes) -> list[Event]:
        """The messages completed by ``data``. After a fatal :class:`Invalid` the decoder is
        broken and returns nothing more."""
        events: list[Event] = []
        if self.broken:
            return events
        if len(data) <= _SLICE:
            self._feed_slice(data, events)
        else:
            for i in range(0, len(data), _SLICE):
                if self.broken:
                    break
                self._feed_slice(data[i : i + _SLICE], events)
        return events

    def _feed_slice(self, data: bytes, events: list[Event]) -> None:
        chunk_start = self._fed
        unpacker = self._unpacker
        if self._head_pos >= 0 and len(self._head) < _HEAD:
            self._head += data[: _HEAD - len(self._head)]
        try:
            unpacker.feed(data)
        except msgpack.BufferFull:
            events.append(self._fatal(self._head, MessageTooLarge(self._too_large())))
            return
        self._fed += len(data)
        # tell() also counts a partly parsed frame, so the frame start is kept apart.
        pos = self._pos
        try:
            for obj in unpacker:
                end = unpacker.tell()
                if end - pos > self.max_message_size:
                    ev = _classify(obj)
                    msgid = ev.msgid if isinstance(ev, Request | Invalid) else None
                    self.discard()
                    events.append(Invalid(msgid, MessageTooLarge(self._too_large()), True))
                    return
                events.append(_classify(obj))
                pos = end
        except Exception as e:
            # Not msgpack at all (or a value Python cannot hold): the stream is lost from here.
            error: LMQError
            if isinstance(e, ValueError) and "exceeds max_" in str(e):
                error = MessageTooLarge(self._too_large())
            else:
                error = BadMessage(f"not a msgpack message: {type(e).__name__} {e}".rstrip())
            events.append(self._fatal(self._head_at(pos, chunk_start, data), error))
            return
        if pos == self._fed:
            self._head, self._head_pos = b"", -1
            if pos - self._pos >= _SHRINK_AFTER:
                self._unpacker = self._new_unpacker()
                self._fed = pos = 0
            self._pos = pos
            return
        self._pos = pos
        if pos != self._head_pos:
            self._head, self._head_pos = self._head_at(pos, chunk_start, data), pos
        if self._fed - pos > self.max_message_size:
            events.append(self._fatal(self._head, MessageTooLarge(self._too_large())))

    def _head_at(self, pos: int, chunk_start: int, data: bytes) -> bytes:
        """The first bytes of the frame starting at stream offset ``pos``."""
        if pos == self._head_pos:
            return self._head
        off = pos - chunk_start
        return data[off : off + _HEAD]

    def _too_large(self) -> str:
        return f"message larger than the limit of {self.max_message_size} bytes"

    def _fatal(self, head: bytes, error: LMQError) -> Invalid:
        msgid = peek_msgid(head)
        self.discard()
        return Invalid(msgid, error, True)


# -- encoding -----------------------------------------------------------------------------------


def encode_request(msgid: int, method: str, params: list[Any] | tuple[Any, ...]) -> bytes:
    if type(msgid) is not int or not 0 <= msgid <= MAX_MSGID:
        raise ValueError(f"msgid must be an integer in [0, 2**32), got {msgid!r}")
    return pack([REQUEST, msgid, method, list(params)])


def encode_notification(method: str, params: list[Any] | tuple[Any, ...]) -> bytes:
    return pack([NOTIFICATION, method, list(params)])


def encode_response(msgid: int, error: Any, result: Any) -> bytes:
    return pack([RESPONSE, msgid, error, result])


def encode_result_raw(msgid: int, result: bytes) -> bytes:
    """A success response whose result is already msgpack-encoded (spliced in as is)."""
    return b"\x94\x01" + pack(msgid) + b"\xc0" + result


def encode_error(msgid: int, error: LMQError) -> bytes:
    """An error response carrying ``[reason, detail]``; a detail that quotes a huge argument
    back is cut to :data:`MAX_DETAIL` characters (:func:`pylmq.errors.shown_detail`)."""
    return pack([RESPONSE, msgid, [error.reason, shown_detail(error.detail)], None])


def error_parts(error: Any) -> tuple[str, str]:
    """``(reason, detail)`` of an error slot: pylmq's ``[reason, detail]``, or a bare reason
    (Erlang LMQ), or anything else shown as text."""
    if isinstance(error, list | tuple) and len(error) == 2 and all(isinstance(x, str | bytes) for x in error):
        reason, detail = (x.decode("utf-8", "replace") if isinstance(x, bytes) else x for x in error)
        return reason, detail
    if isinstance(error, bytes):
        error = error.decode("utf-8", "replace")
    text = error if isinstance(error, str) else repr(error)
    return text, text
