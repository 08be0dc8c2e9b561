"""Mixed clusters: a pylmq node in an Erlang LMQ cluster (membership, ``lmq_event``, the mirror).

See :mod:`pylmq.cluster.cluster` for joining, leaving, failover and the standalone fallback,
:mod:`pylmq.cluster.mirror` for the local mirror of the cluster's tables, and
:mod:`pylmq.cluster.mnesia_store` for the store that runs every queue operation on an Erlang peer.
"""

from pylmq.cluster.cluster import Cluster

__all__ = ["Cluster"]
