"""Stores: where queue tables live (`memory`, the durable default, later `mnesia`)."""

from pylmq.store.base import Store
from pylmq.store.memory import MemoryStore

__all__ = ["MemoryStore", "Store"]
