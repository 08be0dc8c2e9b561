"""Stores: where queue tables live: ``memory`` and ``durable`` (the default) here; Mnesia's
tables, when the node is in a mixed cluster, through :mod:`pylmq.cluster.mnesia_store`.

The protocol they implement is :class:`pylmq.core.store.Store`.
"""

from pylmq.store.memory import MemoryStore

__all__ = ["MemoryStore"]
