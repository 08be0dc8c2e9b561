"""Queue names: what a valid one is (LMQ's queues are Erlang atoms and Mnesia tables)."""

from __future__ import annotations

from typing import Any

from pylmq.errors import InvalidQueueName

__all__ = ["MAX_NAME_LENGTH", "RESERVED_NAMES", "validate_name"]

# Names of LMQ's own Mnesia tables: a queue of that name would overwrite cluster metadata.
RESERVED_NAMES = frozenset({"__lmq_info__", "__lmq_queue_info__", "schema"})
MAX_NAME_LENGTH = 255  # a queue name is an Erlang atom in the cluster (255 latin1 characters)


def validate_name(name: Any) -> str:
    if isinstance(name, bytes):
        try:
            name = name.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InvalidQueueName("queue name is not valid UTF-8") from e
    if not isinstance(name, str) or not name:
        raise InvalidQueueName(f"a non-empty queue name is required, got {name!r}")
    # The cluster's atom is made from the name's UTF-8 bytes, one character per byte.
    if len(name) > MAX_NAME_LENGTH or (not name.isascii() and len(name.encode("utf-8", "replace")) > MAX_NAME_LENGTH):
        raise InvalidQueueName(f"queue name longer than {MAX_NAME_LENGTH} bytes (UTF-8)")
    if name in RESERVED_NAMES:
        raise InvalidQueueName(f"{name!r} is reserved for LMQ's own tables")
    if "\x00" in name:
        raise InvalidQueueName("queue name contains NUL")
    return name
