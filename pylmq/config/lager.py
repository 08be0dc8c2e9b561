"""The ``lager`` section of app.config: log files, their levels and rotation (lager 2.0 keys).

Defaults are those of LMQ's shipped app.config (not lager's own): ``log/error.log`` at
``error`` and ``log/console.log`` at ``info``, no size rotation, rotated at midnight, 14 kept,
and ``log/crash.log`` likewise.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pylmq.config.consult import Atom, Term, proplist
from pylmq.errors import ConfigError

__all__ = [
    "LAGER_LEVELS",
    "LagerConfig",
    "LogHandler",
    "RotationSpec",
    "lager_from_terms",
    "levels_for",
    "parse_date_spec",
]

# Most verbose first, as lager lists them; "none" silences a handler.
LAGER_LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


def _expand(spec: str) -> frozenset[str]:
    if spec == "none":
        return frozenset()
    if spec not in LAGER_LEVELS:
        raise ValueError(spec)
    return frozenset(LAGER_LEVELS[LAGER_LEVELS.index(spec) :])


def levels_for(spec: str) -> frozenset[str]:
    """The levels a handler configured with ``spec`` writes.

    ``info`` means info and more severe (lager's usual threshold); lager's mask forms are also
    understood: ``=info`` only info, ``!=info`` all but info, ``<warning`` less severe than
    warning, ``<=``, ``>``, ``>=`` likewise.
    """
    every = frozenset(LAGER_LEVELS)
    try:
        if spec.startswith("!="):
            return every - levels_for(spec[2:])
        for op in ("<=", "=<"):
            if spec.startswith(op):
                return every - _expand(spec[2:]) | {spec[2:]}
        for op in (">=", "=>"):
            if spec.startswith(op):
                return _expand(spec[2:])
        if spec.startswith("="):
            return frozenset({spec[1:]}) & every or _raise(spec)
        if spec.startswith("<"):
            return every - _expand(spec[1:])
        if spec.startswith(">"):
            return _expand(spec[1:]) - {spec[1:]}
        return _expand(spec)
    except ValueError:
        raise ConfigError(f"unknown lager level {spec!r}: expected one of {', '.join(LAGER_LEVELS)} or none") from None


def _raise(spec: str) -> frozenset[str]:
    raise ValueError(spec)


@dataclass(frozen=True, slots=True)
class RotationSpec:
    """A parsed newsyslog-style date spec: rotate at ``hour`` on a weekday, a day of the month,
    the last day of the month (``day_of_month == -1``), or every day."""

    hour: int = 0
    weekday: int | None = None  # 0 = Sunday .. 6 = Saturday, as lager's $W
    day_of_month: int | None = None


_DAY_RE = re.compile(r"D(\d{1,2})")


def parse_date_spec(spec: str) -> RotationSpec | None:
    """``"$D0"`` midnight daily, ``"$D23"``, ``"$W0D23"`` Sundays 23:00, ``"$M1D0"``, ``"$ML"`` last
    day of month; ``""`` means no date rotation (``None``)."""
    if spec == "":
        return None
    bad = ConfigError(f'invalid rotation date spec {spec!r} (examples: "$D0", "$W0D23", "$M1D0", "$ML")')
    if not spec.startswith("$") or len(spec) < 2:
        raise bad
    rest = spec[1:]
    weekday: int | None = None
    day_of_month: int | None = None
    if rest[0] == "W":
        if len(rest) < 2 or rest[1] not in "0123456":
            raise bad
        weekday, rest = int(rest[1]), rest[2:]
    elif rest[0] == "M":
        if rest[1:2] in ("L", "l"):
            day_of_month, rest = -1, rest[2:]
        else:
            m = re.match(r"M(\d{1,2})", rest)
            if m is None or not 1 <= int(m.group(1)) <= 31:
                raise bad
            day_of_month, rest = int(m.group(1)), rest[m.end() :]
    hour = 0
    if rest:
        m = _DAY_RE.fullmatch(rest)
        if m is None or int(m.group(1)) > 23:
            raise bad
        hour = int(m.group(1))
    elif weekday is None and day_of_month is None:
        raise bad
    return RotationSpec(hour, weekday, day_of_month)


@dataclass(frozen=True, slots=True)
class LogHandler:
    """One ``lager_file_backend`` file. ``size`` 0 disables size rotation; ``date`` ``""``
    disables date rotation; ``count`` rotated files are kept (``F.0`` newest)."""

    file: str
    level: str = "info"
    size: int = 0
    date: str = "$D0"
    count: int = 14


@dataclass(frozen=True, slots=True)
class LagerConfig:
    handlers: tuple[LogHandler, ...] = (
        LogHandler("log/error.log", "error"),
        LogHandler("log/console.log", "info"),
    )
    console_level: str | None = None  # lager_console_backend: lines to stderr at this level
    crash_log: str | None = "log/crash.log"
    crash_log_msg_size: int = 65536
    crash_log_size: int = 0
    crash_log_date: str = "$D0"
    crash_log_count: int = 14


def _text(value: Term, where: str) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, Atom):
        return value.name
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise ConfigError(f"{where}: expected a string or an atom, got {value!r}")


def _count(value: Term, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}: expected a non-negative integer, got {value!r}")
    return value


def _level(value: Term, where: str) -> str:
    level = _text(value, where)
    try:
        levels_for(level)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e.detail}") from None
    return level


def _date(value: Term, where: str) -> str:
    spec = _text(value, where)
    try:
        parse_date_spec(spec)
    except ConfigError as e:
        raise ConfigError(f"{where}: {e.detail}") from None
    return spec


def _file_handler(term: Term, where: str) -> LogHandler:
    if isinstance(term, tuple) and len(term) == 5:
        # lager 1.x form {File, Level, Size, Date, Count}, still read by lager 2.0
        file, level, size, date, count = term
        return LogHandler(
            _text(file, where), _level(level, where), _count(size, where), _date(date, where), _count(count, where)
        )
    props = proplist(term, where)
    if "file" not in props:
        raise ConfigError(f"{where}: a lager_file_backend needs {{file, Name}}")
    unknown = set(props) - {"file", "level", "size", "date", "count", "formatter", "formatter_config",
                            "sync_on", "sync_interval", "sync_size", "check_interval", "high_water_mark"}  # fmt: skip
    if unknown:
        raise ConfigError(f"{where}: unknown lager_file_backend keys {sorted(unknown)}")
    defaults = LogHandler("")
    return LogHandler(
        file=_text(props["file"], f"{where}.file"),
        level=_level(props.get("level", Atom(defaults.level)), f"{where}.level"),
        size=_count(props.get("size", defaults.size), f"{where}.size"),
        date=_date(props.get("date", defaults.date), f"{where}.date"),
        count=_count(props.get("count", defaults.count), f"{where}.count"),
    )


def _file_handlers(value: Term, where: str) -> list[LogHandler]:
    # Three shapes: one proplist; a list of proplists (LMQ's app.config); a list of 5-tuples.
    if isinstance(value, list) and value and all(isinstance(v, list) or (isinstance(v, tuple) and len(v) == 5)
                                                 for v in value):  # fmt: skip
        return [_file_handler(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return [_file_handler(value, where)]


def lager_from_terms(section: Term, where: str = "lager") -> LagerConfig:
    """Read a ``{lager, [...]}`` section. Keys pylmq has no use for are accepted silently when
    they are lager's (``error_logger_redirect``, ...), refused otherwise."""
    props = proplist(section, where)
    base = LagerConfig()
    handlers: Sequence[LogHandler] = base.handlers
    console: str | None = base.console_level
    if "handlers" in props:
        handlers, console = [], None
        raw = props["handlers"]
        if not isinstance(raw, list):
            raise ConfigError(f"{where}.handlers: expected a list, got {raw!r}")
        for i, h in enumerate(raw):
            hw = f"{where}.handlers[{i}]"
            if not (isinstance(h, tuple) and len(h) == 2 and isinstance(h[0], Atom)):
                raise ConfigError(f"{hw}: expected {{Backend, Config}}, got {h!r}")
            backend, cfg = h[0].name, h[1]
            if backend == "lager_file_backend":
                handlers.extend(_file_handlers(cfg, hw))
            elif backend == "lager_console_backend":
                level = cfg[0] if isinstance(cfg, list) and cfg else cfg
                console = _level(level, hw)
            else:
                raise ConfigError(f"{hw}: unknown lager backend {backend!r}")
    crash_log = base.crash_log
    if "crash_log" in props:
        raw_crash = props["crash_log"]
        off = raw_crash is False or raw_crash == Atom("undefined")
        crash_log = None if off else _text(raw_crash, f"{where}.crash_log")

    def key(name: str) -> tuple[Term, str]:
        return props.get(name, getattr(base, name)), f"{where}.{name}"

    return LagerConfig(
        handlers=tuple(handlers),
        console_level=console,
        crash_log=crash_log,
        crash_log_msg_size=_count(*key("crash_log_msg_size")),
        crash_log_size=_count(*key("crash_log_size")),
        crash_log_date=_date(*key("crash_log_date")),
        crash_log_count=_count(*key("crash_log_count")),
    )
