"""``pylmq.log.info_line``: the access lines' short path writes what ``logger.info`` would."""

from __future__ import annotations

import asyncio
import datetime as dt
import errno
import io
import linecache
import logging
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

import pytest

from pylmq.config import LagerConfig, LogHandler
from pylmq.core.clock import ManualClock
from pylmq.log import LoggingSetup, configure_logging, info_line

if TYPE_CHECKING:
    from _typeshed import TraceFunction

NOW = dt.datetime(2026, 4, 13, 10, 20, 30).timestamp() + 0.123
Setup = Callable[..., LoggingSetup]


@pytest.fixture
def only_ours(tmp_path: Path) -> Iterator[Setup]:
    """configure_logging, with the root logger's handlers exactly those it installs (pytest's
    log capture removed for the test): the condition for info_line's short path."""
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    setups: list[LoggingSetup] = []

    def run(config: LagerConfig, stream: io.StringIO | None = None) -> LoggingSetup:
        for h in list(root.handlers):
            root.removeHandler(h)
        saved_stderr = sys.stderr
        if stream is not None:
            sys.stderr = stream  # the console handler takes stderr as it is made
        try:
            setup = configure_logging(config, tmp_path / "log", clock=ManualClock(NOW))
        finally:
            sys.stderr = saved_stderr
        setups.append(setup)
        return setup

    yield run
    for s in setups:
        s.close()
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in saved_handlers:
        root.addHandler(h)
    root.setLevel(saved_level)


