"""lmq-admin's peek, dead, requeue and virtual: argument parsing, and the printing of the
lmq_console terms (no node; the release tests run them against a started node)."""

from __future__ import annotations

import pytest

from pylmq.api.peek import DEFAULT_PEEK, MAX_PEEK_BYTES
from pylmq.cli.admin import build_parser
from pylmq.erlang.terms import Atom
from pylmq.node.console import format_peek, format_virtual, from_term, to_term

A = Atom
ID1 = "00000000-0000-4000-8000-000000000001"
ID2 = "00000000-0000-4000-8000-000000000002"


def _parse(*argv: str) -> dict[str, object]:
    return vars(build_parser().parse_args(["--root", "/r", *argv]))


def test_peek_and_dead_take_a_cursor_a_count_and_bodies() -> None:
    assert _parse("peek", "q") == {
        "root": "/r", "command": "peek", "queue": "q", "after": None, "n": DEFAULT_PEEK, "body": False,
    }  # fmt: skip
    got = _parse("peek", "q", "--after", ID1, "-n", "5", "--body")
    assert (got["after"], got["n"], got["body"]) == (ID1, 5, True)
    assert _parse("dead", "dlq", "-n", "1000")["n"] == 1000


def test_requeue_and_virtual_arguments() -> None:
    got = _parse("requeue", "dlq", "-n", "3", "--to", "other")
    assert (got["queue"], got["n"], got["to"]) == ("dlq", 3, "other")
    assert _parse("requeue", "dlq")["to"] is None
    assert _parse("virtual")["action"] is None
    assert _parse("virtual", "list")["action"] == "list"
    got = _parse("virtual", "set", "v", "a", "b")
    assert (got["action"], got["name"], got["queues"]) == ("set", "v", ["a", "b"])
    assert _parse("virtual", "delete", "v")["name"] == "v"


@pytest.mark.parametrize(
    "argv",
    [
        ("peek",),
        ("peek", "q", "-n", "0"),
        ("peek", "q", "-n", "1001"),
        ("peek", "q", "-n", "x"),
        ("dead", "q", "--body"),
        ("requeue", "dlq", "-n", "10001"),
        ("virtual", "set", "v"),
        ("virtual", "drop", "v"),
    ],
)
def test_bad_arguments_exit_2_with_usage(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args(["--root", "/r", *argv])
    assert done.value.code == 2
    assert "usage: lmq-admin" in capsys.readouterr().err


def _entry(id_: str, **extra: object) -> dict[str, object]:
    base: dict[str, object] = {
        "id": id_, "state": "available", "retry": 2, "attempts": 0, "ts": 0.0, "expires": None,
        "priority": 0, "size": 5, "type": "normal", "content_type": "text/plain",
    }  # fmt: skip
    return base | extra


def test_terms_round_trip() -> None:
    entry = _entry(ID1, dead={"origin": "q", "failures": 3, "last_delivery": None, "reason": "retries"})
    term = to_term([entry])
    assert term[0][0] == (A("id"), ID1.encode())
    assert from_term(term) == [entry]


def test_peek_prints_one_line_per_record_and_the_body_when_asked() -> None:
    term = to_term([_entry(ID1, body="hello"), _entry(ID2, state="processing", retry="infinity", body_base64="/w==")])
    lines = format_peek(term, "q", 100).splitlines()
    assert lines[0].split()[:4] == ["ID", "STATE", "RETRY", "ATTEMPTS"]
    assert lines[1].split()[:6] == [ID1, "available", "2", "0", "0", "1970-01-01"]
    assert lines[2] == "  body: 'hello'"
    assert lines[3].split()[:3] == [ID2, "processing", "infinity"]
    assert lines[4] == "  body (base64): '/w=='"
    assert len(lines) == 5  # a page not full: no hint of more


def test_a_full_page_says_how_to_see_the_next() -> None:
    out = format_peek(to_term([_entry(ID1), _entry(ID2)]), "q", 2)
    assert out.splitlines()[-1] == f"(more may follow: lmq-admin peek q --after {ID2})"
    assert "holds no messages" in format_peek([], "q", 2)


def test_a_page_cut_at_the_byte_budget_says_how_to_see_the_next() -> None:
    # Two records where ten were asked, their sizes at the node's budget: it stopped there.
    big = [_entry(ID1, body="a"), _entry(ID2, body="b")]
    big[0]["size"] = big[1]["size"] = MAX_PEEK_BYTES // 2
    out = format_peek(to_term(big), "q", 10)
    assert out.splitlines()[-1] == f"(more may follow: lmq-admin peek q --after {ID2})"
    big[1]["size"] = MAX_PEEK_BYTES // 2 - 1  # short of the budget: the queue had no more
    assert "more may follow" not in format_peek(to_term(big), "q", 10)


def test_dead_shows_origin_failures_reason_and_skips_live_records() -> None:
    dead = {"origin": "orders", "failures": 4, "last_delivery": 86400.5, "reason": "expired"}
    out = format_peek(to_term([_entry(ID1), _entry(ID2, dead=dead)]), "dlq", 100, dead=True).splitlines()
    assert out[0].split()[:4] == ["ID", "ORIGIN", "FAILURES", "REASON"]
    assert out[1].split() == [ID2, "orders", "4", "expired", "1970-01-02", "00:00:00.500", "5"]
    assert len(out) == 2


def test_virtual_lists_each_name_and_its_queues() -> None:
    assert format_virtual([(b"v", [b"a", b"b"]), (b"w", [b"c"])]) == "v -> a, b\nw -> c\n"
    assert format_virtual([]) == "(no virtual queues)\n"
