"""The node: one LMQ node assembled from the layers below it.

:mod:`~pylmq.node.lmq_node` binds a store, the queue manager and the HTTP and MessagePack-RPC
front ends (:class:`LMQNode`); :mod:`~pylmq.node.service` adds what a running service has around
it (StatsD, Erlang distribution, the mixed cluster) from :class:`~pylmq.config.Settings`;
:mod:`~pylmq.node.console` is the node's admin interface (what ``lmq-admin`` calls);
:mod:`~pylmq.node.testing` runs a node in a thread for tests and examples.
"""

from pylmq.node.lmq_node import LMQNode, NodeOptions, make_store, parse_hostport

__all__ = ["LMQNode", "NodeOptions", "make_store", "parse_hostport"]
