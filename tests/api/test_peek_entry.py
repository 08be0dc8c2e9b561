"""The peek view of a record: LMQ's fields, the extension's where they apply, bodies as asked."""

from __future__ import annotations

import base64

from pylmq.api.peek import peek_entry
from pylmq.core.message import (
    DeadLetter,
    MessageExt,
    State,
    StoredMessage,
    StoredMessageType,
    make_item,
    uuid_text,
)

U = bytes(range(16))


def _msg(content: object, ext: MessageExt | None = None, compound: bool = False) -> StoredMessage:
    kind = StoredMessageType.COMPOUND if compound else StoredMessageType.NORMAL
    return StoredMessage((100.5, U), State.AVAILABLE, kind, 3, content, ext)  # type: ignore[arg-type]


def test_a_plain_record_shows_lmqs_fields_and_no_body() -> None:
    entry = peek_entry(_msg(make_item(b"hello", b"text/plain")))
    assert entry == {
        "id": uuid_text(U),
        "state": "available",
        "retry": 3,
        "attempts": 0,
        "ts": 100.5,
        "expires": None,
        "priority": 0,
        "size": len(b"hello") + len(b"content-type") + len(b"text/plain"),
        "type": "normal",
        "content_type": "text/plain",
    }


def test_ext_fields_and_dead_letter_provenance() -> None:
    ext = MessageExt(expires=200.0, priority=9, attempts=4, dead=DeadLetter("orders", 4, 99.0, "retries"))
    entry = peek_entry(_msg(make_item(b"x"), ext))
    assert (entry["attempts"], entry["expires"], entry["priority"]) == (4, 200.0, 9)
    assert entry["dead"] == {"origin": "orders", "failures": 4, "last_delivery": 99.0, "reason": "retries"}
    assert entry["content_type"] == "application/octet-stream"


def test_bodies_are_text_when_utf8_else_base64() -> None:
    assert peek_entry(_msg(make_item("héllo".encode())), body=True)["body"] == "héllo"
    entry = peek_entry(_msg(make_item(b"\xff\x00")), body=True)
    assert "body" not in entry and base64.b64decode(entry["body_base64"]) == b"\xff\x00"
    assert peek_entry(_msg(make_item(b"\xff")), body=True, raw=True)["body"] == b"\xff"


def test_compound_records_show_their_parts() -> None:
    entry = peek_entry(_msg([make_item(b"a", b"text/plain"), make_item(b"\xfe")], compound=True), body=True)
    assert entry["type"] == "compound" and entry["content_type"] is None
    assert entry["parts"] == [
        {"content_type": "text/plain", "body": "a"},
        {"content_type": "application/octet-stream", "body_base64": "/g=="},
    ]
