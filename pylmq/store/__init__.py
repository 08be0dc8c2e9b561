"""Stores: where queue tables live (`memory`, the durable default, `mnesia` on Erlang LMQ nodes).

The protocol they implement is :class:`pylmq.core.store.Store`.
"""

from pylmq.store.memory import MemoryStore

__all__ = ["MemoryStore"]
