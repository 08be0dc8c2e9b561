"""Queue semantics, once: message records, properties, the queue table, queues and the manager."""

from pylmq.core.clock import Clock, ManualClock, SystemClock
from pylmq.core.manager import QueueManager, validate_name
from pylmq.core.message import Item, State, StoredMessage, StoredMessageType, make_item, uuid_text
from pylmq.core.props import DEFAULT_PROPS, Props
from pylmq.core.queue import Delivery, Queue, QueueObserver
from pylmq.core.table import QueueTable

__all__ = [
    "DEFAULT_PROPS",
    "Clock",
    "Delivery",
    "Item",
    "ManualClock",
    "Props",
    "Queue",
    "QueueManager",
    "QueueObserver",
    "QueueTable",
    "State",
    "StoredMessage",
    "StoredMessageType",
    "SystemClock",
    "make_item",
    "uuid_text",
    "validate_name",
]
