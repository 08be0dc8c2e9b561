"""Stores: where queue tables live: ``memory``, ``durable`` (the default), and Mnesia's tables
when the node is in a mixed cluster (:mod:`pylmq.store.mnesia`)."""

from pylmq.store.base import Store
from pylmq.store.memory import MemoryStore

__all__ = ["MemoryStore", "Store"]
