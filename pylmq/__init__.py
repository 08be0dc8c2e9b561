"""pylmq: LMQ, the Lightweight Message Queue, as a Python node."""

from pylmq.errors import LMQError

__version__ = "0.1.0"
__all__ = ["LMQError", "__version__"]
