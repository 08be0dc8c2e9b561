"""The node's summary of a queue (pylmq.pgstore.summary): a waittime never later than a record
another node made deliverable, and no loop of empty pulls while another node holds the first."""

from __future__ import annotations

import pytest

from pylmq.pgstore.messages import QueueState
from pylmq.pgstore.summary import HOLD_FIRST, HOLD_MAX, Summary

NOW = 1000.0


def test_a_notified_record_lowers_the_waittime_at_once() -> None:
    s = Summary(1)
    s.apply(QueueState(1, 5, 1, NOW + 30), s.heard, NOW)  # only a delivery in flight
    assert s.waittime(NOW) == 30
    s.due(NOW + 2)
    assert s.waittime(NOW) == 2


def test_a_record_notified_during_an_operation_survives_its_older_state() -> None:
    s = Summary(1)
    since = s.heard
    s.due(NOW)  # committed after the operation's snapshot, heard before its answer
    s.apply(QueueState(0, 0, 0, None), since, NOW)
    assert s.waittime(NOW) == 0
    s.apply(QueueState(0, 0, 0, None), s.heard, NOW)  # a later operation's state is the truth
    assert s.waittime(NOW) is None


def test_more_notifications_than_remembered_mean_look_now() -> None:
    s = Summary(1)
    since = s.heard
    for i in range(200):
        s.due(NOW + 100 + i)
    s.apply(QueueState(0, 0, 0, None), since, NOW)
    assert s.waittime(NOW) == 0


def test_an_empty_pull_of_a_due_looking_queue_holds_doubling_until_news() -> None:
    s = Summary(1)
    s.apply(QueueState(1, 1, 0, NOW - 1), s.heard, NOW)  # due, but another node is taking it
    s.missed(s.heard, NOW)
    assert s.waittime(NOW) == pytest.approx(HOLD_FIRST)
    s.missed(s.heard, NOW)
    assert s.waittime(NOW) == pytest.approx(2 * HOLD_FIRST)
    for _ in range(20):
        s.missed(s.heard, NOW)
    assert s.waittime(NOW) == pytest.approx(HOLD_MAX)
    s.due(NOW - 1)  # news about the queue: look at once
    assert s.waittime(NOW) == 0


def test_counts_split_by_in_flight_and_first_due() -> None:
    s = Summary(1)
    s.apply(QueueState(3, 9, 1, NOW - 1), s.heard, NOW)
    assert s.counts(NOW) == (2, 1, 0)
    s.apply(QueueState(2, 9, 0, NOW + 5), s.heard, NOW)
    assert s.counts(NOW) == (0, 0, 2)
