"""Whole numbers from client text: ASCII digits only, bounded, for every front end."""

from __future__ import annotations

from pylmq.wire.numbers import whole_number


def test_ascii_digits_within_the_bound_only() -> None:
    assert whole_number("007", 9) == 7
    assert whole_number("9" * 9, 9) == 999_999_999
    assert whole_number("9" * 10, 9) is None
    for text in ("", "²", "\uff11", "1.0", "+1", " 1", "-1", "1e3", "0x1"):
        assert whole_number(text, 9) is None, text


def test_signed_counts_the_digits_after_the_minus() -> None:
    assert whole_number("-12", 2, signed=True) == -12
    assert whole_number("-123", 2, signed=True) is None
    assert whole_number("-", 2, signed=True) is None
    assert whole_number("--1", 2, signed=True) is None
