"""A connection's frames of one event-loop pass go out in one write, in order, and a close
still sends what was sent before it."""

from __future__ import annotations

import asyncio

from pylmq.erlang.connection import Connection


class _Writer:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    async def drain(self) -> None:
        return None


class _Owner:
    lost: list[str]

    def __init__(self) -> None:
        self.lost = []

    def _on_connection_lost(self, conn: Connection, reason: str) -> None:
        self.lost.append(reason)


def _connection() -> tuple[Connection, _Writer]:
    writer = _Writer()
    conn = Connection(_Owner(), "peer@host", 0, 1, asyncio.StreamReader(), writer)  # type: ignore[arg-type]
    return conn, writer


async def test_frames_of_one_pass_are_written_once_in_order() -> None:
    conn, writer = _connection()
    for frame in (b"one", bytearray(b"two"), b"three"):
        conn.send(frame)
    assert writer.writes == [], "nothing is written before the loop's pass ends"
    await asyncio.sleep(0)
    assert writer.writes == [b"onetwothree"]
    conn.send(b"four")
    await asyncio.sleep(0)
    assert writer.writes == [b"onetwothree", b"four"]


async def test_close_and_drain_send_what_was_sent_before() -> None:
    conn, writer = _connection()
    conn.send(b"before drain")
    await conn.drain()
    assert writer.writes == [b"before drain"]
    conn.send(b"last words")
    conn.close("test")
    assert writer.writes == [b"before drain", b"last words"] and writer.closed
    conn.send(b"after close")
    await asyncio.sleep(0)
    assert writer.writes == [b"before drain", b"last words"]
