"""How a record's content is kept in ``lmq.message.content``: MessagePack, one item as
``[metadata, body]`` (metadata an array of ``[key, value]`` byte pairs). A compound record's
items are such values one after another, with no array around them, so that accumulation
appends an item with ``content || item`` in SQL without reading the record back."""

from __future__ import annotations

from typing import Any, cast

import msgpack

from pylmq.core.message import Content, Item

__all__ = ["decode_content", "encode_item", "item_nbytes"]


def encode_item(item: Item) -> bytes:
    return cast(bytes, msgpack.packb(item, use_bin_type=True))


def item_nbytes(item: Item) -> int:
    """The item's payload bytes, as :meth:`StoredMessage.nbytes` counts them."""
    md, body = item
    return len(body) + sum(len(k) + len(v) for k, v in md)


def _item(value: Any) -> Item:
    # use_list=False gives tuples: the metadata tuple of pairs and the (md, body) item as pushed.
    return cast(Item, value)


def decode_content(data: bytes, compound: bool) -> Content:
    if not compound:
        return _item(msgpack.unpackb(data, use_list=False, raw=False))
    unpacker = msgpack.Unpacker(use_list=False, raw=False, max_buffer_size=max(len(data), 1))
    unpacker.feed(data)
    return [_item(v) for v in unpacker]
