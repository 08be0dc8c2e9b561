"""The one check of per-message options every front end calls (pylmq/core/options.py)."""

from __future__ import annotations

import pytest

from pylmq.core.message import Inherit, PushOptions
from pylmq.core.options import check_options, relative_options
from pylmq.core.props import MAX_SECONDS
from pylmq.errors import InvalidOptions

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("options", "field"),
    [
        (PushOptions(not_before=float("nan")), "not_before"),
        (PushOptions(not_before=NOW + MAX_SECONDS + 1), "not_before"),
        (PushOptions(not_before=True), "not_before"),
        (PushOptions(expires=NOW), "expires"),
        (PushOptions(not_before=NOW + 5, expires=NOW + 5), "expires"),
        (PushOptions(expires="soon"), "expires"),  # type: ignore[arg-type]
        (PushOptions(interval=0), "interval"),
        (PushOptions(interval=-1), "interval"),
        (PushOptions(interval=MAX_SECONDS + 1), "interval"),
        (PushOptions(retry=-1), "retry"),
        (PushOptions(retry=1.5), "retry"),  # type: ignore[arg-type]
        (PushOptions(priority=-1), "priority"),
        (PushOptions(priority=256), "priority"),
        (PushOptions(priority=True), "priority"),
        (PushOptions(once=1), "once"),  # type: ignore[arg-type]
        (PushOptions(once=True, interval=3), "once"),
        (PushOptions(once=True, retry=2), "once"),
    ],
)
def test_bad_options_are_refused_naming_the_field(options: PushOptions, field: str) -> None:
    with pytest.raises(InvalidOptions, match=f"'{field}'"):
        check_options(options, NOW)


def test_good_options_come_back_normalised() -> None:
    got = check_options(PushOptions(not_before=NOW + 1, expires=NOW + 10, interval=2, priority=255), NOW)
    assert got == PushOptions(NOW + 1.0, NOW + 10.0, 2.0, Inherit.QUEUE, 255, False)
    assert type(got.not_before) is float and type(got.interval) is float
    assert check_options(PushOptions(once=True, retry=0), NOW).once
    assert check_options(PushOptions(not_before=NOW - 50, expires=NOW + 1), NOW).not_before == NOW - 50


def test_relative_options_count_from_now_and_name_their_own_fields() -> None:
    got = relative_options(NOW, delay=5, ttl=60, retry=None, priority=3)
    assert got == PushOptions(NOW + 5, NOW + 60, None, None, 3, False)
    with pytest.raises(InvalidOptions, match="'delay'"):
        relative_options(NOW, delay=-1)
    with pytest.raises(InvalidOptions, match="'ttl'"):
        relative_options(NOW, ttl=0)
    with pytest.raises(InvalidOptions, match="'ttl'"):
        relative_options(NOW, delay=10, ttl=10)
