"""Log lines stay one line each: control characters in what a line quotes are escaped."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pylmq.config import LagerConfig
from pylmq.core.clock import ManualClock
from pylmq.log import configure_logging, escape_controls, format_line, pairs


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("q\n2026-01-01 00:00:00.000 [error] forged", "q\\n2026-01-01 00:00:00.000 [error] forged"),
        ("a\rb\tc", "a\\rb\\tc"),
        ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
        ("nul\x00 del\x7f c1\x85", "nul\\x00 del\\x7f c1\\x85"),
        ("line\u2028sep", "line\\u2028sep"),
        ("q\u202eevil\u202c \u2067x\u2069 \u200f\u061c", "q\\u202eevil\\u202c \\u2067x\\u2069 \\u200f\\u061c"),
        ("plain é ü 日本 \\d+ %s", "plain é ü 日本 \\d+ %s"),  # left exactly as it is
    ],
)
def test_control_characters_are_escaped(raw: str, shown: str) -> None:
    assert escape_controls(raw) == shown


def test_a_value_with_a_newline_cannot_forge_a_line(tmp_path: Path) -> None:
    setup = configure_logging(LagerConfig(), tmp_path / "log", clock=ManualClock(1_700_000_000.0))
    try:
        logging.getLogger("pylmq.access").info("rpc %s push %s ok", "peer", "q\n9999-01-01 [emergency] forged")
        logging.getLogger("pylmq.api").warning("bad %s", pairs(queue="x\r\ny"))
        try:
            raise ValueError("why\nnot")
        except ValueError:
            logging.getLogger("pylmq.api").exception("failed on %s", "q\x1b]0;title\x07")
    finally:
        setup.close()
    lines = (tmp_path / "log" / "console.log").read_text().splitlines()
    assert len(lines) == 3, lines
    assert lines[0].endswith("rpc peer push q\\n9999-01-01 [emergency] forged ok"), lines[0]
    assert lines[1].endswith("bad queue='x\\r\\ny'"), lines[1]
    assert lines[2].endswith("failed on q\\x1b]0;title\\x07: ValueError: why\\nnot"), lines[2]


def test_format_line_keeps_one_record_on_one_line() -> None:
    record = logging.LogRecord("pylmq.access", logging.INFO, __file__, 1, "GET %s 200", ("/m/a\nb",), None)
    line = format_line(record, 1_700_000_000.0)
    assert line.count("\n") == 1 and line.endswith("GET /m/a\\nb 200\n"), line
