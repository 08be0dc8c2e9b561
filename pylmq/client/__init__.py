"""A small Python client for both of LMQ's APIs, asyncio and blocking.

- :class:`AsyncHttpClient` / :class:`HttpClient`: the HTTP API (bytes and headers in, bytes and
  headers out; compound messages decoded from ``multipart/mixed`` or msgpack).
- :class:`AsyncRpcClient` / :class:`RpcClient`: the MessagePack-RPC API (values in, values out;
  the asyncio one pipelines concurrent calls over one connection).
- :class:`AsyncQsClient` / :class:`QsClient`: queue_server's JSON protocol over TCP or UDP.

Every client takes one node address or several, tried in turn when a connection cannot be made
(:func:`parse_http_urls` and :func:`parse_rpc_addresses` check such a list without connecting).
A pull that gets nothing in time returns ``None``. Errors are the :mod:`pylmq.errors` tree:
:class:`~pylmq.errors.MessageNotFound`, :class:`~pylmq.errors.QueueNotFound`,
:class:`~pylmq.errors.BadRequest` (with the node's reason), :class:`~pylmq.errors.Unreachable`
when no node answers, :class:`~pylmq.errors.ProtocolError` when an answer makes no sense.
Test nodes for all of this are in :mod:`pylmq.node.testing`.
"""

from pylmq.client._http import AsyncHttpClient
from pylmq.client._http_sync import HttpClient
from pylmq.client._message import (
    DEFAULT_CONTENT_TYPE,
    ClaimResult,
    Message,
    MessageType,
    Part,
    PullFormat,
    ReplyMany,
    ReplyResult,
    RpcMessage,
)
from pylmq.client._options import DeadLetterInfo, PushOptions
from pylmq.client._qs import AsyncQsClient, QsClient, QsMessage
from pylmq.client._rpc import AsyncRpcClient
from pylmq.client._rpc_sync import RpcClient
from pylmq.client._urls import parse_http_urls, parse_rpc_addresses

__all__ = [
    "DEFAULT_CONTENT_TYPE",
    "AsyncHttpClient",
    "AsyncQsClient",
    "AsyncRpcClient",
    "ClaimResult",
    "DeadLetterInfo",
    "HttpClient",
    "Message",
    "MessageType",
    "Part",
    "PullFormat",
    "PushOptions",
    "QsClient",
    "QsMessage",
    "ReplyMany",
    "ReplyResult",
    "RpcClient",
    "RpcMessage",
    "parse_http_urls",
    "parse_rpc_addresses",
]
