"""Logs as LMQ writes them with lager: the same files, line layout, levels and rotation.

Every line is ``YYYY-MM-DD HH:MM:SS.mmm [level] <task>@module:function:line message`` in local
time, lager's default layout, where ``<task>`` names the asyncio task (``<main>`` outside one)
as lager names the Erlang process. Levels are lager's: debug, info, notice, warning, error,
critical, alert, emergency; a handler at level L writes L and everything more severe. API
access lines are ``info``: set ``console.log`` to ``notice`` to drop them.

Files follow the ``lager`` section of app.config (:class:`~pylmq.config.LagerConfig`): each
file rotates at its date spec (``"$D0"`` = midnight, local time) and when it grows past
``size`` bytes (0: never), keeping ``count`` old files named ``F.0`` (newest) .. ``F.<count-1>``;
a file moved away by an external logrotate is reopened. Date rotation happens at the first
line written after the rotation time (lager uses a timer; the files are the same).

Crashes: as with lager, error.log and console.log get one line saying what crashed and why,
and crash.log gets the full report with the Python traceback. :func:`install_crash_handler`
routes unhandled asyncio task exceptions there; a ``log.exception(...)`` does the same.

Code logs through the standard :mod:`logging` module: ``log = logging.getLogger("pylmq.x")``,
then ``log.warning("queue %s: ...", name)`` (arguments formatted only when a handler wants the
line), or ``log.log(NOTICE, ...)`` for lager's extra levels; :func:`pairs` writes ``key=value``
pairs. Records of other libraries' loggers (asyncio, pyspark) land in the same files. Why not
structlog: docs/decisions/logging-front-end.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import os
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TextIO, cast

from pylmq.config.lager import LAGER_LEVELS, LagerConfig, RotationSpec, levels_for, parse_date_spec
from pylmq.config.settings import Settings
from pylmq.core.clock import Clock, SystemClock

__all__ = [
    "LEVEL_NUMBERS",
    "NOTICE",
    "CrashLogHandler",
    "LagerFileHandler",
    "LoggingSetup",
    "configure_logging",
    "escape_controls",
    "format_line",
    "info_line",
    "install_crash_handler",
    "log_crash",
    "next_rotation",
    "pairs",
    "rotate_files",
]

# lager levels on the stdlib scale: notice between info and warning, alert and emergency
# above critical, so that stdlib loggers (aiohttp, asyncio) interleave correctly.
LEVEL_NUMBERS: dict[str, int] = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "notice": 25,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
    "alert": 60,
    "emergency": 70,
}
for _name in ("notice", "alert", "emergency"):
    logging.addLevelName(LEVEL_NUMBERS[_name], _name.upper())
NOTICE = LEVEL_NUMBERS["notice"]

# lager truncates formatted messages at 4096 bytes (DEFAULT_TRUNCATION)
MAX_MESSAGE = 4096
_CHECK_INODE_EVERY = 1.0  # seconds, lager's check_interval
_crash_logger_name = "pylmq.crash"


def _lager_level(levelno: int) -> str:
    name = "debug"
    for level in LAGER_LEVELS:
        if levelno >= LEVEL_NUMBERS[level]:
            name = level
    return name


# -- lines ---------------------------------------------------------------------------------


def _who(record: logging.LogRecord) -> str:
    who = getattr(record, "lager_who", None)
    if isinstance(who, str):
        return who
    return f"<{_task_name()}>@{record.name}:{record.funcName}:{record.lineno}"


def _task_name() -> str:
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    return task.get_name() if task is not None else "main"


def _reason(exc_info: Any) -> str:
    if isinstance(exc_info, tuple) and exc_info[1] is not None:
        exc = exc_info[1]
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return ""


# C0 controls, DEL, C1 controls and Unicode's line separators: a newline in a value (a queue
# name, a request target) would otherwise start a forged line, an escape sequence would drive
# the terminal of whoever reads the log. Unicode's bidirectional controls too: a right-to-left
# override in a queue name shows the rest of the line reversed in a viewer that honours it.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_control(m: re.Match[str]) -> str:
    c = m.group()
    return _NAMED_ESCAPES.get(c) or (f"\\x{ord(c):02x}" if c <= "\xff" else f"\\u{ord(c):04x}")


def escape_controls(text: str) -> str:
    """``text`` with control characters written as escapes (``\\n``, ``\\x1b``), so that it
    stays on one line and prints as it is."""
    # isprintable() is False for every control character: the common case costs one C scan.
    return text if text.isprintable() else _CONTROL.sub(_escape_control, text)


def format_line(record: logging.LogRecord, now: float) -> str:
    """One lager-layout line (with its newline) for ``record``, stamped ``now``. Control
    characters in the message (from any value put in it) are escaped: one record, one line."""
    message = record.getMessage()
    if record.exc_info:
        # The traceback goes to crash.log; here, lager-style, one line says why.
        message = f"{message}: {_reason(record.exc_info)}" if message else _reason(record.exc_info)
    return _compose(now, _lager_level(record.levelno), _who(record), message)


def _compose(now: float, level: str, who: str, message: str) -> str:
    """The line: stamp, level, who, and the message escaped and cut at lager's length."""
    message = escape_controls(message)
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE]
    # whole microseconds first, as datetime does, so .123 is not printed as .122
    micros = round(now * 1_000_000)
    second, micro = divmod(micros, 1_000_000)
    return f"{_local_second(second)}.{micro // 1000:03d} [{level}] {who} {message}\n"


