"""The two wire encodings of a compound (accumulated) message, as pure functions over bytes.

docs/lmq-contract.md#compound-messages-on-the-wire: ``cf=multipart`` (the default) sends the
items as ``multipart/mixed`` with the message id as boundary; ``cf=msgpack`` sends an
``application/x-msgpack`` array of
``[{headers}, body]`` pairs. In both, every item's headers carry a content-type, defaulted to
``application/octet-stream`` when the item was pushed without one. Decoders are here too so the
client and the tests read exactly what the server writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgpack

from pylmq.errors import BadRequest
from pylmq.wire.items import DEFAULT_CONTENT_TYPE, Item, Metadata

__all__ = [
    "MSGPACK_CONTENT_TYPE",
    "decode_msgpack",
    "decode_multipart",
    "encode_msgpack",
    "encode_multipart",
    "item_headers",
    "multipart_content_type",
]

MSGPACK_CONTENT_TYPE = "application/x-msgpack"

_CT = b"content-type"
_CTE_LINE = b"content-transfer-encoding: binary\r\n"


def item_headers(metadata: Metadata) -> Metadata:
    """The item's headers as LMQ sends them: a content-type first when the item has none."""
    for k, _ in metadata:
        if k == _CT:
            return metadata
    return ((_CT, DEFAULT_CONTENT_TYPE), *metadata)


def multipart_content_type(boundary: str) -> str:
    return f"multipart/mixed; boundary={boundary}"


def encode_multipart(boundary: bytes, items: Sequence[Item]) -> bytes:
    """Each part ``\\r\\n--B\\r\\n``, ``name: value\\r\\n`` headers, the transfer encoding line,
    a blank line and the body; then ``\\r\\n--B--\\r\\n``."""
    delimiter = b"\r\n--" + boundary + b"\r\n"
    out: list[bytes] = []
    for metadata, body in items:
        out.append(delimiter)
        for k, v in item_headers(metadata):
            out += (k, b": ", v, b"\r\n")
        out += (_CTE_LINE, b"\r\n", body)
    out.append(b"\r\n--" + boundary + b"--\r\n")
    return b"".join(out)


def decode_multipart(boundary: bytes, data: bytes) -> list[Item]:
    """Inverse of :func:`encode_multipart` (header names lower-cased; the transfer encoding line
    dropped). A body containing the delimiter line cannot be told apart, as in any multipart."""
    delimiter = b"\r\n--" + boundary
    end = delimiter + b"--\r\n"
    if not data.endswith(end):
        raise BadRequest("multipart body does not end with the closing delimiter")
    data = data[: -len(end)]
    if not data:
        return []
    if not data.startswith(delimiter + b"\r\n"):
        raise BadRequest("multipart body does not start with the delimiter")
    items: list[Item] = []
    for part in data[len(delimiter) + 2 :].split(delimiter + b"\r\n"):
        head, sep, body = part.partition(b"\r\n\r\n")
        if not sep:
            raise BadRequest("multipart part without a blank line after its headers")
        headers: list[tuple[bytes, bytes]] = []
        for line in head.split(b"\r\n"):
            name, colon, value = line.partition(b":")
            if not colon:
                raise BadRequest(f"bad multipart header line {line!r}")
            name = name.strip().lower()
            if name != b"content-transfer-encoding":
                headers.append((name, value.strip()))
        items.append((tuple(headers), body))
    return items


def encode_msgpack(items: Sequence[Item]) -> bytes:
    """``[[{name: value}, body], ...]``: header names and values as msgpack str, bodies as bin."""
    # latin-1 maps each header byte to one code point, so any stored byte string survives.
    pairs = [[{k.decode("latin-1"): v.decode("latin-1") for k, v in item_headers(md)}, body] for md, body in items]
    packed: bytes = msgpack.packb(pairs, use_bin_type=True)
    return packed


def decode_msgpack(data: bytes) -> list[Item]:
    """Inverse of :func:`encode_msgpack`."""
    try:
        obj: Any = msgpack.unpackb(data, raw=False)
    except Exception as e:
        raise BadRequest(f"not a msgpack document: {e}") from e
    if not isinstance(obj, list):
        raise BadRequest("a compound msgpack body must be an array")
    items: list[Item] = []
    for pair in obj:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], dict)):
            raise BadRequest(f"each compound element must be [headers, body], got {pair!r}")
        headers, body = pair
        md = tuple((str(k).encode("latin-1"), str(v).encode("latin-1")) for k, v in headers.items())
        items.append((md, body if isinstance(body, bytes) else str(body).encode()))
    return items
