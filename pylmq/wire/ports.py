"""The ports LMQ listens on by default; a node binds them and a client dials them."""

from __future__ import annotations

__all__ = ["DEFAULT_HTTP_PORT", "DEFAULT_QS_PORT", "DEFAULT_RPC_PORT", "DEFAULT_SQS_PORT"]

DEFAULT_HTTP_PORT = 9980
DEFAULT_RPC_PORT = 18800
DEFAULT_QS_PORT = 1111
"""queue_server's protocol, TCP and UDP (queue_server's sample configuration uses 1111)."""
DEFAULT_SQS_PORT = 9324
"""Amazon SQS's API (ElasticMQ's port, which SQS clients of local setups already name)."""
