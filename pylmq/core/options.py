"""Validation of per-message push options (docs/message-options.md), shared by every front end.

HTTP, MessagePack-RPC and queue_server's protocol each read their own fields, then call
:func:`check_options` (absolute times) or :func:`relative_options` (seconds from now), so that
one rule decides what a valid option is and every refusal is an :class:`InvalidOptions` that
names the field.
"""

from __future__ import annotations

import math
from typing import Any

from pylmq.core.message import Inherit, PushOptions, Retry
from pylmq.core.props import MAX_RETRY, MAX_SECONDS
from pylmq.errors import InvalidOptions

__all__ = ["MAX_GROUP", "MAX_PRIORITY", "check_options", "relative_options"]

MAX_PRIORITY = 255
"""Priorities run from 0 (the default, every LMQ push) to this."""

MAX_GROUP = 128
"""Characters of a message group's name (SQS's MessageGroupId)."""


def _seconds(field: str, value: Any, *, positive: bool = False) -> float:
    """A span in seconds: a number from 0 (above 0 if ``positive``) to MAX_SECONDS."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidOptions(f"'{field}' must be a number of seconds, got {value!r}")
    f = float(value) if not isinstance(value, int) or abs(value) < 2**53 else math.inf
    if not math.isfinite(f) or f < 0 or f > MAX_SECONDS or (positive and f <= 0):
        low = "above 0" if positive else "from 0"
        raise InvalidOptions(f"'{field}' must be a number of seconds {low} to {MAX_SECONDS}, got {value!r}")
    return f


def _time(field: str, value: Any, now: float, base: float) -> float:
    """An absolute time (Unix seconds) at most MAX_SECONDS after ``base``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidOptions(f"'{field}' must be a time in Unix seconds, got {value!r}")
    f = float(value) if not isinstance(value, int) or abs(value) < 2**53 else math.inf
    if not math.isfinite(f) or f > base + MAX_SECONDS:
        raise InvalidOptions(f"'{field}' must be a time in Unix seconds at most {MAX_SECONDS} s ahead, got {value!r}")
    return f


def _retry(value: Any) -> Retry | Inherit:
    if value is Inherit.QUEUE or value is None:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RETRY:
        raise InvalidOptions(f"'retry' must be an integer from 0 to {MAX_RETRY} or infinity, got {value!r}")
    return value


def check_options(options: PushOptions, now: float) -> PushOptions:
    """``options`` checked and normalised (times as floats), or :class:`InvalidOptions`.

    ``not_before`` may lie in the past (it then means now) but not more than
    :data:`~pylmq.core.props.MAX_SECONDS` ahead; ``expires`` must come after the message is due
    and within MAX_SECONDS of it; ``interval`` is a timeout (above 0, at most MAX_SECONDS);
    ``priority`` 0 to :data:`MAX_PRIORITY`; ``once`` excludes a retry above 0 and an interval."""
    nb = options.not_before
    due = now
    if nb is not None:
        nb = _time("not_before", nb, now, now)
        due = max(now, nb)
    expires = options.expires
    if expires is not None:
        expires = _time("expires", expires, now, due)
        if options.hard is True:
            # A retention counts from the push: a message delayed past it is never delivered.
            if expires <= now:
                raise InvalidOptions(f"'expires' must come after now ({now:.3f}), got {options.expires!r}")
        elif expires <= due:
            raise InvalidOptions(f"'expires' must come after the message is due ({due:.3f}), got {options.expires!r}")
    interval = options.interval
    if interval is not None:
        interval = _seconds("interval", interval, positive=True)
    retry = _retry(options.retry)
    priority = options.priority
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= MAX_PRIORITY:
        raise InvalidOptions(f"'priority' must be an integer from 0 to {MAX_PRIORITY}, got {priority!r}")
    once = options.once
    if not isinstance(once, bool):
        raise InvalidOptions(f"'once' must be a boolean, got {once!r}")
    if once and (interval is not None or (retry is not Inherit.QUEUE and retry != 0)):
        raise InvalidOptions("'once' (a single delivery) excludes 'retry' above 0 and 'interval'")
    if options.hard is not False and (options.hard is not True or expires is None):
        raise InvalidOptions("'hard' is a boolean and needs 'expires'")
    group = options.group
    if group is not None:
        if not isinstance(group, str) or not 1 <= len(group) <= MAX_GROUP:
            raise InvalidOptions(f"'group' must be text of 1 to {MAX_GROUP} characters, got {group!r:.80}")
        if priority:
            # A group's order is its push order: a priority would reorder it.
            raise InvalidOptions("'group' excludes 'priority'")
    return PushOptions(
        nb, expires, interval, retry, priority, once, options.track is True, options.hard, group, options.dedup
    )


def relative_options(
    now: float,
    *,
    delay: Any = None,
    ttl: Any = None,
    interval: Any = None,
    retry: Any = Inherit.QUEUE,
    priority: Any = 0,
    once: Any = False,
) -> PushOptions:
    """Options given as spans in seconds from now (the HTTP and RPC extensions): ``delay``
    before the message is due, ``ttl`` until it expires (counted from now, like the delay),
    checked under those names, then by :func:`check_options`."""
    nb = None if delay is None else now + _seconds("delay", delay)
    expires = None if ttl is None else now + _seconds("ttl", ttl, positive=True)
    if expires is not None and expires <= (now if nb is None else nb):
        # Also a ttl so small that now + ttl is now at the clock's precision: named as given.
        raise InvalidOptions(f"'ttl' ({ttl!r}) must be longer than 'delay' ({0 if delay is None else delay!r})")
    return check_options(PushOptions(nb, expires, interval, retry, priority, once), now)
