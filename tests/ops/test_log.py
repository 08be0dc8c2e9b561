"""Logs: lager's line layout, levels, files, rotation and crash reports."""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import logging
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pylmq.config import LagerConfig, LogHandler, parse_date_spec
from pylmq.core.clock import ManualClock
from pylmq.log import (
    LEVEL_NUMBERS,
    NOTICE,
    LoggingSetup,
    configure_logging,
    install_crash_handler,
    log_crash,
    next_rotation,
    pairs,
)

Configure = Callable[..., LoggingSetup]
STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}"


def local(year: int, month: int, day: int, hour: int, minute: int, second: int) -> float:
    """Unix time of a local wall-clock time (rotation follows local time, as lager's)."""
    return dt.datetime(year, month, day, hour, minute, second).timestamp()


@pytest.fixture
def configure(tmp_path: Path) -> Iterator[Configure]:
    root = logging.getLogger()
    level = root.level
    setups: list[LoggingSetup] = []

    def run(config: LagerConfig | None = None, clock: ManualClock | None = None) -> LoggingSetup:
        setup = configure_logging(config or LagerConfig(), tmp_path / "log", clock=clock)
        setups.append(setup)
        return setup

    yield run
    for s in setups:
        s.close()
    root.setLevel(level)


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_lines_have_lagers_layout(configure: Configure, tmp_path: Path) -> None:
    clock = ManualClock(local(2026, 4, 13, 10, 20, 30) + 0.123)
    configure(clock=clock)
    call_line = sys._getframe().f_lineno + 1
    logging.getLogger(__name__).info("push %s", pairs(queue="q/1", size=12))
    (line,) = lines(tmp_path / "log" / "console.log")
    where = f"{__name__}:test_lines_have_lagers_layout:{call_line}"
    assert line == f"2026-04-13 10:20:30.123 [info] <main>@{where} push queue=q/1 size=12"


def test_pairs_quote_values_that_would_not_split_back() -> None:
    assert pairs(node="lmq@host", n=3, ratio=0.5, ok=True) == "node=lmq@host n=3 ratio=0.5 ok=True"
    assert pairs(http=("127.0.0.1", 9980)) == "http=\"('127.0.0.1', 9980)\""
    assert pairs(empty="", spaced="a b", eq="k=v", raw=b"x") == "empty='' spaced='a b' eq='k=v' raw=\"b'x'\""


def test_every_lager_level_and_handler_thresholds(configure: Configure, tmp_path: Path) -> None:
    configure()
    log = logging.getLogger("t")
    for level in ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"):
        log.log(LEVEL_NUMBERS[level], f"at {level}")
    console = [re.sub(f"^{STAMP} ", "", line).split(" ", 1)[0] for line in lines(tmp_path / "log" / "console.log")]
    error = [re.sub(f"^{STAMP} ", "", line).split(" ", 1)[0] for line in lines(tmp_path / "log" / "error.log")]
    assert console == ["[info]", "[notice]", "[warning]", "[error]", "[critical]", "[alert]", "[emergency]"]
    assert error == ["[error]", "[critical]", "[alert]", "[emergency]"]


def test_notice_level_drops_info_access_lines(configure: Configure, tmp_path: Path) -> None:
    configure(LagerConfig(handlers=(LogHandler("console.log", "notice"),)))
    logging.getLogger("aiohttp.access").info('127.0.0.1 "POST /messages/q HTTP/1.1" 200')
    logging.getLogger("pylmq.access").info("GET %s 200", "/messages/q")
    logging.getLogger("pylmq.node").log(NOTICE, "started")
    got = lines(tmp_path / "log" / "console.log")
    assert len(got) == 1 and got[0].endswith(" started"), got
    assert not logging.getLogger("aiohttp.access").isEnabledFor(logging.INFO), "info must be cut off at the root"


def test_stdlib_records_get_the_same_layout(configure: Configure, tmp_path: Path) -> None:
    configure()
    logging.getLogger("pylmq.queue").warning("queue %s slow", "q")
    (line,) = lines(tmp_path / "log" / "console.log")
    where = "pylmq.queue:test_stdlib_records_get_the_same_layout"
    assert re.fullmatch(f"{STAMP} \\[warning\\] <main>@{where}:\\d+ queue q slow", line), line


def test_daily_rotation_at_midnight_keeps_count_files(configure: Configure, tmp_path: Path) -> None:
    clock = ManualClock(local(2026, 3, 10, 23, 59, 59))
    configure(LagerConfig(handlers=(LogHandler("console.log", "info", size=0, date="$D0", count=3),),
                          crash_log=None), clock=clock)  # fmt: skip
    log = logging.getLogger("t")
    for day in range(10, 15):  # five days, four midnights
        log.info(f"day {day} late")
        clock.advance(2)  # past midnight
        log.info(f"day {day + 1} early")
        clock.set(local(2026, 3, day + 1, 23, 59, 59))
    log_dir = tmp_path / "log"
    names = ["console.log", "console.log.0", "console.log.1", "console.log.2"]
    assert sorted(p.name for p in log_dir.iterdir()) == names
    messages = {name: [line.split(" ", 4)[4] for line in lines(log_dir / name)] for name in names}
    assert messages == {
        "console.log": ["day 15 early"],
        "console.log.0": ["day 14 early", "day 14 late"],
        "console.log.1": ["day 13 early", "day 13 late"],
        "console.log.2": ["day 12 early", "day 12 late"],
    }


