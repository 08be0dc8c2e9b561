"""The server's side of a batch pull answer: deliveries as the maps :mod:`pylmq.wire.batch` describes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

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