@functools.lru_cache(maxsize=4)
def _local_second(second: int) -> str:
    # Formatting local time is the dearest part of a line; lines come many per second.
    return f"{dt.datetime.fromtimestamp(second):%Y-%m-%d %H:%M:%S}"


# -- rotation ------------------------------------------------------------------------------


def next_rotation(spec: RotationSpec, now: dt.datetime) -> dt.datetime:
    """The first rotation time strictly after ``now`` (naive local time), as lager computes it."""
    day = now.date()
    for _ in range(400):
        if _matches(spec, day):
            at = dt.datetime.combine(day, dt.time(spec.hour))
            if at > now:
                return at
        day += dt.timedelta(days=1)
    raise ValueError(f"no rotation time for {spec}")  # unreachable for a parsed spec


def _matches(spec: RotationSpec, day: dt.date) -> bool:
    if spec.weekday is not None:
        return (day.weekday() + 1) % 7 == spec.weekday  # lager: 0 = Sunday
    if spec.day_of_month == -1:
        return (day + dt.timedelta(days=1)).day == 1
    if spec.day_of_month is not None:
        return day.day == spec.day_of_month
    return True


def rotate_files(path: Path, count: int) -> None:
    """lager's scheme: ``F.(count-2)`` -> ``F.(count-1)`` ... ``F.0`` -> ``F.1``, ``F`` -> ``F.0``;
    with ``count`` 0 the file is just removed. Missing files are fine."""
    if count == 0:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        return
    for i in range(count - 1, 0, -1):
        with contextlib.suppress(FileNotFoundError):
            os.replace(f"{path}.{i - 1}", f"{path}.{i}")
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, f"{path}.0")


class _RotatingFile:
    """An append-only file with lager's size/date rotation and reopen-on-inode-change."""

    def __init__(self, path: Path, size: int, date: str, count: int, clock: Clock) -> None:
        self.path = path
        self.size_limit = size
        self.spec = parse_date_spec(date)
        self.count = count
        self.clock = clock
        self._file: BinaryIO | None = None
        self._size = 0  # bytes in the file, counted as written (tell() would flush)
        self._inode: tuple[int, int] | None = None
        self._checked = 0.0
        self._next: float | None = None
        self._open(clock.now())

    def _open(self, now: float) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("ab")
        st = os.fstat(self._file.fileno())
        self._inode = (st.st_dev, st.st_ino)
        self._size = st.st_size
        self._checked = now
        self._next = None if self.spec is None else next_rotation(self.spec, dt.datetime.fromtimestamp(now)).timestamp()

    def _reopen_if_moved(self, now: float) -> None:
        if now - self._checked < _CHECK_INODE_EVERY:
            return
        self._checked = now
        try:
            st = os.stat(self.path)
            moved = (st.st_dev, st.st_ino) != self._inode
        except FileNotFoundError:
            moved = True
        if moved:
            self.close()
            self._open(now)

    def rotate(self, now: float) -> None:
        self.close()
        rotate_files(self.path, self.count)
        self._open(now)

    def write(self, text: str, now: float, sync: bool, flush: bool = True) -> None:
        """Append ``text``; ``flush=False`` leaves it in the buffer for :meth:`flush`."""
        if self._file is None:  # a close or an open failed (a full disk): try again
            self._open(now)
        elif self._next is not None and now >= self._next:
            self.rotate(now)
        else:
            self._reopen_if_moved(now)
        f = self._file
        assert f is not None
        data = text.encode("utf-8", "backslashreplace")
        f.write(data)
        self._size += len(data)
        if flush or sync:
            f.flush()
        if sync:
            os.fsync(f.fileno())
        if self.size_limit > 0 and self._size > self.size_limit:
            self.rotate(now)

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        # Forgotten first: a close whose flush fails (a full disk) still closes the file, and a
        # closed file kept here would refuse every later line, the disk freed or not.
        f, self._file = self._file, None
        if f is not None:
            f.close()


