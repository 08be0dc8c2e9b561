"""One pushed thing as it travels and is stored: its headers (metadata) and its body.

The server keeps items in message records (:mod:`pylmq.core.message`) and the client decodes
them from answers, so the shape lives below both.
"""

from __future__ import annotations

__all__ = ["DEFAULT_CONTENT_TYPE", "Item", "Metadata", "content_type_of", "make_item"]

DEFAULT_CONTENT_TYPE = b"application/octet-stream"

Metadata = tuple[tuple[bytes, bytes], ...]
"""Headers stored with a body, e.g. ``((b"content-type", b"text/plain"),)``."""

Item = tuple[Metadata, bytes]
"""One pushed thing: its metadata and its body."""

_md_cache: dict[bytes, Metadata] = {}


def make_item(body: bytes, content_type: bytes | str | None = None) -> Item:
    """An item with a content-type header; identical metadata tuples are shared."""
    if content_type is None:
        return ((), body)
    ct = content_type.encode("latin-1") if isinstance(content_type, str) else content_type
    md = _md_cache.get(ct)
    if md is None:
        md = ((b"content-type", ct),)
        if len(_md_cache) < 1024:
            _md_cache[ct] = md
    return (md, body)


def content_type_of(item: Item) -> bytes:
    for k, v in item[0]:
        if k.lower() == b"content-type":
            return v
    return DEFAULT_CONTENT_TYPE
