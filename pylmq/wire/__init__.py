"""Wire formats that the servers (:mod:`pylmq.api`) and the clients (:mod:`pylmq.client`) share.

Pure functions over bytes, with no I/O and no queue state: MessagePack-RPC framing and error
reasons (:mod:`~pylmq.wire.msgpack_rpc`), the compound-message encodings
(:mod:`~pylmq.wire.compound`), the batch bodies (:mod:`~pylmq.wire.batch`) and the shape of
one pushed item (:mod:`~pylmq.wire.items`). A client imports this package and never a server's.
No re-exports here, so that importing one module (the core imports :mod:`~pylmq.wire.items`)
loads only that one.
"""
