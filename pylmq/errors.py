"""One exception tree for all of pylmq.

Every error a user can cause derives from :class:`LMQError`. Each class carries the short
``reason`` that the HTTP API returns as JSON (``{"error": reason, "detail": ...}``) and the
MessagePack-RPC API returns in its error slot, and the HTTP status it maps to, so that the
mapping lives here and nowhere else.
"""

from __future__ import annotations

import os

MAX_DETAIL = 256
"""Longest error detail an API sends back: details quote the client's input (an id, a queue
name, a property value), which may be as long as a request allows."""


def shown_detail(detail: str) -> str:
    """``detail`` as the HTTP and MessagePack-RPC APIs send it: cut to :data:`MAX_DETAIL`
    characters, saying how much was left out."""
    if len(detail) <= MAX_DETAIL:
        return detail
    return f"{detail[:MAX_DETAIL]}... ({len(detail) - MAX_DETAIL} more characters)"


class LMQError(Exception):
    """Base of every pylmq error."""

    reason: str = "error"
    http_status: int = 500

    def __init__(self, detail: str = "") -> None:
        super().__init__(detail or self.reason)
        self.detail = detail or self.reason

    def to_json(self) -> dict[str, str]:
        return {"error": self.reason, "detail": self.detail}


class BadRequest(LMQError):
    """The request is malformed: bad JSON, wrong types, unknown keys, bad parameters."""

    reason = "bad_request"
    http_status = 400


class InvalidProps(BadRequest):
    reason = "invalid_props"


class InvalidOptions(BadRequest):
    """A per-message option (delay, ttl, retry, interval, priority, once) that is malformed or
    out of range; the detail names it."""

    reason = "invalid_options"


class InvalidRegex(BadRequest):
    reason = "invalid_regex"


class InvalidQueueName(BadRequest):
    reason = "invalid_queue_name"


class BadMessage(BadRequest):
    """A MessagePack-RPC frame that is not a valid message (not msgpack, wrong shape)."""

    reason = "bad_message"


class MessageTooLarge(BadRequest):
    reason = "too_large"
    http_status = 413


class UnknownMethod(BadRequest):
    reason = "unknown_method"


class NotSupported(LMQError):
    """The operation exists but this node cannot do it in its present setup (a pylmq extension
    while the node serves an Erlang LMQ cluster's tables)."""

    reason = "not_supported"
    http_status = 501


class RequestTimeout(LMQError):
    """A request being received came too slowly (see :mod:`pylmq.api._limits`)."""

    reason = "request_timeout"
    http_status = 408


class TooMuchBuffered(LMQError):
    """The node holds as many bytes of partly received requests as it may (``max_buffered_bytes``)."""

    reason = "too_much_buffered"
    http_status = 503


class ConnectionClosed(LMQError):
    """The client closed its side of the connection while a pull was waiting for it."""

    reason = "connection_closed"
    http_status = 400


class Unauthorized(LMQError):
    """The request lacks the credential the node is configured with (``http_auth``), or
    carries a wrong one. The detail never quotes what was sent."""

    reason = "unauthorized"
    http_status = 401


class NotFound(LMQError):
    reason = "not_found"
    http_status = 404


class QueueNotFound(NotFound):
    reason = "queue_not_found"


class MessageNotFound(NotFound):
    """Unknown, expired or already redelivered message id."""

    reason = "not_found"


class MessagesExpired(LMQError):
    """A client held messages past their deadline and they were delivered again meanwhile (a
    Spark read task longer than its queue's timeout, with the extensions failing)."""

    reason = "expired"
    http_status = 409


class StoreError(LMQError):
    """The store cannot carry out an operation (I/O failure, corrupt data, peer gone)."""

    reason = "store_error"
    http_status = 503


class StoreFull(StoreError):
    """The store refuses changes for now: its journal or its disk is near a limit (see the
    node's log); what it answered before is kept. Try again later."""

    reason = "store_full"


class JournalCorrupt(StoreError):
    """The durable store's journal is damaged where a crash cannot have torn it: the node
    refuses to start rather than drop or resurrect messages. ``path`` and ``offset`` say where
    the damage begins, ``end`` where the next valid record (or the file) begins."""

    reason = "journal_corrupt"

    def __init__(self, path: str, offset: int, end: int, what: str) -> None:
        # Absolute: an operator reads it in a log, from whatever directory they work in.
        path = os.path.abspath(path)
        data_dir = os.path.dirname(path)
        super().__init__(
            f"cannot recover {data_dir}: journal {path} is damaged at byte offset {offset} ({what}); "
            "refusing to start so that no message is lost or comes back. "
            f"`pylmq journal check --data-dir {data_dir}` reports the damage, "
            f"`pylmq journal repair --data-dir {data_dir}` keeps every valid record and saves the damaged "
            "bytes aside (in a release: bin/lmq check-journal, bin/lmq repair-journal)"
        )
        self.path = path
        self.offset = offset
        self.end = end
        self.what = what