class LagerFileHandler(logging.Handler):
    """One ``lager_file_backend`` file: lager lines for the levels ``level`` selects."""

    def __init__(self, path: Path, level: str, size: int, date: str, count: int, clock: Clock | None = None) -> None:
        self.levels = levels_for(level)
        least = min((LEVEL_NUMBERS[lv] for lv in self.levels), default=LEVEL_NUMBERS["emergency"] + 1)
        super().__init__(least)
        self.clock: Clock = clock or SystemClock()
        self.file = _RotatingFile(path, size, date, count, self.clock)

    def wants(self, levelno: int) -> bool:
        return _lager_level(levelno) in self.levels

    def emit(self, record: logging.LogRecord) -> None:
        if not self.wants(record.levelno):
            return
        try:
            now = self.clock.now()
            # lager syncs to disk on error and above (sync_on default)
            self.file.write(format_line(record, now), now, sync=record.levelno >= logging.ERROR)
        except Exception:
            self.handleError(record)

    def write_line(self, line: str, now: float) -> None:
        """An info line made by :func:`info_line`, flushed at the end of the loop's pass."""
        try:
            with self.lock:  # type: ignore[union-attr]  # made by Handler.__init__
                self.file.write(line, now, sync=False, flush=False)
        except Exception:
            # A full disk: reported as a failed emit is, never raised into the request the
            # line records (the caller answers it).
            _report_failure()
            return
        _flush_soon(self)

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self.file.flush()

    def close(self) -> None:
        self.file.close()
        super().close()


class _ConsoleHandler(logging.StreamHandler[TextIO]):
    """``lager_console_backend``: the same lines on stderr."""

    def __init__(self, level: str, clock: Clock) -> None:
        super().__init__(sys.stderr)
        self.levels = levels_for(level)
        self.clock = clock
        # Lines of info_line not yet written: stderr writes through (a system call per
        # write), so they are written together at the end of the loop's pass.
        self._pending: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if _lager_level(record.levelno) not in self.levels:
            return
        try:
            line = format_line(record, self.clock.now())
            if self._pending:
                line = self._take_pending() + line
            self.stream.write(line)
            self.flush()
        except Exception:
            self.handleError(record)

    def write_line(self, line: str, now: float) -> None:
        """An info line made by :func:`info_line`, written at the end of the loop's pass."""
        # Under the lock: a thread's record (the durable store's journal threads log) takes the
        # pending lines in emit, and a line added between its join and its clear would be lost.
        with self.lock:  # type: ignore[union-attr]  # made by Handler.__init__
            self._pending.append(line)
        _flush_soon(self)

    def _take_pending(self) -> str:
        text = "".join(self._pending)
        self._pending.clear()
        return text

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]  # made by Handler.__init__
            if self._pending:
                self.stream.write(self._take_pending())
        super().flush()


