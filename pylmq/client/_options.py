"""Per-message push options as the clients send them (pylmq's extension; Erlang LMQ has none):
HTTP query parameters or the MessagePack-RPC options map, both of the same names."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from pylmq.errors import BadRequest

__all__ = ["DeadLetterInfo", "PushOptions"]


@dataclass(frozen=True, slots=True)
class PushOptions:
    """What a push may ask beyond LMQ's push, all optional. Times are seconds from now:

    - ``delay``: not delivered before then;
    - ``ttl``: expires then (after ``delay``). queue_server's rule: an expired message never
      delivered is still delivered once; one delivered before is not redelivered (it goes to
      the queue's dead-letter queue, if it has one);
    - ``retry``: redeliveries after the first (``"infinity"``: unlimited), instead of the queue's;
    - ``interval``: this message's redelivery timeout, instead of the queue's; with no
      ``retry``, it is redelivered every ``interval`` until ``ttl``;
    - ``priority``: 0-255, higher first among messages due;
    - ``once``: one delivery, never redelivered (at-most-once).
    """

    delay: float | None = None
    ttl: float | None = None
    retry: int | Literal["infinity"] | None = None
    interval: float | None = None
    priority: int | None = None
    once: bool = False

    def params(self) -> dict[str, Any]:
        """The options given, as an RPC map (numbers); :meth:`query` for HTTP."""
        out: dict[str, Any] = {}
        for name in ("delay", "ttl", "interval"):
            value = getattr(self, name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                    raise BadRequest(f"{name} must be a number of seconds, got {value!r}")
                out[name] = value
        if self.retry is not None:
            out["retry"] = self.retry
        if self.priority is not None:
            out["priority"] = self.priority
        if self.once:
            out["once"] = True
        return out

    def query(self) -> dict[str, str]:
        """The options given, as HTTP query parameters."""
        return {
            k: ("1" if v is True else repr(v) if isinstance(v, float) else str(v)) for k, v in self.params().items()
        }


@dataclass(frozen=True, slots=True)
class DeadLetterInfo:
    """Where a dead letter came from: its origin queue, its failed deliveries, when the last one
    was (Unix seconds, or None) and why it died (``retries`` or ``expired``)."""

    origin: str
    failures: int
    last_delivery: float | None
    reason: str
