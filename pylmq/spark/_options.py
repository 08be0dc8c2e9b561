"""The options of the ``lmq`` data source, parsed once into a frozen, picklable record.

Spark hands a data source its options as a case-insensitive map of strings; every task gets a
pickled copy of whatever the reader or writer holds, so this record holds only strings and
numbers and no client. A bad option is a :class:`~pylmq.errors.BadRequest` naming the option
and the value, raised on the driver before any message is pulled or pushed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, overload

from pylmq.client import parse_http_urls, parse_rpc_addresses
from pylmq.errors import BadRequest

__all__ = ["Api", "LmqOptions", "read_options", "write_options"]

Api = Literal["http", "rpc"]
AckOn = Literal["trigger", "commit"]

RPC_SCHEMES = ("rpc", "msgpack-rpc", "msgpack")

KNOWN = {
    "url",
    "queue",
    "qre",
    "maxmessages",
    "numpartitions",
    "timeout",
    "maxmessagespertrigger",
    "extendinterval",
    "ackon",
    "pipeline",
    "requesttimeout",
    # Spark passes these to every source; they are not ours but are not mistakes either.
    "path",
    "paths",
    "checkpointlocation",
}


@dataclass(frozen=True, slots=True)
class LmqOptions:
    urls: tuple[str, ...]
    """Node URLs in the client's form (``http://h:p`` or ``h:p`` for MessagePack-RPC), tried in turn."""
    api: Api
    queue: str | None = None
    qre: str | None = None
    max_messages: int | None = None
    """Batch read: messages pulled in all, over all partitions; ``None``: until the queue has
    none deliverable."""
    num_partitions: int = 2
    timeout: float = 0.0
    """Seconds a pull waits for a message when the queue is empty."""
    max_messages_per_trigger: int = 1000
    extend_interval: float | None = None
    """Stream read: seconds between ``ext`` of the messages in flight; ``None``: a third of the
    queue's timeout; ``0``: never."""
    ack_on: AckOn = "trigger"
    pipeline: int = 64
    """Requests in flight at once per task (pushes, pulls, acks)."""
    request_timeout: float = 30.0

    @property
    def url(self) -> str:
        return ",".join(self.urls)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


@overload
def _positive_int(opts: dict[str, str], key: str, name: str, default: int) -> int: ...
@overload
def _positive_int(opts: dict[str, str], key: str, name: str, default: None) -> int | None: ...
def _positive_int(opts: dict[str, str], key: str, name: str, default: int | None) -> int | None:
    text = opts.get(key)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"lmq option {name!r} must be a positive integer, got {text!r}") from None
    if value < 1:
        raise BadRequest(f"lmq option {name!r} must be a positive integer, got {text!r}")
    return value


def _seconds(opts: dict[str, str], key: str, name: str, default: float | None) -> float | None:
    text = opts.get(key)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        raise BadRequest(f"lmq option {name!r} must be a number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise BadRequest(f"lmq option {name!r} must be a finite number of seconds >= 0, got {text!r}")
    return value


def _urls(opts: dict[str, str]) -> tuple[tuple[str, ...], Api]:
    text = opts.get("url", "").strip()
    if not text:
        raise BadRequest("lmq option 'url' is required (e.g. http://127.0.0.1:9980 or rpc://127.0.0.1:18800)")
    items = [u.strip() for u in text.split(",") if u.strip()]
    apis = {"rpc" if u.split("://", 1)[0].lower() in RPC_SCHEMES and "://" in u else "http" for u in items}
    if len(apis) != 1:
        raise BadRequest(f"lmq option 'url' mixes HTTP and MessagePack-RPC nodes: {text!r}")
    api: Api = "rpc" if apis == {"rpc"} else "http"
    if api == "http":
        # Validates here, on the driver, with the client's own rules.
        parse_http_urls(items)
        return tuple(items), api
    plain = tuple(u.split("://", 1)[1] for u in items)
    parse_rpc_addresses(list(plain))
    return plain, api


def _common(options: Mapping[str, str], *, stream_defaults: bool) -> tuple[dict[str, str], LmqOptions]:
    opts = _lower(options)
    unknown = sorted(k for k in opts if k not in KNOWN and not k.startswith("spark."))
    if unknown:
        raise BadRequest(f"unknown lmq option(s): {', '.join(unknown)}")
    urls, api = _urls(opts)
    queue = opts.get("queue") or None
    qre = opts.get("qre") or None
    if queue is not None and qre is not None:
        raise BadRequest("lmq options 'queue' and 'qre' exclude each other: give one")
    ack_on = opts.get("ackon", "trigger").lower()
    if ack_on not in ("trigger", "commit"):
        raise BadRequest(f"lmq option 'ackOn' must be 'trigger' or 'commit', got {opts['ackon']!r}")
    timeout = _seconds(opts, "timeout", "timeout", 1.0 if stream_defaults else 0.0)
    request_timeout = _seconds(opts, "requesttimeout", "requestTimeout", 30.0)
    assert timeout is not None and request_timeout is not None
    return opts, LmqOptions(
        urls=urls,
        api=api,
        queue=queue,
        qre=qre,
        max_messages=_positive_int(opts, "maxmessages", "maxMessages", None),
        num_partitions=_positive_int(opts, "numpartitions", "numPartitions", 1 if stream_defaults else 2),
        timeout=timeout,
        max_messages_per_trigger=_positive_int(opts, "maxmessagespertrigger", "maxMessagesPerTrigger", 1000),
        extend_interval=_seconds(opts, "extendinterval", "extendInterval", None),
        ack_on="commit" if ack_on == "commit" else "trigger",
        pipeline=_positive_int(opts, "pipeline", "pipeline", 64),
        request_timeout=request_timeout,
    )


def read_options(options: Mapping[str, str], *, stream: bool = False) -> LmqOptions:
    """Options of a batch (``stream=False``) or streaming read: ``url`` and one of ``queue``/``qre``."""
    _, parsed = _common(options, stream_defaults=stream)
    if parsed.queue is None and parsed.qre is None:
        raise BadRequest("lmq read needs option 'queue' (one queue) or 'qre' (a regex over queue names)")
    return parsed


def write_options(options: Mapping[str, str]) -> LmqOptions:
    """Options of a write: ``url``; ``queue`` (the default target, a ``queue`` column overrides it
    row by row) or ``qre`` (push every row to every existing queue whose name matches)."""
    _, parsed = _common(options, stream_defaults=False)
    return parsed