class CrashLogHandler(logging.Handler):
    """crash.log: full reports (with traceback) of crashes, in lager_crash_log's layout."""

    def __init__(self, path: Path, msg_size: int, size: int, date: str, count: int, clock: Clock | None = None) -> None:
        super().__init__(logging.ERROR)
        self.clock: Clock = clock or SystemClock()
        self.msg_size = msg_size
        self.file = _RotatingFile(path, size, date, count, self.clock)

    def emit(self, record: logging.LogRecord) -> None:
        if not record.exc_info:
            return
        try:
            now = self.clock.now()
            kind = getattr(record, "lager_report", "ERROR")
            stamp = dt.datetime.fromtimestamp(now)
            tb = "".join(traceback.format_exception(*record.exc_info))
            # The traceback is lines of its own; the message is one line, as in the other logs.
            body = f"{escape_controls(record.getMessage())}\n{tb}"
            if self.msg_size > 0 and len(body) > self.msg_size:
                body = body[: self.msg_size] + "\n(truncated)\n"
            report = f"{stamp:%Y-%m-%d %H:%M:%S} ={kind} REPORT====\n{body.rstrip()}\n\n"
            self.file.write(report, now, sync=True)
        except Exception:
            self.handleError(record)

    def close(self) -> None:
        self.file.close()
        super().close()


# -- key=value pairs -----------------------------------------------------------------------

_NEEDS_QUOTES = re.compile(r"[\s\"'=]")


def _value_text(value: Any) -> str:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    text = value if isinstance(value, str) else repr(value) if isinstance(value, bytes) else str(value)
    return repr(text) if not text or _NEEDS_QUOTES.search(text) else text


def pairs(**values: Any) -> str:
    """``key=value`` words for a log line; a value that is empty or holds a space, a quote or
    ``=`` is quoted (``repr``), so that the words split back unambiguously."""
    return " ".join(f"{k}={_value_text(v)}" for k, v in values.items())


# -- setup ---------------------------------------------------------------------------------


class LoggingSetup:
    """The handlers installed by :func:`configure_logging`; :meth:`close` removes them."""

    def __init__(self, handlers: list[logging.Handler], crash: CrashLogHandler | None, clock: Clock) -> None:
        self.handlers = handlers
        self.crash = crash
        self.clock = clock
        # The handlers that write info lines: info_line writes to them directly.
        self.info_writers: list[LagerFileHandler | _ConsoleHandler] = [
            h for h in handlers if isinstance(h, (LagerFileHandler, _ConsoleHandler)) and "info" in h.levels
        ]

    def close(self) -> None:
        global _current
        root = logging.getLogger()
        _flush_all()
        for h in self.handlers:
            root.removeHandler(h)
            try:
                h.close()
            except Exception:  # what waits cannot be written (a full disk): the others still close
                _report_failure()
        self.handlers = []
        self.info_writers = []
        if _current is self:
            # The handlers are closed: info_line goes the standard way again.
            _current = None


_current: LoggingSetup | None = None


def info_line(logger: logging.Logger, message: str) -> None:
    """``logger.info(message)``, the same line in the same files, at a fraction of its cost.

    For lines written once per request (the access lines): the standard path makes a record
    (the caller's frame found by walking the stack, thread and process names), locks and
    formats it in each handler, and flushes each file at each line, which made logging at info
    level cost a node about 40% of its request rate. Here, when no handler but those of
    :func:`configure_logging` would see the line, it is made once and appended to each file that
    wants info lines, and the files are flushed once, at the end of the loop's pass (at once
    outside a loop). Otherwise (another handler is installed, as pytest's log capture is) it
    goes the standard way. The caller checks ``logger.isEnabledFor(logging.INFO)`` first."""
    setup = _current
    if setup is None or not _only_ours(logger, setup):
        logger.info(message, stacklevel=2)
        return
    writers = setup.info_writers
    if not writers:
        return
    now = setup.clock.now()
    frame = sys._getframe(1)
    line = _compose(now, "info", f"<{_task_name()}>@{logger.name}:{frame.f_code.co_name}:{frame.f_lineno}", message)
    for h in writers:
        h.write_line(line, now)


def _only_ours(logger: logging.Logger, setup: LoggingSetup) -> bool:
    """Whether the handlers ``logger``'s records reach are exactly those of ``setup``."""
    node: logging.Logger | None = logger
    root = logging.root
    while node is not None and node is not root:
        if node.handlers or not node.propagate:
            return False
        node = node.parent
    return root.handlers == setup.handlers


_to_flush: set[logging.Handler] = set()