def test_no_line_after_midnight_means_no_rotation_yet(configure: Configure, tmp_path: Path) -> None:
    clock = ManualClock(local(2026, 3, 10, 12, 0, 0))
    configure(LagerConfig(handlers=(LogHandler("console.log", "info"),), crash_log=None), clock=clock)
    logging.getLogger("t").info("noon")
    clock.advance(3600)
    logging.getLogger("t").info("one")
    assert not (tmp_path / "log" / "console.log.0").exists()


def test_size_rotation_and_count_zero(configure: Configure, tmp_path: Path) -> None:
    configure(LagerConfig(handlers=(LogHandler("big.log", "info", size=200, date="", count=2),
                                    LogHandler("none.log", "info", size=200, date="", count=0)),
                          crash_log=None))  # fmt: skip
    for i in range(12):
        logging.getLogger("t").info(f"line {i:02d} " + "x" * 40)
    log_dir = tmp_path / "log"
    assert sorted(p.name for p in log_dir.iterdir()) == ["big.log", "big.log.0", "big.log.1", "none.log"]

    # a line is 100..200 bytes here: each file takes two lines, then passes 200 bytes and rotates
    def messages(name: str) -> list[str]:
        return [line.split(" ")[-2] for line in lines(log_dir / name)]

    assert (messages("big.log"), messages("big.log.0"), messages("big.log.1")) == ([], ["10", "11"], ["08", "09"])
    assert messages("none.log") == []


def test_file_moved_away_is_reopened(configure: Configure, tmp_path: Path) -> None:
    clock = ManualClock(local(2026, 3, 10, 12, 0, 0))
    configure(clock=clock)
    log = logging.getLogger("t")
    log.info("before")
    console = tmp_path / "log" / "console.log"
    console.rename(tmp_path / "log" / "console.log.moved")
    clock.advance(2)
    log.info("after")
    assert [line.rsplit(" ", 1)[1] for line in lines(console)] == ["after"]


def test_logged_exception_is_one_line_and_a_crash_report(configure: Configure, tmp_path: Path) -> None:
    configure()
    try:
        empty: dict[str, int] = {}
        empty["missing"]
    except KeyError:
        logging.getLogger("pylmq.api").exception("request failed %s", pairs(path="/messages/q"))
    (line,) = lines(tmp_path / "log" / "error.log")
    assert line.endswith(" request failed path=/messages/q: KeyError: 'missing'"), line
    crash = (tmp_path / "log" / "crash.log").read_text()
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d =ERROR REPORT====\n", crash), crash
    assert "Traceback (most recent call last)" in crash and 'empty["missing"]' in crash


async def test_unhandled_task_crash_goes_to_crash_log(configure: Configure, tmp_path: Path) -> None:
    configure()
    install_crash_handler()

    async def worker() -> None:
        raise RuntimeError("queue worker broke")

    task = asyncio.get_running_loop().create_task(worker(), name="pylmq-worker")
    await asyncio.sleep(0.01)
    assert task.done()
    del task
    gc.collect()  # an exception never retrieved is reported when the task is collected
    error = lines(tmp_path / "log" / "error.log")
    assert len(error) == 1 and error[0].endswith("task pylmq-worker crashed: RuntimeError: queue worker broke"), error
    crash = (tmp_path / "log" / "crash.log").read_text()
    assert "=CRASH REPORT====\ntask pylmq-worker crashed\nTraceback" in crash
    assert 'raise RuntimeError("queue worker broke")' in crash


def test_log_crash_for_task_owners(configure: Configure, tmp_path: Path) -> None:
    configure()
    log_crash("meter ticker", ValueError("bad tick"))
    assert lines(tmp_path / "log" / "console.log")[0].endswith("meter ticker crashed: ValueError: bad tick")
    assert "=CRASH REPORT====" in (tmp_path / "log" / "crash.log").read_text()


@pytest.mark.parametrize(
    ("spec", "now", "expected"),
    [
        ("$D0", (2026, 3, 10, 23, 59, 59), (2026, 3, 11, 0, 0)),
        ("$D0", (2026, 3, 11, 0, 0, 0), (2026, 3, 12, 0, 0)),
        ("$D23", (2026, 3, 10, 22, 0, 0), (2026, 3, 10, 23, 0)),
        ("$D23", (2026, 3, 10, 23, 30, 0), (2026, 3, 11, 23, 0)),
        ("$W0D23", (2026, 3, 10, 12, 0, 0), (2026, 3, 15, 23, 0)),  # 2026-03-15 is a Sunday
        ("$M1D0", (2026, 3, 10, 12, 0, 0), (2026, 4, 1, 0, 0)),
        ("$ML", (2026, 2, 10, 12, 0, 0), (2026, 2, 28, 0, 0)),
    ],
)
def test_next_rotation_time(
    spec: str, now: tuple[int, int, int, int, int, int], expected: tuple[int, int, int, int, int]
) -> None:
    parsed = parse_date_spec(spec)
    assert parsed is not None
    assert next_rotation(parsed, dt.datetime(*now)) == dt.datetime(*expected)


def test_settings_log_dir_places_every_file(tmp_path: Path) -> None:
    from pylmq.config import Settings

    root_level = logging.getLogger().level
    setup = configure_logging(Settings(log_dir=tmp_path / "elsewhere"))
    try:
        logging.getLogger("t").error("disk full")
    finally:
        setup.close()
        logging.getLogger().setLevel(root_level)
    assert sorted(p.name for p in (tmp_path / "elsewhere").iterdir()) == ["console.log", "crash.log", "error.log"]
    assert lines(tmp_path / "elsewhere" / "error.log")[0].endswith(" disk full")