class StoreUnavailable(StoreError):
    """The store's database cannot be reached (PostgreSQL down, restarting, failing over): the
    operation was not carried out, or its outcome is unknown and nothing was answered as done.
    The node reconnects by itself; try again."""

    reason = "store_unavailable"


class Duplicate(StoreError):
    """A push whose SQS deduplication id (:attr:`PushOptions.dedup
    <pylmq.core.message.PushOptions.dedup>`) another send took within the window, on any node
    sharing the store: nothing was pushed. The SQS layer answers with that send's
    ``message_id`` and ``sequence``, as SQS answers a duplicate; never a client's error."""

    reason = "duplicate"
    http_status = 409

    def __init__(self, message_id: str, sequence: str) -> None:
        super().__init__(f"the deduplication id was sent as message {message_id}")
        self.message_id = message_id
        self.sequence = sequence


class ShuttingDown(StoreError):
    reason = "shutting_down"


class ConfigError(LMQError):
    """A configuration file or flag is invalid (names the file, line and column)."""

    reason = "config_error"
    http_status = 500


class ConfigSyntaxError(ConfigError):
    """A configuration file does not parse; carries the file name, line and column (1-based)."""

    reason = "config_syntax_error"

    def __init__(self, filename: str, line: int, column: int, message: str) -> None:
        super().__init__(f"{filename}:{line}:{column}: {message}")
        self.filename = filename
        self.line = line
        self.column = column
        self.message = message


class DistError(LMQError):
    """Erlang distribution failed: EPMD, handshake, connection or remote call."""

    reason = "dist_error"
    http_status = 502


class HandshakeError(DistError):
    reason = "handshake_failed"


class CookieMismatch(HandshakeError):
    reason = "bad_cookie"


class NodeDown(DistError):
    reason = "noconnection"


class PeerStalled(NodeDown):
    """The peer is connected but sends nothing: a call to it cannot be answered in time.

    ``sent`` is False when the call was refused before it went out (its outcome is known:
    nothing happened), True when it was waiting for its answer."""

    reason = "stalled"

    def __init__(self, detail: str = "", *, sent: bool = True) -> None:
        super().__init__(detail)
        self.sent = sent


class RunnerLost(NodeDown):
    """The remote process running the call (a queue runner on an Erlang peer) exited while the
    call was in flight, its node still up: as for a node that went down, the outcome is unknown."""

    reason = "runner_lost"


class NotRun(DistError):
    """The call certainly did not run: the queue runner it was queued in ended before reaching
    it (a runner runs its calls one at a time, in order). Sending it again is safe."""

    reason = "not_run"


class RemoteError(DistError):
    """A call into another node failed there: ``badrpc``, an exception, ``noproc``, an exit.

    ``term`` is the Erlang reason, exactly as it came (e.g. ``{'EXIT', {undef, ...}}``).
    """

    reason = "remote_error"

    def __init__(self, detail: str = "", term: object = None) -> None:
        super().__init__(detail)
        self.term = term


class ProcessExited(DistError):
    """The local dist process waiting in ``receive`` was terminated by an exit signal."""

    reason = "process_exited"

    def __init__(self, detail: str = "", exit_reason: object = None) -> None:
        super().__init__(detail)
        self.exit_reason = exit_reason


class ClusterError(LMQError):
    """Joining, leaving or serving a mixed Erlang/Python cluster failed."""

    reason = "cluster_error"
    http_status = 503


class ClusterUnavailable(ClusterError):
    """The node is a member of a cluster it cannot reach now (restarted while the cluster was
    down): it refuses queue operations rather than serve queues of its own beside the cluster's."""

    reason = "cluster_unavailable"


class Unreachable(LMQError):
    """No node answered: every address refused the connection, or it broke or went silent."""

    reason = "unreachable"
    http_status = 503


class ProtocolError(LMQError):
    """A node's answer could not be understood (not LMQ's HTTP or MessagePack-RPC contract)."""

    reason = "protocol_error"
    http_status = 502


class QsRefused(LMQError):
    """A queue_server protocol answer with a code other than 0; the detail is its ``reason``
    and ``answer`` the whole answer object (client side)."""

    reason = "qs_refused"
    http_status = 400

    def __init__(self, detail: str = "", answer: dict[str, object] | None = None) -> None:
        super().__init__(detail)
        self.answer = answer or {}
