"""Observable facts of LMQ's MessagePack-RPC API (read from lmq_api and its msgpack-rpc server;
docs/lmq-contract.md), each checked over a real socket."""

from __future__ import annotations

import asyncio

import msgpack

from pylmq.core import make_item
from pylmq.node import LMQNode
from tests.rpc.rpc_helpers import RawClient


async def _raw_pull_reply(node: LMQNode, queue: str) -> bytes:
    """The exact bytes of the response to ``pull(queue, 0)``."""
    assert node.rpc_address is not None
    reader, writer = await asyncio.open_connection(*node.rpc_address)
    try:
        writer.write(msgpack.packb([0, 1, "pull", [queue, 0]]))
        unpacker = msgpack.Unpacker(raw=True)
        data = b""
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), 5)
            assert chunk, "server closed the connection"
            data += chunk
            unpacker.feed(chunk)
            for _ in unpacker:
                return data
    finally:
        writer.close()


async def test_text_pushed_over_http_is_pulled_as_a_msgpack_string(client: RawClient, node: LMQNode) -> None:
    # LMQ's RPC server packs every binary in the old spec's raw type, which current clients read
    # as str: a JSON body pushed over HTTP reaches an RPC consumer as a string.
    await node.manager.push("q", make_item(b'{"k":"v\xc3\xa9"}', "application/json"))
    r = await client.call("pull", "q", 0)
    assert r["content"] == '{"k":"vé"}', f"expected the body as a str, got {r['content']!r}"


async def test_text_content_uses_lmqs_raw_encoding_byte_for_byte(node: LMQNode) -> None:
    # fixraw below 32 bytes, raw16 (0xda) up to 64 KiB, as msgpack-erlang's old-spec packer.
    await node.manager.push("q", make_item(b"short", "text/plain"))
    await node.manager.push("q", make_item(b"x" * 40, "text/plain"))
    assert (await _raw_pull_reply(node, "q")).endswith(b"\xa7content\xa5short")
    assert (await _raw_pull_reply(node, "q")).endswith(b"\xa7content\xda\x00\x28" + b"x" * 40)


async def test_non_utf8_content_pushed_over_http_is_pulled_as_bin(client: RawClient, node: LMQNode) -> None:
    # LMQ would send these bytes as raw too, which a current client cannot decode at all;
    # bin keeps the reply readable and the bytes exact.
    await node.manager.push("q", make_item(b"\xff\xfe bytes", "application/octet-stream"))
    assert (await client.call("pull", "q", 0))["content"] == b"\xff\xfe bytes"


async def test_text_items_of_a_compound_message_are_strings(client: RawClient, node: LMQNode) -> None:
    await node.manager.update_props("acc", {"accum": 0.05})
    await node.manager.push("acc", make_item(b"one", "text/plain"))
    await node.manager.push("acc", make_item(b"\x92\x01\x02", "application/x-msgpack"))
    r = await client.call("pull", "acc", 2)
    assert (r["type"], r["content"]) == ("package", ["one", [1, 2]]), r