class _Keep(logging.Handler):
    """A foreign handler: keeps the records it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def _config(**console: str) -> LagerConfig:
    return LagerConfig(
        handlers=(LogHandler("console.log", "info"), LogHandler("error.log", "error")),
        crash_log=None,
        console_level=console.get("console"),
    )


def test_the_same_line_as_logger_info(only_ours: Setup, tmp_path: Path) -> None:
    only_ours(_config())
    log = logging.getLogger("pylmq.access")
    line_no = sys._getframe().f_lineno + 1
    info_line(log, "GET /messages/q?t=1 200 0.4ms")
    log.info("%s %s %d %.1fms", "GET", "/messages/q?t=1", 200, 0.4)
    short, standard = _read(tmp_path / "log" / "console.log")
    where = f"pylmq.access:test_the_same_line_as_logger_info:{line_no}"
    assert short == f"2026-04-13 10:20:30.123 [info] <main>@{where} GET /messages/q?t=1 200 0.4ms"
    assert standard == short.replace(f":{line_no} ", f":{line_no + 1} ")
    assert _read(tmp_path / "log" / "error.log") == [], "a file that does not want info lines gets none"


def test_controls_are_escaped_and_long_lines_cut(only_ours: Setup, tmp_path: Path) -> None:
    only_ours(_config())
    info_line(logging.getLogger("pylmq.access"), "GET /q\n2026-01-01 forged [error] \x1b[31m キュー " + "x" * 5000)
    (line,) = _read(tmp_path / "log" / "console.log")
    assert "/q\\n2026-01-01 forged [error] \\x1b[31m キュー x" in line
    assert len(line.split(" ", 4)[4]) == 4096  # lager's truncation of the message


async def test_in_a_loop_lines_are_written_at_the_end_of_the_pass(only_ours: Setup, tmp_path: Path) -> None:
    stderr = io.StringIO()
    only_ours(_config(console="info"), stderr)
    log = logging.getLogger("pylmq.access")
    info_line(log, "first")
    info_line(log, "second")
    assert _read(tmp_path / "log" / "console.log") == [] and stderr.getvalue() == "", "written at once in a loop"
    # A line of the standard path in the same pass comes after them in both places.
    logging.getLogger("pylmq.node").warning("third")
    await asyncio.sleep(0)
    info_line(log, "fourth")
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    in_file = [line.rsplit(" ", 1)[1] for line in _read(tmp_path / "log" / "console.log")]
    on_stderr = [line.rsplit(" ", 1)[1] for line in stderr.getvalue().splitlines()]
    assert in_file == on_stderr == ["first", "second", "third", "fourth"]


def test_outside_a_loop_lines_are_written_at_once(only_ours: Setup, tmp_path: Path) -> None:
    only_ours(_config())
    info_line(logging.getLogger("pylmq.access"), "now")
    assert [line.rsplit(" ", 1)[1] for line in _read(tmp_path / "log" / "console.log")] == ["now"]


async def test_closing_the_setup_writes_what_waits(only_ours: Setup, tmp_path: Path) -> None:
    setup = only_ours(_config())
    info_line(logging.getLogger("pylmq.access"), "last")
    setup.close()
    assert [line.rsplit(" ", 1)[1] for line in _read(tmp_path / "log" / "console.log")] == ["last"]


def test_size_rotation_counts_bytes_not_characters(only_ours: Setup, tmp_path: Path) -> None:
    only_ours(LagerConfig(handlers=(LogHandler("big.log", "info", size=400, date="", count=3),), crash_log=None))
    log = logging.getLogger("pylmq.access")
    for i in range(6):
        info_line(log, f"{i} " + "キ" * 40)  # 120 bytes of UTF-8 in 40 characters
    log_dir = tmp_path / "log"
    # A line is about 230 bytes but 150 characters: counted in bytes a file passes 400 at its
    # second line and rotates (counted in characters, it would take three).
    assert [len(_read(log_dir / n)) for n in ("big.log", "big.log.0", "big.log.1", "big.log.2")] == [0, 2, 2, 2]


def test_another_handler_gets_the_record_with_its_caller(only_ours: Setup, tmp_path: Path) -> None:
    only_ours(_config())
    keep = _Keep()
    records = keep.records
    logging.getLogger().addHandler(keep)
    try:
        line_no = sys._getframe().f_lineno + 1
        info_line(logging.getLogger("pylmq.access"), "POST /messages/q 200 0.1ms")
    finally:
        logging.getLogger().removeHandler(keep)
    (record,) = records
    assert (record.name, record.levelno, record.getMessage()) == (
        "pylmq.access",
        logging.INFO,
        "POST /messages/q 200 0.1ms",
    )
    assert (record.funcName, record.lineno) == ("test_another_handler_gets_the_record_with_its_caller", line_no)
    (line,) = _read(tmp_path / "log" / "console.log")
    assert line.endswith(f":{line_no} POST /messages/q 200 0.1ms")


def _messages(path: Path) -> list[str]:
    return [line.rsplit(" ", 1)[1] for line in _read(path)]


async def test_a_full_disk_never_fails_the_caller(only_ours: Setup, capsys: pytest.CaptureFixture[str]) -> None:
    # /dev/full: every write that reaches it fails with ENOSPC, as on a full disk.
    only_ours(LagerConfig(handlers=(LogHandler("/dev/full", "info"),), crash_log=None))
    log = logging.getLogger("pylmq.access")
    for i in range(200):  # 200 lines of 100 bytes: more than the file's buffer holds
        info_line(log, f"GET /messages/q{i} 200 0.1ms " + "x" * 50)
    await asyncio.sleep(0)  # the end-of-pass flush fails too, and is only reported
    assert "No space left on device" in capsys.readouterr().err


class _Disk(io.RawIOBase):
    """A file on a disk that can be full (``full[0]``)."""

    def __init__(self, path: Path, full: list[bool]) -> None:
        self.file = io.FileIO(path, "a")
        self.full = full

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        if self.full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        return self.file.write(data)

    def fileno(self) -> int:
        return self.file.fileno()

    def close(self) -> None:
        self.file.close()
        super().close()


async def test_a_file_that_filled_the_disk_as_it_rotated_writes_again_once_there_is_room(
    only_ours: Setup, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    full = [False]
    real_open = Path.open

    def open_on_disk(path: Path, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if path.name == "big.log" and mode == "ab":
            return io.BufferedWriter(_Disk(path, full))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", open_on_disk)
    only_ours(LagerConfig(handlers=(LogHandler("big.log", "info", size=2000, date="", count=2),), crash_log=None))
    log = logging.getLogger("pylmq.access")
    full[0] = True
    for i in range(60):  # past the size limit: the rotation's close cannot write what waits
        info_line(log, f"full{i} " + "x" * 60)
        await asyncio.sleep(0)
    assert "No space left on device" in capsys.readouterr().err
    full[0] = False  # room again: the next lines are written, through either path
    info_line(log, "room")
    log.warning("again")
    await asyncio.sleep(0)
    written = _messages(tmp_path / "log" / "big.log.0") + _messages(tmp_path / "log" / "big.log")
    assert written[-2:] == ["room", "again"]


async def test_after_close_lines_go_the_standard_way(only_ours: Setup, tmp_path: Path) -> None:
    setup = only_ours(_config())
    setup.close()
    keep = _Keep()
    records = keep.records
    logging.getLogger().addHandler(keep)
    try:
        info_line(logging.getLogger("pylmq.access"), "after")
        logging.getLogger().removeHandler(keep)
        info_line(logging.getLogger("pylmq.access"), "alone")  # no handler at all: not raised
    finally:
        logging.getLogger().removeHandler(keep)
    assert [r.getMessage() for r in records] == ["after"]
    assert _read(tmp_path / "log" / "console.log") == []


async def test_a_line_added_while_a_thread_writes_the_console_is_not_lost(only_ours: Setup) -> None:
    stderr = io.StringIO()
    only_ours(LagerConfig(handlers=(), crash_log=None, console_level="info"), stderr)
    at_clear, go = threading.Event(), threading.Event()

    def pause_before_clear(frame: FrameType, event: str, _arg: Any) -> TraceFunction:
        # The thread stops once its emit has joined the pending lines, before it clears them.
        if event == "line" and ".clear()" in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
            at_clear.set()
            go.wait(5)
        return pause_before_clear

    def trace(frame: FrameType, _event: str, _arg: Any) -> TraceFunction | None:
        return pause_before_clear if frame.f_code.co_name == "_take_pending" else None

    def journal_thread() -> None:  # as the durable store's threads log
        sys.settrace(trace)
        logging.getLogger("pylmq.store").warning("from-thread")

    log = logging.getLogger("pylmq.access")
    info_line(log, "pending")  # waits for the end of the loop's pass
    thread = threading.Thread(target=journal_thread)
    thread.start()
    assert at_clear.wait(5)
    late = threading.Thread(target=info_line, args=(log, "late"))
    late.start()
    late.join(0.2)  # done at once without the lock; with it, waits for the thread's emit
    go.set()
    thread.join(5)
    late.join(5)
    await asyncio.sleep(0)
    assert [line.rsplit(" ", 1)[1] for line in stderr.getvalue().splitlines()] == ["pending", "from-thread", "late"]