def _flush_soon(handler: logging.Handler) -> None:
    if handler in _to_flush:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        handler.flush()
        return
    if not _to_flush:
        loop.call_soon(_flush_all)
    _to_flush.add(handler)


def _flush_all() -> None:
    handlers = list(_to_flush)
    _to_flush.clear()
    for h in handlers:
        try:
            h.flush()
        except Exception:  # a full disk, say: reported as a failed emit is, never raised into the loop
            _report_failure()


def _report_failure() -> None:
    """The exception being handled, on stderr, as ``logging.Handler.handleError`` reports one."""
    if logging.raiseExceptions:
        with contextlib.suppress(Exception):  # stderr itself may be what fails
            traceback.print_exc(file=sys.stderr)


def _place(file: str, log_dir: Path | None) -> Path:
    path = Path(file)
    return log_dir / path.name if log_dir is not None and not path.is_absolute() else path


def configure_logging(
    config: Settings | LagerConfig,
    log_dir: Path | None = None,
    clock: Clock | None = None,
) -> LoggingSetup:
    """Install lager-style handlers on the root logger (replacing any earlier ones).

    Relative file names in the lager section are taken from the working directory, as lager
    does; with ``log_dir`` (or ``Settings.log_dir``) every relative file goes into that
    directory under its own file name. ``clock`` stamps lines and drives rotation (tests).
    """
    global _current
    if isinstance(config, Settings):
        log_dir = log_dir if log_dir is not None else config.log_dir
        config = config.lager
    clock = clock or SystemClock()
    if _current is not None:
        _current.close()
    handlers: list[logging.Handler] = [
        LagerFileHandler(_place(h.file, log_dir), h.level, h.size, h.date, h.count, clock) for h in config.handlers
    ]
    if config.console_level is not None:
        handlers.append(_ConsoleHandler(config.console_level, clock))
    crash: CrashLogHandler | None = None
    if config.crash_log is not None:
        crash = CrashLogHandler(
            _place(config.crash_log, log_dir),
            config.crash_log_msg_size,
            config.crash_log_size,
            config.crash_log_date,
            config.crash_log_count,
            clock,
        )
        handlers.append(crash)
    root = logging.getLogger()
    for h in handlers:
        root.addHandler(h)
    # The root level is the most verbose level any file wants, so that disabled levels cost
    # one comparison (this is what makes "notice" faster than "info").
    wanted = [LEVEL_NUMBERS[lv] for h in handlers if isinstance(h, (LagerFileHandler, _ConsoleHandler))
              for lv in h.levels]  # fmt: skip
    root.setLevel(min(wanted, default=logging.ERROR))
    _current = LoggingSetup(handlers, crash, clock)
    return _current


# -- crashes -------------------------------------------------------------------------------


def log_crash(what: str, exc: BaseException, report: str = "CRASH") -> None:
    """Report a crash of ``what``: one ``[error]`` line in the logs, the traceback in crash.log.

    For owners of long-lived tasks that catch their task's exception themselves."""
    _crash_record(what, exc, report)


def _crash_record(what: str, exc: BaseException, report: str) -> None:
    logger = logging.getLogger(_crash_logger_name)
    if not logger.isEnabledFor(logging.ERROR):
        return
    record = logger.makeRecord(
        logger.name,
        logging.ERROR,
        __file__,
        0,
        "%s crashed",
        (what,),
        (type(exc), exc, exc.__traceback__),
        "log_crash",
        {"lager_report": report, "lager_who": f"<{_task_name()}>@{what}"},
    )
    logger.handle(record)


def install_crash_handler(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Log unhandled exceptions of ``loop`` (crashed tasks, failed callbacks) as crashes."""
    target = loop or asyncio.get_running_loop()

    def handler(_loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        task = context.get("task") or context.get("future")
        name = task.get_name() if isinstance(task, asyncio.Task) else str(context.get("message", "event loop"))
        if isinstance(exc, BaseException):
            _crash_record(f"task {name}" if isinstance(task, asyncio.Task) else name, exc, "CRASH")
        else:
            logging.getLogger(_crash_logger_name).error("%s", context.get("message", "unhandled event loop error"))

    target.set_exception_handler(cast(Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object], handler))
