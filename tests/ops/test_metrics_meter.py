"""Meters: folsom's EWMA rates (per second, ticked every 5 s)."""

from __future__ import annotations

import math

import pytest

from pylmq.metrics import Meter, MeterRates


def test_first_tick_sets_every_rate_to_the_instant_rate() -> None:
    m = Meter()
    m.mark(10)
    m.tick()
    assert m.rates() == MeterRates(count=10, one=2.0, five=2.0, fifteen=2.0, day=2.0)


def test_later_ticks_decay_by_each_windows_alpha() -> None:
    m = Meter()
    m.mark(10)
    m.tick()
    m.tick()  # no events in the last 5 s
    for minutes, rate in ((1, m.one), (5, m.five), (15, m.fifteen), (1440, m.day)):
        alpha = 1 - math.exp(-5 / 60 / minutes)
        assert rate == pytest.approx(2.0 * (1 - alpha)), f"{minutes} min rate"
    assert m.one < m.five < m.fifteen < m.day


def test_steady_rate_converges() -> None:
    m = Meter()
    for _ in range(200):  # 1000 s at 3 events per second
        m.mark(15)
        m.tick()
    assert m.one == pytest.approx(3.0)
    assert m.fifteen == pytest.approx(3.0, rel=1e-2)
    assert m.count == 3000


def test_marks_before_tick_only_count() -> None:
    m = Meter()
    m.mark()
    m.mark(2)
    assert m.rates() == MeterRates(3, 0.0, 0.0, 0.0, 0.0)
