"""A connection's reader hands every frame to its owner whole and in order, however the stream
cuts them: frames split anywhere (inside the length, inside the body), many in one read, frames
longer than a read, ticks between them (each echoed); a frame cut short by the end of the
stream is not handed on."""

from __future__ import annotations

import asyncio

import pytest

from pylmq.erlang.connection import READ_CHUNK, TICK, Connection
from pylmq.erlang.etf import encode
from pylmq.erlang.terms import Atom, Pid, Term

A = Atom


class _Writer:
    def __init__(self) -> None:
        self.written = bytearray()

    def write(self, data: bytes | bytearray) -> None:
        self.written += data

    def close(self) -> None:
        pass


class _Owner:
    def __init__(self) -> None:
        self.frames: list[tuple[Term, Term | None]] = []
        self.lost: list[str] = []

    def _on_frame(self, conn: Connection, control: Term, payload: Term | None) -> None:
        self.frames.append((control, payload))

    def _on_connection_lost(self, conn: Connection, reason: str) -> None:
        self.lost.append(reason)

    def _on_stall(self, conn: Connection, stalled: bool, silence: float) -> None:
        pass


def _frame(control: Term, payload: Term | None = None) -> bytes:
    body = b"p" + encode(control) + (b"" if payload is None else encode(payload))
    return len(body).to_bytes(4, "big") + body


# Payload sizes around the read size: smaller, one byte either side of it, several times it.
SIZES = [0, 1, 100, READ_CHUNK - 40, READ_CHUNK, READ_CHUNK + 1, 3 * READ_CHUNK + 7, 5]
# Controls: sends to more processes than the reader keeps the controls of, a registered send,
# and a link (not a send): each frame must come with its own.
PIDS = [Pid(A("peer@host"), k, 0, 7) for k in range(6)]
CONTROLS: list[Term] = [(2, A(""), p) for p in PIDS] + [(6, PIDS[0], A(""), A("lmq_event")), (1, PIDS[1], PIDS[2])]
EXPECTED = [(CONTROLS[(k * 5) % len(CONTROLS)], bytes([n % 251]) * n) for k, n in enumerate(SIZES * 3)]
STREAM = b"".join(TICK + _frame(c, p) for c, p in EXPECTED) + TICK


def _pieces(data: bytes, sizes: list[int]) -> list[bytes]:
    out, pos, k = [], 0, 0
    while pos < len(data):
        n = sizes[k % len(sizes)]
        out.append(data[pos : pos + n])
        pos += n
        k += 1
    return out


async def _read(pieces: list[bytes]) -> tuple[_Owner, _Writer]:
    owner, writer = _Owner(), _Writer()
    reader = asyncio.StreamReader(limit=1 << 20)
    conn = Connection(owner, "peer@host", 0, 1, reader, writer)  # type: ignore[arg-type]
    task = asyncio.create_task(conn._read_loop())
    for piece in pieces:
        reader.feed_data(piece)
        await asyncio.sleep(0)  # the reader sees the stream as it arrives, piece by piece
    reader.feed_eof()
    await asyncio.wait_for(task, 5)
    await asyncio.sleep(0)  # the echoed ticks' write
    return owner, writer


@pytest.mark.parametrize(
    "sizes",
    [[len(STREAM)], [1], [3], [2, 5, 1], [4096], [READ_CHUNK + 3], [7, READ_CHUNK * 2 + 1]],
    ids=["whole", "bytes", "threes", "mixed", "4k", "chunk+3", "7-and-2chunks"],
)
async def test_frames_arrive_whole_and_in_order_however_the_stream_is_cut(sizes: list[int]) -> None:
    if max(sizes) < 16:  # tiny pieces for the first few frames (a piece per pass), then the rest whole
        head = len(TICK + _frame(*EXPECTED[0]) + TICK + _frame(*EXPECTED[1])) + 50
        pieces = [*_pieces(STREAM[:head], sizes), STREAM[head:]]
    else:
        pieces = _pieces(STREAM, sizes)
    owner, writer = await _read(pieces)
    assert [c for c, _ in owner.frames] == [c for c, _ in EXPECTED]
    assert owner.frames == EXPECTED
    assert bytes(writer.written) == TICK * (len(EXPECTED) + 1), "every tick is echoed"
    assert owner.lost == ["connection_closed"]


async def test_a_frame_cut_short_by_the_end_of_the_stream_is_not_handed_on() -> None:
    complete = _frame(A("first"), b"x" * 10)
    cut = _frame(A("second"), b"y" * (2 * READ_CHUNK))[:-1]
    owner, _ = await _read(_pieces(complete + cut, [1000]))
    assert owner.frames == [(A("first"), b"x" * 10)]
    assert owner.lost == ["connection_closed"]


async def test_a_frame_with_a_malformed_control_is_handed_on_and_the_connection_goes_on() -> None:
    # The owner refuses it (logged); the reader neither keeps nor chokes on it.
    bad: Term = ([], A("x"))
    good: Term = (2, A(""), PIDS[0])
    owner, _ = await _read([_frame(bad, b"1") + _frame(good, b"2") + _frame(bad, b"3")])
    assert owner.frames == [(bad, b"1"), (good, b"2"), (bad, b"3")]
    assert owner.lost == ["connection_closed"]
