"""Push options as the HTTP query and the RPC options map give them -> PushOptions, and the
refusals that name the option."""

from __future__ import annotations

from typing import Any

import pytest

from pylmq.api.options import has_options, push_options
from pylmq.core.message import Inherit, PushOptions
from pylmq.core.props import MAX_SECONDS
from pylmq.errors import InvalidOptions

NOW = 1_700_000_000.0


def test_no_option_names_is_lmqs_push() -> None:
    assert push_options({"t": "5", "cf": "msgpack", "qre": "a"}, NOW) is None
    assert not has_options({"t": "5"})
    assert has_options({"once": "1"})


def test_query_text_becomes_absolute_times() -> None:
    opts = push_options({"delay": "2.5", "ttl": "60", "interval": "3", "priority": "7"}, NOW)
    assert opts == PushOptions(
        not_before=NOW + 2.5, expires=NOW + 60, interval=3.0, retry=Inherit.QUEUE, priority=7, once=False
    )


def test_rpc_numbers_and_raw_keys() -> None:
    opts = push_options({b"delay": 1, b"retry": b"infinity", "priority": 255}, NOW)
    assert opts == PushOptions(not_before=NOW + 1, retry=None, priority=255)


@pytest.mark.parametrize("value", ["1", "true", True, 1, b"true"])
def test_once_true_means_one_delivery(value: Any) -> None:
    assert push_options({"once": value}, NOW) == PushOptions(once=True)


@pytest.mark.parametrize("value", ["0", "false", False, 0])
def test_once_false_changes_nothing(value: Any) -> None:
    assert push_options({"once": value}, NOW) == PushOptions()


def test_zero_delay_is_now_and_retry_counts() -> None:
    assert push_options({"delay": "0", "retry": "3"}, NOW) == PushOptions(not_before=NOW, retry=3)


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"delay": "soon"}, "delay"),
        ({"delay": "-1"}, "delay"),
        ({"delay": ""}, "delay"),
        ({"delay": "nan"}, "delay"),
        ({"delay": "inf"}, "delay"),
        ({"delay": -1}, "delay"),
        ({"delay": True}, "delay"),
        ({"delay": str(MAX_SECONDS * 2)}, "delay"),
        ({"ttl": "x"}, "ttl"),
        ({"ttl": "5", "delay": "5"}, "ttl"),
        ({"ttl": "5", "delay": "6"}, "ttl"),
        ({"ttl": "0"}, "ttl"),
        ({"retry": "foo"}, "retry"),
        ({"retry": "-1"}, "retry"),
        ({"retry": 1.5}, "retry"),
        ({"retry": str(2**64)}, "retry"),
        ({"interval": "0"}, "interval"),
        ({"interval": "abc"}, "interval"),
        ({"priority": "300"}, "priority"),
        ({"priority": "-1"}, "priority"),
        ({"priority": "1.5"}, "priority"),
        ({"priority": 256}, "priority"),
        ({"once": "yes"}, "once"),
        ({"once": "1", "retry": "2"}, "once"),
        ({"once": "1", "interval": "2"}, "once"),
    ],
)
def test_bad_values_name_the_option(params: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidOptions) as err:
        push_options(params, NOW)
    assert f"'{named}'" in err.value.detail
    assert err.value.http_status == 400 and err.value.reason == "invalid_options"
