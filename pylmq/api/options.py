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
naming the option, raised before anything is pushed; the ranges are checked by
:func:`pylmq.core.options.relative_options`, the one rule for every front end.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any, Final

from pylmq.core.manager import MAX_BATCH, QueueManager
from pylmq.core.message import Inherit, Item, PushOptions
from pylmq.core.options import check_options, relative_options
from pylmq.core.queue import Queue
from pylmq.errors import BadRequest, InvalidOptions
from pylmq.wire.numbers import whole_number

__all__ = ["OPTION_NAMES", "has_options", "push_all_with", "push_many_with", "push_options"]

OPTION_NAMES: Final = ("delay", "ttl", "retry", "interval", "priority", "once")

# A plain decimal (what a query string carries): no sign, no "nan"/"inf", no "0x", and ASCII
# digits only (float() and int() would also read other scripts' digits, such as "\uff11").
_DECIMAL = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_TRUE: Final = ("1", "true", b"1", b"true")
_FALSE: Final = ("0", "false", b"0", b"false")


def has_options(params: Mapping[Any, Any]) -> bool:
    """Whether ``params`` (a query or an RPC options map) names any push option."""
    return any(name in params for name in OPTION_NAMES)


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _number(name: str, value: Any) -> Any:
    """A number as text (HTTP) or as itself (RPC); the range is the core's to check."""
    value = _text(value)
    if isinstance(value, str):
        if len(value) <= 32 and _DECIMAL.fullmatch(value):
            return float(value)
        raise InvalidOptions(f"'{name}' must be a number of seconds, got {value!r:.40}")
    return value


def _integer(name: str, value: Any) -> Any:
    value = _text(value)
    if isinstance(value, str):
        if (n := whole_number(value, 20)) is not None:
            return n
        raise InvalidOptions(f"'{name}' must be a whole number, got {value!r:.40}")
    return value


def _retry(value: Any) -> Any:
    return None if _text(value) == "infinity" else _integer("retry", value)


def _flag(name: str, value: Any) -> bool:
    if value is True or value in _TRUE or (type(value) is int and value == 1):
        return True
    if value is False or value in _FALSE or (type(value) is int and value == 0):
        return False
    raise InvalidOptions(f"'{name}' must be 1, true, 0 or false, got {value!r:.40}")


def push_options(params: Mapping[Any, Any], now: float) -> PushOptions | None:
    """The options named in ``params`` with times made absolute from ``now``; None when it
    names none (LMQ's push). Keys may be str or bytes (old msgpack clients send raw)."""
    given = {k: v for k, v in ((_text(k), v) for k, v in params.items()) if k in OPTION_NAMES}
    if not given:
        return None
    return relative_options(
        now,
        delay=_number("delay", given["delay"]) if "delay" in given else None,
        ttl=_number("ttl", given["ttl"]) if "ttl" in given else None,
        interval=_number("interval", given["interval"]) if "interval" in given else None,
        retry=_retry(given["retry"]) if "retry" in given else Inherit.QUEUE,
        priority=_integer("priority", given["priority"]) if "priority" in given else 0,
        once=_flag("once", given["once"]) if "once" in given else False,
    )


def _refuse_accum(q: Queue) -> None:
    # The core's rule for push_with, applied to every queue before any is pushed.
    if q.props.accum > 0:
        raise InvalidOptions(
            f"queue {q.name!r} accumulates messages (accum {q.props.accum} s): "
            "a push with options or a returned id needs a queue with accum 0"
        )


async def push_all_with(
    manager: QueueManager, regex: str | bytes, item: Item, options: PushOptions
) -> list[tuple[str, bytes]]:
    """A fan-out push with options: to every existing queue whose name matches, in name order,
    one ``(queue, uuid)`` each, with one commit. Every queue is checked before any is pushed."""
    checked = check_options(options, manager.clock.now())
    queues = sorted(await manager.match(regex), key=attrgetter("name"))
    for q in queues:
        _refuse_accum(q)
    out = [(q.name, await q.push_with(item, checked)) for q in queues]
    await manager.store.barrier()
    return out


async def push_many_with(manager: QueueManager, name: str, items: Sequence[Item], options: PushOptions) -> list[bytes]:
    """A batch push with options (the same for every item): the uuids in order, one commit."""
    if len(items) > MAX_BATCH:
        raise BadRequest(f"a batch holds at most {MAX_BATCH} messages, got {len(items)}")
    checked = check_options(options, manager.clock.now())
    q = await manager.ensure(name)  # refuses a virtual name: a batch goes to one queue
    _refuse_accum(q)
    uuids = [await q.push_with(item, checked) for item in items]
    await manager.store.barrier()
    return uuids
