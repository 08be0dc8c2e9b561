"""The server's side of a batch pull answer: deliveries as the maps :mod:`pylmq.wire.batch` describes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from pylmq.api.peek import dead_fields
from pylmq.core.message import StoredMessageType, content_type_of, uuid_text
from pylmq.core.queue import Delivery

__all__ = ["encode_deliveries"]


def _delivery_map(d: Delivery) -> dict[str, Any]:
    msg = d.message
    out: dict[str, Any] = {
        "queue": d.queue,
        "id": uuid_text(msg.uuid),
        "type": msg.type.value,
        "retry": "infinity" if msg.retry is None else msg.retry,
    }
    ext = msg.ext
    if ext is not None:  # pylmq's fields, only where a record has them (docs/http-api-extensions.md)
        out["attempts"] = ext.attempts
        if ext.dead is not None:
            out["dead"] = dead_fields(ext.dead)
    items = msg.items()
    if msg.type is StoredMessageType.COMPOUND:
        out["parts"] = [[content_type_of(i).decode("latin-1"), i[1]] for i in items]
    else:
        out["content_type"] = content_type_of(items[0]).decode("latin-1")
        out["body"] = items[0][1]
    return out


def encode_deliveries(deliveries: Sequence[Delivery]) -> bytes:
    data: bytes = msgpack.packb([_delivery_map(d) for d in deliveries], use_bin_type=True)
    return data
