"""Per-message push options of the HTTP and MessagePack-RPC APIs (pylmq's extensions).

Both APIs name them alike: HTTP as query parameters of a push (``POST /messages/q?delay=5``),
MessagePack-RPC as a map, the third argument of ``push``. Times are seconds *relative to now*
on the wire; :func:`push_options` makes them absolute with the node's clock, as
:class:`~pylmq.core.message.PushOptions` holds them.

======== ========================================== ==============================================
name     value                                       meaning
======== ========================================== ==============================================
delay    seconds, 0 to MAX_SECONDS                   not delivered before now + delay
ttl      seconds, > delay, up to MAX_SECONDS         expires at now + ttl (queue_server's rule)
retry    0 to MAX_RETRY, or ``infinity``             redeliveries after the first (else the queue's)
interval seconds, > 0, up to MAX_SECONDS             this message's timeout (else the queue's)
priority 0 to 255                                    higher first among due messages
once     ``1``/``true`` or ``0``/``false``           at most one delivery, never redelivered
======== ========================================== ==============================================

A push with none of these names is LMQ's push, answered as LMQ answers it. Any other parameter
is left alone (LMQ ignores what it does not know). A bad value is :class:`InvalidOptions`
naming the option, raised before anything is pushed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

from pylmq.core.message import Inherit, PushOptions, Retry
from pylmq.core.props import MAX_RETRY, MAX_SECONDS
from pylmq.errors import InvalidOptions

__all__ = ["MAX_PRIORITY", "OPTION_NAMES", "has_options", "push_options"]

OPTION_NAMES: Final = ("delay", "ttl", "retry", "interval", "priority", "once")
MAX_PRIORITY: Final = 255

# A plain decimal (what a query string carries): no sign, no "nan"/"inf", no "0x".
_DECIMAL = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_INTEGER = re.compile(r"\d{1,20}")
_TRUE: Final = ("1", "true", b"1", b"true")
_FALSE: Final = ("0", "false", b"0", b"false")


def has_options(params: Mapping[Any, Any]) -> bool:
    """Whether ``params`` (a query or an RPC options map) names any push option."""
    return any(name in params for name in OPTION_NAMES)


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _seconds(name: str, value: Any) -> float:
    """A number of seconds from 0 to MAX_SECONDS, as text (HTTP) or a number (RPC)."""
    value = _text(value)
    if isinstance(value, str):
        f = float(value) if len(value) <= 32 and _DECIMAL.fullmatch(value) else math.nan
    elif isinstance(value, int | float) and not isinstance(value, bool):
        f = float(value) if not isinstance(value, int) or abs(value) < 2**53 else math.inf
    else:
        f = math.nan
    if not math.isfinite(f) or not 0 <= f <= MAX_SECONDS:
        raise InvalidOptions(f"{name} must be a number of seconds from 0 to {MAX_SECONDS}, got {value!r:.40}")
    return f


def _integer(name: str, value: Any, top: int) -> int:
    value = _text(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        n = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        n = -1
    if not 0 <= n <= top:
        raise InvalidOptions(f"{name} must be a whole number from 0 to {top}, got {value!r:.40}")
    return n


def _retry(value: Any) -> Retry:
    if _text(value) == "infinity":
        return None
    try:
        return _integer("retry", value, MAX_RETRY)
    except InvalidOptions:
        detail = f'retry must be a whole number from 0 to {MAX_RETRY} or "infinity", got {value!r:.40}'
        raise InvalidOptions(detail) from None


def _flag(name: str, value: Any) -> bool:
    if value is True or value in _TRUE or (type(value) is int and value == 1):
        return True
    if value is False or value in _FALSE or (type(value) is int and value == 0):
        return False
    raise InvalidOptions(f"{name} must be 1, true, 0 or false, got {value!r:.40}")


def push_options(params: Mapping[Any, Any], now: float) -> PushOptions | None:
    """The options named in ``params`` with times made absolute from ``now``; None when it
    names none (LMQ's push). Keys may be str or bytes (old msgpack clients send raw)."""
    given = {k: v for k, v in ((_text(k), v) for k, v in params.items()) if k in OPTION_NAMES}
    if not given:
        return None
    delay = _seconds("delay", given["delay"]) if "delay" in given else 0.0
    ttl = _seconds("ttl", given["ttl"]) if "ttl" in given else None
    interval = _seconds("interval", given["interval"]) if "interval" in given else None
    retry: Retry | Inherit = _retry(given["retry"]) if "retry" in given else Inherit.QUEUE
    priority = _integer("priority", given["priority"], MAX_PRIORITY) if "priority" in given else 0
    once = _flag("once", given["once"]) if "once" in given else False
    if ttl is not None and ttl <= delay:
        raise InvalidOptions(f"ttl must be after delay: ttl {ttl:g} s is not after delay {delay:g} s")
    if interval is not None and interval <= 0:
        raise InvalidOptions("interval must be more than 0 seconds")
    if once and retry not in (0, Inherit.QUEUE):
        raise InvalidOptions("once means one delivery: it cannot take a retry other than 0")
    if once and interval is not None:
        raise InvalidOptions("once means one delivery: it cannot take an interval")
    return PushOptions(
        not_before=now + delay if delay > 0 else None,
        expires=now + ttl if ttl is not None else None,
        interval=interval,
        retry=0 if once else retry,
        priority=priority,
        once=once,
    )
