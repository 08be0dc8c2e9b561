"""Amazon SQS's actions on LMQ's queues (docs/sqs.md): an SQS queue is an LMQ queue.

:class:`SqsApi` answers one HTTP request (the server is :mod:`pylmq.api.http_server`'s, as for
LMQ's HTTP API): the bytes are :mod:`pylmq.wire.sqs`'s, the queue rules the core's. Each action
maps onto :class:`~pylmq.core.manager.QueueManager` calls:

- VisibilityTimeout is the queue's ``timeout`` prop; RedrivePolicy is ``retry`` =
  maxReceiveCount - 1 and ``dead_letter``; a queue CreateQueue makes without one has retry
  ``infinity`` (SQS never drops a message for its receives).
- A message is an item whose metadata holds its SQS MessageId, attributes and system attributes
  (``x-sqs-*`` headers, so that LMQ's HTTP pull shows them); DelaySeconds is a not-before time;
  every SQS push keeps a delivery count (``PushOptions.track``): ApproximateReceiveCount.
- A receipt handle names one delivery: the queue and the delivery's uuid (LMQ's per-delivery id).
- The queue attributes LMQ's props cannot hold (DelaySeconds, MessageRetentionPeriod,
  MaximumMessageSize, ReceiveMessageWaitTimeSeconds, Policy, the timestamps, ...) are the
  queue's ``sqs`` prop, kept by the store like every prop. MessageRetentionPeriod is a hard
  expiry of each message sent to a queue that has them (``PushOptions.hard``).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
import hashlib
import json
import logging
import re
import time
import uuid as _uuidlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from pylmq.api.http import Request, Response
from pylmq.core.clock import Clock
from pylmq.core.manager import QueueManager
from pylmq.core.message import DedupClaim, Metadata, PushOptions, StoredMessage, StoredMessageType, uuid_text
from pylmq.core.props import MAX_RETRY
from pylmq.core.queue import Delivery, Queue
from pylmq.core.store import prune_dedup
from pylmq.errors import Duplicate, InvalidProps, LMQError, NotFound, NotSupported, QueueNotFound
from pylmq.log import info_line
from pylmq.wire.sqs import (
    DEFAULT_ACCOUNT,
    DEFAULT_REGION,
    MAX_IN_FLIGHT,
    MAX_MESSAGE_BYTES,
    MAX_SKEW,
    SqsError,
    batch_ids,
    check_signature,
    decode_receipt,
    encode_error,
    encode_receipt,
    encode_result,
    integer_of,
    invalid_parameter,
    md5_attributes,
    md5_body,
    missing_parameter,
    modeled,
    no_queue,
    parse_authorization,
    parse_request,
    protocol_of,
    queue_arn,
    queue_name_of,
    queue_url,
    signature_time,
)

__all__ = ["SqsApi", "too_large"]

log = logging.getLogger("pylmq.sqs")
access_log = logging.getLogger("pylmq.access")

TEXT_TYPE: Final = b"text/plain; charset=utf-8"
H_ID: Final = b"x-sqs-message-id"
H_ATTR: Final = b"x-sqs-attr-"
H_SYS: Final = b"x-sqs-sys-"
BODY_ENCODING: Final = "lmq.body-encoding"
"""A message attribute pylmq adds to a message whose body is not text SQS can carry (pushed over
LMQ's HTTP API): the body is then sent base64-encoded."""

MAX_VISIBILITY: Final = 43_200
MAX_DELAY: Final = 900
MAX_WAIT: Final = 20
MAX_RECEIVE: Final = 10
MAX_ATTRIBUTES: Final = 10
MAX_LISTED: Final = 1000
MAX_TAGS: Final = 50
MAX_TAG_KEY: Final = 128
MAX_TAG_VALUE: Final = 256
TAGS: Final = "Tags"
"""The ``sqs`` prop's entry that holds the queue's tags (a JSON object of text to text): kept,
journaled and dropped with the queue like its attributes. Not an attribute: GetQueueAttributes
does not show it."""

_QUEUE_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
_FIFO_NAME: Final = re.compile(r"[A-Za-z0-9_-]{1,75}\.fifo")
_DEDUP_ID: Final = re.compile(r"[!-~]{1,128}")
_ATTR_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_DATA_TYPE: Final = re.compile(r"(String|Number|Binary)(\.[A-Za-z0-9_.-]{1,240})?")
_BAD_CHARS: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")

# Queue attributes: the writable ones with their bounds (None: any text), then the read-only ones.
_RANGES: Final[dict[str, tuple[int, int] | None]] = {
    "VisibilityTimeout": (0, MAX_VISIBILITY),
    "DelaySeconds": (0, MAX_DELAY),
    "MaximumMessageSize": (1024, MAX_MESSAGE_BYTES),
    "MessageRetentionPeriod": (60, 1_209_600),
    "ReceiveMessageWaitTimeSeconds": (0, MAX_WAIT),
    "RedrivePolicy": None,
    "Policy": None,
    "RedriveAllowPolicy": None,
    "KmsMasterKeyId": None,
    "KmsDataKeyReusePeriodSeconds": (60, 86_400),
    "SqsManagedSseEnabled": None,
}
_DEFAULTS: Final = {
    "DelaySeconds": "0",
    "MaximumMessageSize": str(MAX_MESSAGE_BYTES),
    "MessageRetentionPeriod": "345600",
    "ReceiveMessageWaitTimeSeconds": "0",
    "SqsManagedSseEnabled": "false",
}
_FIFO_ONLY: Final[dict[str, tuple[str, ...]]] = {
    "FifoQueue": ("true",),
    "ContentBasedDeduplication": ("true", "false"),
    "DeduplicationScope": ("queue", "messageGroup"),
    "FifoThroughputLimit": ("perQueue", "perMessageGroupId"),
}
_FIFO_DEFAULTS: Final = {
    "FifoQueue": "true",
    "ContentBasedDeduplication": "false",
    "DeduplicationScope": "queue",
    "FifoThroughputLimit": "perQueue",
}
_READ_ONLY: Final = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
    "CreatedTimestamp",
    "LastModifiedTimestamp",
    "QueueArn",
)
_ALL_QUEUE_ATTRIBUTES: Final = frozenset((*_RANGES, *_READ_ONLY, *_FIFO_ONLY))
_SYSTEM_ATTRIBUTES: Final = frozenset(
    (
        "SenderId",
        "SentTimestamp",
        "ApproximateReceiveCount",
        "ApproximateFirstReceiveTimestamp",
        "SequenceNumber",
        "MessageDeduplicationId",
        "MessageGroupId",
        "AWSTraceHeader",
        "DeadLetterQueueSourceArn",
    )
)


@dataclass(slots=True)
class _QueueInfo:
    """When this node first saw a queue that has no ``sqs`` prop (made over LMQ's APIs): its
    CreatedTimestamp and LastModifiedTimestamp until SQS sets an attribute of its own. ``queue``
    is the manager's queue it belongs to: a queue deleted and made again is another queue."""

    queue: Queue | None
    created: int
    modified: int


def _ms(t: float) -> str:
    return str(int(t * 1000))


def _int_param(params: Mapping[str, Any], name: str, lo: int, hi: int, default: int | None = None) -> int | None:
    value = params.get(name)
    if value is None:
        return default
    if isinstance(value, str):
        n = integer_of(value)
        value = value if n is None else n
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise invalid_parameter(
            f"Value {str(value)[:80]} for parameter {name} is invalid."
            f" Reason: Must be between {lo} and {hi}, if provided."
        )
    return value


def _str_param(params: Mapping[str, Any], name: str) -> str:
    value = params.get(name)
    if value is None:
        raise missing_parameter(name)
    if not isinstance(value, str):
        raise invalid_parameter(f"Value for parameter {name} is invalid. Reason: must be a string.")
    return value


def _list_param(params: Mapping[str, Any], name: str) -> list[Any]:
    value = params.get(name)
    if value is None:
        return []
    if not isinstance(value, list):
        raise invalid_parameter(f"Value for parameter {name} is invalid. Reason: must be a list.")
    return value


def _names_param(params: Mapping[str, Any], name: str) -> list[str]:
    """A list of names (attribute names): strings only."""
    value = _list_param(params, name)
    if not all(isinstance(v, str) for v in value):
        raise invalid_parameter(f"Value for parameter {name} is invalid. Reason: must be a list of strings.")
    return value


class SqsApi:
    """SQS's actions on one node's manager. ``address`` is where the node serves SQS (the base of
    queue URLs when a request names no Host); ``access_keys`` (access key id -> secret), when
    given, are the only credentials whose SigV4 signatures are accepted."""

    def __init__(
        self,
        manager: QueueManager,
        clock: Clock,
        address: tuple[str, int],
        *,
        access_keys: Mapping[str, str] | None = None,
        account: str = DEFAULT_ACCOUNT,
        region: str = DEFAULT_REGION,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.manager = manager
        self.max_in_flight = max_in_flight
        self.clock = clock
        self.address = address
        self.access_keys = dict(access_keys or {})
        self.account = account
        self.region = region
        self._info: dict[str, _QueueInfo] = {}
        self._last_sequence = 0
        # The ``sqs`` prop is replaced whole at each change: its read-modify-writes (tags,
        # attributes) take turns, so that two concurrent changes do not lose one.
        self._sqs_lock = asyncio.Lock()
        self._actions: dict[str, Callable[[dict[str, Any], str], Awaitable[tuple[dict[str, Any], Any]]]] = {
            "CreateQueue": self.create_queue,
            "GetQueueUrl": self.get_queue_url,
            "ListQueues": self.list_queues,
            "DeleteQueue": self.delete_queue,
            "PurgeQueue": self.purge_queue,
            "GetQueueAttributes": self.get_queue_attributes,
            "SetQueueAttributes": self.set_queue_attributes,
            "SendMessage": self.send_message,
            "SendMessageBatch": self.send_message_batch,
            "ReceiveMessage": self.receive_message,
            "DeleteMessage": self.delete_message,
            "DeleteMessageBatch": self.delete_message_batch,
            "ChangeMessageVisibility": self.change_visibility,
            "ChangeMessageVisibilityBatch": self.change_visibility_batch,
            "ListDeadLetterSourceQueues": self.list_dead_letter_sources,
            "TagQueue": self.tag_queue,
            "UntagQueue": self.untag_queue,
            "ListQueueTags": self.list_queue_tags,
        }

    # -- the request ---------------------------------------------------------------------------

    async def respond(self, request: Request) -> Response:
        request_id = str(_uuidlib.uuid4())
        path, _, query = request.target.partition("?")
        # Until the request is parsed, its errors take the form its headers ask for.
        json_form = request.headers.get(b"x-amz-target") or request.headers.get(b"content-type", b"").startswith(
            b"application/x-amz-json"
        )
        protocol: Any = "json" if json_form else "query"
        action = "-"
        try:
            self._authenticate(request, path, query)
            req = parse_request(request.method, path, query, request.headers, request.body)
            protocol, action = req.protocol, req.action
            handler = self._actions.get(req.action)
            if handler is None:
                raise SqsError("InvalidAction", f"The action {req.action} is not valid for this endpoint.")
            self.manager.check_available()
            result, delivery = await handler(req.params, self._base(request))
            ctype, body = encode_result(req, result, request_id)
            response = Response(200, _head(ctype, request_id), body, delivery)
        except SqsError as e:
            response = _error(protocol, e, request_id)
        except LMQError as e:
            response = _error(protocol, _from_lmq(e), request_id)
        except Exception:
            # A bug here must not take the connection's other requests with it: answered as AWS
            # answers its own failures, and logged.
            log.exception("SQS %s failed", action)
            response = _error(
                protocol,
                SqsError("InternalFailure", "The request failed; see the node's log.", status=500, sender=False),
                request_id,
            )
        if access_log.isEnabledFor(logging.INFO):
            info_line(access_log, f"sqs {action} {response.status}")
        return response

    def _authenticate(self, request: Request, path: str, query: str) -> None:
        """With access keys configured, a request must carry a valid SigV4 signature by one."""
        if not self.access_keys:
            return
        header = request.headers.get(b"authorization", b"").decode("latin-1")
        if not header:
            raise SqsError("MissingAuthenticationToken", "Request is missing Authentication Token", status=403)
        auth = parse_authorization(header)
        if auth is None:
            raise SqsError(
                "IncompleteSignature", "The request signature does not conform to AWS standards.", status=403
            )
        secret = self.access_keys.get(auth.access_key)
        if secret is None:
            raise SqsError("InvalidClientTokenId", "The security token included in the request is invalid.", status=403)
        if auth.region != self.region or auth.service != "sqs":
            # An SQS endpoint serves one region: a signature scoped to another region (or
            # service) is not one it can check, and AWS refuses it before comparing, naming
            # the scope it expects, so that a misconfigured client sees what to fix.
            raise SqsError(
                "SignatureDoesNotMatch",
                f"Credential should be scoped to a valid region, not '{auth.region[:64]}'."
                f" This endpoint expects '{self.region}'."
                if auth.region != self.region
                else "Credential should be scoped to correct service: 'sqs'.",
                status=403,
            )
        signed_at = signature_time(auth, request.headers)
        if signed_at is None:
            raise SqsError(
                "IncompleteSignature", "The request must carry an X-Amz-Date of its credential's day.", status=403
            )
        now = self.clock.now()
        if abs(now - signed_at) > MAX_SKEW:
            raise SqsError(
                "SignatureDoesNotMatch",
                f"Signature expired: {_amz_time(signed_at)} is now earlier than {_amz_time(now - MAX_SKEW)}"
                f" ({_amz_time(now)} - 15 min.)"
                if signed_at < now
                else f"Signature not yet current: {_amz_time(signed_at)} is still later than"
                f" {_amz_time(now + MAX_SKEW)} ({_amz_time(now)} + 15 min.)",
                status=403,
            )
        if not check_signature(auth, secret, request.method, path, query, request.headers, request.body):
            raise SqsError(
                "SignatureDoesNotMatch",
                "The request signature we calculated does not match the signature you provided. Check your AWS"
                " Secret Access Key and signing method. Consult the service documentation for details.",
                status=403,
            )

    def _base(self, request: Request) -> str:
        host = request.headers.get(b"host", b"").decode("latin-1")
        if not host or any(c in host for c in "/ \\@?#"):
            host = f"{self.address[0]}:{self.address[1]}"
        return f"http://{host}"

    def _url(self, base: str, name: str) -> str:
        return queue_url(base, self.account, name)

    def _queue(self, params: Mapping[str, Any]) -> str:
        """The existing queue a request's QueueUrl names, or NonExistentQueue."""
        name = queue_name_of(_str_param(params, "QueueUrl"))
        if self.manager.get(name) is None:
            raise no_queue()
        return name

    def _info_of(self, name: str) -> _QueueInfo:
        q = self.manager.get(name)
        info = self._info.get(name)
        if info is None or info.queue is not q:
            # A queue made over LMQ's APIs (or made again): known to SQS from the first time it
            # is asked about.
            now = int(self.clock.now())
            info = self._new_info(name, _QueueInfo(q, now, now))
        return info

    def _new_info(self, name: str, info: _QueueInfo) -> _QueueInfo:
        if len(self._info) > 2 * len(self.manager.queue_names()) + 1024:
            # Queues deleted over other APIs leave their entries here: dropped now and then.
            self._info = {n: i for n, i in self._info.items() if i.queue is self.manager.get(n)}
        self._info[name] = info
        return info

    def _attributes(self, name: str) -> dict[str, str]:
        """The queue's ``sqs`` prop: its SQS attributes that no LMQ prop holds."""
        q = self.manager.get(name)
        return {} if q is None else dict(q.props.sqs)

    def _attribute(self, name: str, key: str) -> str:
        attributes = self._attributes(name)
        if key in _FIFO_DEFAULTS and attributes.get("FifoQueue") == "true":
            return attributes.get(key, _FIFO_DEFAULTS[key])
        return attributes.get(key, _DEFAULTS.get(key, ""))

    def _retention(self, name: str) -> int | None:
        """MessageRetentionPeriod, enforced on a queue that has SQS attributes (made or set over
        SQS); a queue made over LMQ keeps LMQ's rule (no expiry) until it is given some."""
        attributes = self._attributes(name)
        return (
            int(attributes.get("MessageRetentionPeriod", _DEFAULTS["MessageRetentionPeriod"]))
            if _has_attributes(attributes)
            else None
        )

    # -- queues --------------------------------------------------------------------------------

    async def create_queue(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = _str_param(params, "QueueName")
        attributes = params.get("Attributes") or {}
        if not isinstance(attributes, dict):
            raise invalid_parameter("Value for parameter Attributes is invalid. Reason: must be a map.")
        fifo = str(attributes.get("FifoQueue", "false")).lower() == "true"
        if fifo and not _FIFO_NAME.fullmatch(name):
            raise invalid_parameter(
                "The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, "
                "must end with .fifo suffix and be 1 to 80 in length."
            )
        if not fifo and not _QUEUE_NAME.fullmatch(name):
            raise invalid_parameter(
                "Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length"
            )
        props, extra = self._check_attributes(name, attributes, creating=fifo)
        tags = _tags_param(params, "tags")
        if self.manager.get(name) is not None:
            differ = [k for k, v in attributes.items() if _normal(k, self._current(name, k)) != _normal(k, str(v))]
            if differ:
                raise modeled(
                    "QueueNameExists",
                    "A queue already exists with the same name and a different value for attribute(s) "
                    + ", ".join(differ),
                )
            return {"QueueUrl": self._url(base, name)}, None
        props.setdefault("retry", None)  # SQS: no receive limit without a redrive policy
        now = str(int(self.clock.now()))
        props["sqs"] = {**extra, "CreatedTimestamp": now, "LastModifiedTimestamp": now}
        if tags:
            props["sqs"][TAGS] = _tags_text(tags)
        await self.manager.update_props(name, props)
        return {"QueueUrl": self._url(base, name)}, None

    def _check_attributes(
        self, name: str, attributes: Mapping[str, Any], *, creating: bool | None = None
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """Queue attributes as LMQ props and the attributes the ``sqs`` prop keeps, or the error.
        ``creating``: whether CreateQueue makes a FIFO queue (None: SetQueueAttributes)."""
        props: dict[str, Any] = {}
        extra: dict[str, str] = {}
        fifo = self._is_fifo(name) if creating is None else creating
        for key, value in attributes.items():
            if key in _FIFO_ONLY:
                text = str(value)
                if key == "FifoQueue":
                    # Fixed at creation: "false" is a standard queue, and cannot be set later.
                    if creating is None or text.lower() not in ("true", "false"):
                        raise modeled("InvalidAttributeName", f"Unknown Attribute {key}.")
                    if text.lower() == "true":
                        extra[key] = "true"
                    continue
                if not fifo:
                    raise modeled("InvalidAttributeName", f"Unknown Attribute {key}.")
                if text not in _FIFO_ONLY[key]:
                    raise modeled("InvalidAttributeValue", f"Invalid value for the parameter {key}.")
                extra[key] = text
                continue
            if key not in _RANGES:
                raise modeled("InvalidAttributeName", f"Unknown Attribute {key}.")
            if not isinstance(value, str):
                value = str(value)
            bounds = _RANGES[key]
            if bounds is not None:
                lo, hi = bounds
                n = integer_of(value)
                if n is None or not lo <= n <= hi:
                    raise modeled("InvalidAttributeValue", f"Invalid value for the parameter {key}.")
            if key == "VisibilityTimeout":
                props["timeout"] = int(value)
            elif key == "RedrivePolicy":
                props.update(self._redrive(name, value, fifo=fifo))
            else:
                extra[key] = value
        return props, extra

    def _redrive(self, name: str, value: str, *, fifo: bool) -> dict[str, Any]:
        if value == "":
            return {"retry": None, "dead_letter": None}
        bad = f"Value {value[:200]} for parameter RedrivePolicy is invalid. Reason: "
        try:
            policy = json.loads(value)
        except ValueError:
            raise invalid_parameter(bad + "Redrive policy is not a valid JSON map.") from None
        if not isinstance(policy, dict) or "deadLetterTargetArn" not in policy or "maxReceiveCount" not in policy:
            raise invalid_parameter(
                bad + "Redrive policy does not contain mandatory attribute: deadLetterTargetArn and maxReceiveCount."
            )
        arn, count = policy["deadLetterTargetArn"], policy["maxReceiveCount"]
        prefix = f"arn:aws:sqs:{self.region}:{self.account}:"
        if not isinstance(arn, str) or not arn.startswith(prefix):
            raise invalid_parameter(bad + f"Invalid value for deadLetterTargetArn (expected {prefix}<queue name>).")
        target = arn[len(prefix) :]
        if self.manager.get(target) is None:
            raise invalid_parameter(bad + "Dead letter target does not exist.")
        if target == name:
            raise invalid_parameter(bad + "Dead letter target cannot be the queue itself.")
        if self._is_fifo(target) != fifo:
            # A standard message moved into a FIFO queue has no group, a FIFO one moved into a
            # standard queue loses its order: AWS refuses both.
            kind = "a FIFO" if fifo else "a standard"
            raise invalid_parameter(bad + f"Dead-letter target of {kind} queue must be {kind} queue.")
        if isinstance(count, str):
            count = integer_of(count) if integer_of(count) is not None else count
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 1000:
            raise invalid_parameter(bad + "Invalid value for maxReceiveCount: must be an integer from 1 to 1000.")
        return {"retry": count - 1, "dead_letter": target}

    def _current(self, name: str, key: str) -> str:
        q = self.manager.get(name)
        assert q is not None
        if key == "VisibilityTimeout":
            return _number(q.props.timeout)
        if key == "RedrivePolicy":
            return self._redrive_text(name)
        if key in _FIFO_DEFAULTS:
            return self._attribute(name, key) or ("false" if key == "FifoQueue" else "")
        return self._attribute(name, key)

    def _is_fifo(self, name: str) -> bool:
        return self._attributes(name).get("FifoQueue") == "true"

    def _redrive_text(self, name: str) -> str:
        q = self.manager.get(name)
        assert q is not None
        props = q.props
        if props.dead_letter is None or props.dead_letter == name:
            return ""
        count = MAX_RETRY if props.retry is None else props.retry + 1
        arn = queue_arn(self.region, self.account, props.dead_letter)
        return json.dumps({"deadLetterTargetArn": arn, "maxReceiveCount": count}, separators=(",", ":"))

    async def get_queue_url(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = _str_param(params, "QueueName")
        if self.manager.get(name) is None:
            raise no_queue()
        return {"QueueUrl": self._url(base, name)}, None

    async def list_queues(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        prefix = params.get("QueueNamePrefix") or ""
        if not isinstance(prefix, str):
            raise invalid_parameter("Value for parameter QueueNamePrefix is invalid.")
        names = [n for n in self.manager.queue_names() if n.startswith(prefix)]
        return self._page(params, names, base, "QueueUrls")

    def _page(self, params: Mapping[str, Any], names: list[str], base: str, key: str) -> tuple[dict[str, Any], Any]:
        limit = _int_param(params, "MaxResults", 1, MAX_LISTED)
        token = params.get("NextToken")
        if token:
            try:
                after = base64.b64decode(str(token).encode("ascii"), altchars=b"-_", validate=True).decode("utf-8")
            except (ValueError, binascii.Error, UnicodeError):
                raise invalid_parameter("Invalid NextToken value.") from None
            names = [n for n in names if n > after]
        page = names[: limit or MAX_LISTED]
        result: dict[str, Any] = {key: [self._url(base, n) for n in page]}
        if limit is not None and len(names) > len(page):
            result["NextToken"] = base64.urlsafe_b64encode(page[-1].encode("utf-8")).decode("ascii")
        if not page and key == "QueueUrls":
            result = {}
        return result, None

    async def delete_queue(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        await self.manager.delete(name)
        self._info.pop(name, None)
        return {}, None

    async def purge_queue(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        """Every message goes, in flight or not; the queue and its props stay (the queue is
        deleted and made again with its own props: waiting receives end empty)."""
        name = self._queue(params)
        info = self._info_of(name)
        await self.manager.purge(name)
        info.queue = self.manager.get(name)  # the same SQS queue, with its attributes
        return {}, None

    async def get_queue_attributes(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        wanted = _names_param(params, "AttributeNames")
        for key in wanted:
            if key != "All" and key not in _ALL_QUEUE_ATTRIBUTES:
                raise modeled("InvalidAttributeName", f"Unknown Attribute {key}.")
        fifo_keys = tuple(_FIFO_ONLY) if self._is_fifo(name) else ()
        keys = [k for k in (*_RANGES, *_READ_ONLY, *fifo_keys) if "All" in wanted or k in wanted]
        out: dict[str, str] = {}
        counts = None
        info = self._info_of(name)
        attributes = self._attributes(name)
        for key in keys:
            if key.startswith("ApproximateNumberOf"):
                if counts is None:
                    counts = self._counts(name)
                out[key] = str(counts[key])
            elif key == "CreatedTimestamp":
                out[key] = attributes.get(key, str(info.created))
            elif key == "LastModifiedTimestamp":
                out[key] = attributes.get(key, str(info.modified))
            elif key == "QueueArn":
                out[key] = queue_arn(self.region, self.account, name)
            else:
                value = self._current(name, key)
                if value != "":
                    out[key] = value
        return ({"Attributes": out} if out else {}), None

    def _counts(self, name: str) -> dict[str, int]:
        """Visible, in flight and delayed messages: the store keeps them as records change."""
        counts = self.manager.store.counts(name)
        return {
            "ApproximateNumberOfMessages": counts.visible,
            "ApproximateNumberOfMessagesNotVisible": counts.in_flight,
            "ApproximateNumberOfMessagesDelayed": counts.delayed,
        }

    async def set_queue_attributes(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        attributes = params.get("Attributes") or {}
        if not isinstance(attributes, dict):
            raise invalid_parameter("Value for parameter Attributes is invalid. Reason: must be a map.")
        props, extra = self._check_attributes(name, attributes)
        info = self._info_of(name)
        now = int(self.clock.now())
        async with self._sqs_lock:
            kept = self._attributes(name)
            if extra or _has_attributes(kept):
                # The whole map is the prop's value: the attributes (and tags) set before stay.
                created = kept.get("CreatedTimestamp", str(info.created))
                props["sqs"] = {**kept, **extra, "CreatedTimestamp": created, "LastModifiedTimestamp": str(now)}
            if props:
                await self.manager.update_props(name, props)
        info.modified = now
        return {}, None

    # -- tags ----------------------------------------------------------------------------------

    def _tags(self, name: str) -> dict[str, str]:
        return _tags_of(self._attributes(name).get(TAGS, ""))

    async def _set_tags(self, name: str, change: Callable[[dict[str, str]], dict[str, str]]) -> None:
        """The queue's tags replaced by ``change`` of them, in its ``sqs`` prop (the other
        entries kept); a queue with neither tags nor attributes left has no ``sqs`` prop."""
        async with self._sqs_lock:
            kept = self._attributes(name)
            tags = change(_tags_of(kept.pop(TAGS, "")))
            if tags:
                kept[TAGS] = _tags_text(tags)
            await self.manager.update_props(name, {"sqs": kept or None})

    async def tag_queue(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        added = _tags_param(params, "Tags")
        if not added:
            raise missing_parameter("Tags")

        def change(tags: dict[str, str]) -> dict[str, str]:
            merged = {**tags, **added}
            if len(merged) > MAX_TAGS:
                raise invalid_parameter(f"Too many tags added for queue {name}: at most {MAX_TAGS}.")
            return merged

        await self._set_tags(name, change)
        return {}, None

    async def untag_queue(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        keys = _names_param(params, "TagKeys")
        if not keys:
            raise missing_parameter("TagKeys")
        gone = set(keys)
        await self._set_tags(name, lambda tags: {k: v for k, v in tags.items() if k not in gone})
        return {}, None

    async def list_queue_tags(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        tags = self._tags(self._queue(params))
        return ({"Tags": tags} if tags else {}), None

    async def list_dead_letter_sources(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        sources = []
        for n in self.manager.queue_names():
            q = self.manager.get(n)
            if q is not None and q.props.dead_letter == name and n != name:
                sources.append(n)
        return self._page(params, sources, base, "queueUrls")

    # -- sending -------------------------------------------------------------------------------

    def _message(
        self, name: str, entry: Mapping[str, Any]
    ) -> tuple[tuple[Metadata, bytes], PushOptions, dict[str, Any], str | None]:
        """One message to send: its item, push options, the answer's fields and, in a FIFO
        queue, its deduplication key; or the error."""
        body = _str_param(entry, "MessageBody")
        if body == "":
            raise invalid_parameter("The request must contain a non-empty message body.")
        bad = _BAD_CHARS.search(body)
        if bad is not None:
            raise modeled(
                "InvalidMessageContents",
                f"Invalid binary character '#x{ord(bad.group()):X}' was found in the message body, the set of allowed"
                " characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF",
            )
        attributes = _message_attributes(entry.get("MessageAttributes"), "MessageAttributes")
        system = _message_attributes(entry.get("MessageSystemAttributes"), "MessageSystemAttributes")
        for key in system:
            if key != "AWSTraceHeader":
                raise invalid_parameter(f"Message system attribute name '{key}' is invalid.")
        fifo = self._is_fifo(name)
        dedup = entry.get("MessageDeduplicationId")
        group = entry.get("MessageGroupId")
        if not fifo and dedup is not None:
            raise invalid_parameter(
                "The request includes MessageDeduplicationId parameter that is not valid for this queue type"
            )
        if group is not None and (not isinstance(group, str) or not 1 <= len(group) <= 128 or _BAD_CHARS.search(group)):
            raise invalid_parameter("Value for parameter MessageGroupId is invalid.")
        if fifo:
            if group is None:
                raise missing_parameter("MessageGroupId")
            if not _DEDUP_ID.fullmatch(group):
                raise invalid_parameter("Value for parameter MessageGroupId is invalid.")
            if entry.get("DelaySeconds") is not None:
                raise invalid_parameter(
                    f"Value {str(entry['DelaySeconds'])[:20]} for parameter DelaySeconds is invalid. Reason: The "
                    "request include parameter that is not valid for this queue type."
                )
            if dedup is None:
                if self._attribute(name, "ContentBasedDeduplication") != "true":
                    raise invalid_parameter(
                        "The queue should either have ContentBasedDeduplication enabled or "
                        "MessageDeduplicationId provided explicitly"
                    )
                dedup = hashlib.sha256(body.encode("utf-8")).hexdigest()
            elif not isinstance(dedup, str) or not _DEDUP_ID.fullmatch(dedup):
                raise invalid_parameter("Value for parameter MessageDeduplicationId is invalid.")
        encoded = body.encode("utf-8")
        size = len(encoded) + sum(_attribute_size(k, v) for k, v in attributes.items())
        limit = int(self._attribute(name, "MaximumMessageSize") or MAX_MESSAGE_BYTES)
        if size > limit:
            raise invalid_parameter(
                f"One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
            )
        delay = _int_param(entry, "DelaySeconds", 0, MAX_DELAY)
        if delay is None:
            delay = int(self._attribute(name, "DelaySeconds") or 0)
        message_id = str(_uuidlib.uuid4())
        md: list[tuple[bytes, bytes]] = [(b"content-type", TEXT_TYPE), (H_ID, message_id.encode("ascii"))]
        for key, value in attributes.items():
            md.append((H_ATTR + key.encode("ascii"), _stored_attribute(value)))
        for key, value in system.items():
            md.append((H_SYS + key.encode("ascii"), _stored_attribute(value)))
        if isinstance(group, str):
            md.append((H_SYS + b"MessageGroupId", b"String " + group.encode("utf-8")))
        answer: dict[str, Any] = {"MD5OfMessageBody": md5_body(body)}
        if attributes:
            answer["MD5OfMessageAttributes"] = md5_attributes(attributes)
        if system:
            answer["MD5OfMessageSystemAttributes"] = md5_attributes(system)
        answer["MessageId"] = message_id
        dedup_key: str | None = None
        if fifo:
            assert isinstance(dedup, str) and isinstance(group, str)
            sequence = self._sequence()
            md.append((H_SYS + b"MessageDeduplicationId", b"String " + dedup.encode("ascii")))
            md.append((H_SYS + b"SequenceNumber", b"String " + sequence.encode("ascii")))
            answer["SequenceNumber"] = sequence
            scope = self._attribute(name, "DeduplicationScope")
            dedup_key = f"{group}\n{dedup}" if scope == "messageGroup" else dedup
        now = self.clock.now()
        retention = self._retention(name)
        options = PushOptions(
            not_before=now + delay if delay else None,
            expires=None if retention is None else now + retention,
            track=True,
            hard=retention is not None,
            group=group if fifo else None,
        )
        return (tuple(md), encoded), options, answer, dedup_key

    def _sequence(self) -> str:
        """A FIFO message's SequenceNumber: increasing across sends and restarts (nanoseconds of
        the node's clock, at least one more than the last), 20 digits as SQS's."""
        self._last_sequence = max(self._last_sequence + 1, int(self.clock.now() * 1e9))
        return f"{self._last_sequence:020d}"

    async def _send(self, name: str, entry: Mapping[str, Any]) -> dict[str, Any]:
        """One send: a FIFO send whose deduplication id was sent within the window is answered
        as that send was, and pushes nothing."""
        item, options, answer, key = self._message(name, entry)
        if key is None:
            await self.manager.push_with(name, item, options)
            return answer
        store = self.manager.store
        sent = store.dedup_ids(name)
        now = self.clock.now()
        prune_dedup(sent, now)
        hit = sent.get(key)
        if hit is not None:
            answer["MessageId"], answer["SequenceNumber"] = hit[1], hit[2]
            return answer
        # Taken before the push's await: a concurrent send of the same id is a duplicate.
        sent[key] = (now, answer["MessageId"], answer["SequenceNumber"])
        if self.manager.virtual_members(name) is None:
            # Other nodes sharing the store may be sending it too: the store takes the id with
            # the record, atomically (a virtual queue's members keep no ids of their own).
            claim = DedupClaim(key, now, answer["MessageId"], answer["SequenceNumber"])
            options = dataclasses.replace(options, dedup=claim)
        try:
            await self.manager.push_with(name, item, options)
        except Duplicate as e:
            sent[key] = (now, e.message_id, e.sequence)
            answer["MessageId"], answer["SequenceNumber"] = e.message_id, e.sequence
            return answer
        except BaseException:
            sent.pop(key, None)
            raise
        # Journaled after the push, so that a refused push leaves no id that would answer a
        # resend without a message; the barrier makes it durable before the answer, so that a
        # resend after a crash dedups.
        store.keep_dedup(name, key, now, answer["MessageId"], answer["SequenceNumber"])
        await store.barrier()
        return answer

    def _send_target(self, params: Mapping[str, Any]) -> str:
        """The queue (or virtual queue: a send fans out to its queues) a send names."""
        name = queue_name_of(_str_param(params, "QueueUrl"))
        if self.manager.get(name) is None and self.manager.virtual_members(name) is None:
            raise no_queue()
        return name

    async def send_message(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._send_target(params)
        return await self._send(name, params), None

    async def send_message_batch(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._send_target(params)
        entries = _list_param(params, "Entries")
        batch_ids(entries)
        total = 0
        for e in entries:
            body, attributes = e.get("MessageBody"), e.get("MessageAttributes")
            total += len(body.encode("utf-8", "surrogatepass")) if isinstance(body, str) else 0
            if isinstance(attributes, dict):
                total += sum(_attribute_size(k, v) for k, v in attributes.items())
        if total > MAX_MESSAGE_BYTES:
            raise modeled(
                "BatchRequestTooLong",
                f"Batch requests cannot be longer than {MAX_MESSAGE_BYTES} bytes. You have sent {total} bytes.",
            )
        ok: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        for entry in entries:
            try:
                answer = await self._send(name, entry)
            except SqsError as e:
                failed.append(_failure(entry["Id"], e))
                continue
            except LMQError as e:
                failed.append(_failure(entry["Id"], _from_lmq(e)))
                continue
            ok.append({"Id": entry["Id"], **answer})
        return {"Successful": ok, "Failed": failed}, None

    # -- receiving -----------------------------------------------------------------------------

    async def receive_message(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        count = _int_param(params, "MaxNumberOfMessages", 1, MAX_RECEIVE, 1)
        wait = _int_param(params, "WaitTimeSeconds", 0, MAX_WAIT)
        if wait is None:
            wait = int(self._attribute(name, "ReceiveMessageWaitTimeSeconds") or 0)
        visibility = _int_param(params, "VisibilityTimeout", 0, MAX_VISIBILITY)
        system = {*_names_param(params, "AttributeNames"), *_names_param(params, "MessageSystemAttributeNames")}
        for key in system:
            if key != "All" and key not in _SYSTEM_ATTRIBUTES and key not in _ALL_QUEUE_ATTRIBUTES:
                raise modeled("InvalidAttributeName", f"Unknown Attribute {key}.")
        wanted = _names_param(params, "MessageAttributeNames")
        assert count is not None
        q = self.manager.get(name)
        if not self._is_fifo(name):
            # SQS's in-flight limit of a standard queue: refused at it, and a receive below it
            # takes no more than the room left, so no receive passes it.
            room = self.max_in_flight - self.manager.store.counts(name).in_flight
            if room <= 0:
                raise modeled(
                    "OverLimit", f"The queue has reached its limit of {self.max_in_flight} in flight messages."
                )
            count = min(count, room)
        if q is not None and self._is_fifo(name):
            # A delete frees the group's next message: waiting receives are told, also for
            # groups recovered from the store that this process has not delivered yet.
            q.grouped = True
        taken = await self.manager.pull_many(name, count, float(wait), groups=self._is_fifo(name))
        deliveries: list[Delivery] = []
        pending = list(taken)
        try:
            while pending:
                d = pending[0]
                if d.message.type is StoredMessageType.COMPOUND:
                    # Its parts have headers of their own that an SQS message cannot carry.
                    await self.manager.put_back(d.queue, d.message.uuid)
                else:
                    if visibility is not None and visibility != self.manager.props_of(name).timeout:
                        await self.manager.ext(name, d.message.uuid, float(visibility))
                    deliveries.append(d)
                pending.pop(0)
        except BaseException:
            # The client left (or the store failed): nothing it was not sent stays taken.
            for d in (*deliveries, *pending):
                await self.manager.put_back(d.queue, d.message.uuid)
            raise
        messages = [self._received(d, system, wanted) for d in deliveries]
        return ({"Messages": messages} if messages else {}), (tuple(deliveries) or None)

    def _received(self, d: Delivery, system: set[str], wanted: list[str]) -> dict[str, Any]:
        msg = d.message
        assert isinstance(msg.content, tuple)
        md, raw = msg.content
        message_id = None
        attributes: dict[str, Any] = {}
        sys_attributes: dict[str, str] = {}
        for k, v in md:
            if k == H_ID:
                message_id = v.decode("ascii", "replace")
            elif k.startswith(H_ATTR):
                attributes[k[len(H_ATTR) :].decode("ascii", "replace")] = _loaded_attribute(v)
            elif k.startswith(H_SYS):
                sys_attributes[k[len(H_SYS) :].decode("ascii", "replace")] = _loaded_attribute(v).get("StringValue", "")
        try:
            body = raw.decode("utf-8")
            if _BAD_CHARS.search(body):
                raise UnicodeError
        except UnicodeError:
            body = base64.b64encode(raw).decode("ascii")
            attributes[BODY_ENCODING] = {"StringValue": "base64", "DataType": "String"}
        out: dict[str, Any] = {
            "MessageId": message_id or uuid_text(msg.uuid),
            "ReceiptHandle": encode_receipt(d.queue, msg.uuid),
            "MD5OfBody": md5_body(body),
            "Body": body,
        }
        if system:
            shown = self._system_attributes(d, sys_attributes)
            out["Attributes"] = {k: v for k, v in shown.items() if "All" in system or k in system}
        chosen = {k: v for k, v in attributes.items() if _wanted(k, wanted)}
        if chosen:
            out["MD5OfMessageAttributes"] = md5_attributes(chosen)
            out["MessageAttributes"] = chosen
        return out

    def _system_attributes(self, d: Delivery, stored: dict[str, str]) -> dict[str, str]:
        msg = d.message
        ext = msg.ext
        out = {"SenderId": self.account}
        if ext is not None and ext.sent_at is not None:
            out["SentTimestamp"] = _ms(ext.sent_at)
        out["ApproximateReceiveCount"] = str(_receive_count(msg, self.manager.props_of(d.queue).retry))
        if ext is not None and ext.first_at is not None:
            out["ApproximateFirstReceiveTimestamp"] = _ms(ext.first_at)
        out.update(stored)
        if ext is not None and ext.dead is not None:
            out["DeadLetterQueueSourceArn"] = queue_arn(self.region, self.account, ext.dead.origin)
        return out

    # -- deleting and visibility ---------------------------------------------------------------

    def _delivery(self, name: str, handle: Any) -> bytes:
        queue, uuid = decode_receipt(handle)
        if queue != name:
            raise modeled(
                "ReceiptHandleIsInvalid",
                f'The input receipt handle "{str(handle)[:200]}" is not a valid receipt handle.',
            )
        return uuid

    async def delete_message(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        await self._delete(name, _str_param(params, "ReceiptHandle"))
        return {}, None

    async def _delete(self, name: str, handle: Any) -> None:
        uuid = self._delivery(name, handle)
        try:
            await self.manager.ack(name, uuid)
        except QueueNotFound:
            raise no_queue() from None
        except NotFound:
            pass  # SQS answers a handle whose delivery is over (deleted, expired) as a success

    async def delete_message_batch(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        entries = _list_param(params, "Entries")
        batch_ids(entries)
        return await self._each(entries, lambda e: self._delete(name, e.get("ReceiptHandle")))

    async def change_visibility(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        await self._change(name, params)
        return {}, None

    async def _change(self, name: str, entry: Mapping[str, Any]) -> None:
        uuid = self._delivery(name, _str_param(entry, "ReceiptHandle"))
        timeout = _int_param(entry, "VisibilityTimeout", 0, MAX_VISIBILITY)
        if timeout is None:
            raise missing_parameter("VisibilityTimeout")
        try:
            if timeout == 0:
                await self.manager.nack(name, uuid)  # visible again now
            else:
                await self.manager.ext(name, uuid, float(timeout))
        except QueueNotFound:
            raise no_queue() from None
        except NotFound:
            raise modeled("MessageNotInflight", "The message referred to isn't in flight.") from None

    async def change_visibility_batch(self, params: dict[str, Any], base: str) -> tuple[dict[str, Any], Any]:
        name = self._queue(params)
        entries = _list_param(params, "Entries")
        batch_ids(entries)
        return await self._each(entries, lambda e: self._change(name, e))

    async def _each(
        self, entries: list[Any], op: Callable[[dict[str, Any]], Awaitable[None]]
    ) -> tuple[dict[str, Any], Any]:
        ok: list[dict[str, Any]] = []
        failed: list[dict[str, Any]] = []
        for entry in entries:
            try:
                await op(entry)
            except SqsError as e:
                failed.append(_failure(entry["Id"], e))
                continue
            ok.append({"Id": entry["Id"]})
        return {"Successful": ok, "Failed": failed}, None


# -- helpers ----------------------------------------------------------------------------------------


def too_large(headers: Mapping[bytes, bytes], limit: int) -> Response:
    """The answer to a request whose body is over ``limit`` bytes, before it is read: an SQS
    error in the request's protocol (known from its headers). AWS's own front end answers 413
    with a body no SDK parses; this one botocore reads as ``RequestEntityTooLarge``."""
    error = SqsError("RequestEntityTooLarge", f"The request body is over {limit} bytes.", status=413)
    return _error(protocol_of(headers), error, str(_uuidlib.uuid4()))


def _amz_time(t: float) -> str:
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(t))


def _head(ctype: bytes, request_id: str) -> bytes:
    return b"Content-Type: " + ctype + b"\r\nx-amzn-RequestId: " + request_id.encode("ascii") + b"\r\n"


def _error(protocol: Any, e: SqsError, request_id: str) -> Response:
    ctype, extra, body = encode_error(protocol, e, request_id)
    return Response(e.http_status, _head(ctype, request_id) + extra, body)


def _from_lmq(e: LMQError) -> SqsError:
    """An error of the core as SQS's: bad input is InvalidParameterValue, what this node cannot
    do (in a mixed cluster) UnsupportedOperation, the rest a server error."""
    if isinstance(e, QueueNotFound):
        return no_queue()
    if isinstance(e, NotSupported):
        return modeled("UnsupportedOperation", e.detail)
    if isinstance(e, InvalidProps) or 400 <= e.http_status < 500:
        return invalid_parameter(e.detail)
    if e.http_status == 503:
        return SqsError("ServiceUnavailable", e.detail, status=503, sender=False)
    return SqsError("InternalFailure", e.detail, status=500, sender=False)


def _failure(entry_id: str, e: SqsError) -> dict[str, Any]:
    return {"Id": entry_id, "SenderFault": e.sender, "Code": e.code, "Message": e.message}


def _has_attributes(sqs: Mapping[str, str]) -> bool:
    """Whether an ``sqs`` prop holds SQS attributes (and not only tags): a queue made over LMQ
    and only tagged keeps LMQ's rules (no retention)."""
    return any(k != TAGS for k in sqs)


def _tags_param(params: Mapping[str, Any], name: str) -> dict[str, str]:
    """Tags checked as SQS checks them: at most 50, keys of 1 to 128 characters (case-sensitive,
    not starting ``aws:``), values of 0 to 256."""
    value = params.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_parameter(f"Value for parameter {name} is invalid. Reason: must be a map.")
    if len(value) > MAX_TAGS:
        raise invalid_parameter(f"Too many tags: {len(value)}, at most {MAX_TAGS} per queue.")
    for k, v in value.items():
        if not isinstance(k, str) or not 1 <= len(k) <= MAX_TAG_KEY or _BAD_CHARS.search(k):
            raise invalid_parameter(f"Tag key {str(k)[:MAX_TAG_KEY]!r} is invalid: 1 to {MAX_TAG_KEY} characters.")
        if k.lower().startswith("aws:"):
            raise invalid_parameter(f"Tag key {k!r} is invalid: the prefix 'aws:' is reserved.")
        if not isinstance(v, str) or len(v) > MAX_TAG_VALUE or _BAD_CHARS.search(v):
            raise invalid_parameter(f"The value of tag {k!r} is invalid: 0 to {MAX_TAG_VALUE} characters.")
    return dict(value)


def _tags_text(tags: Mapping[str, str]) -> str:
    return json.dumps(tags, ensure_ascii=False, separators=(",", ":"))


def _tags_of(text: str) -> dict[str, str]:
    """The tags an ``sqs`` prop's entry holds (none if it holds no JSON object of text: the prop
    may be set over LMQ's HTTP API too)."""
    try:
        tags = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(tags, dict):
        return {}
    return {k: v for k, v in tags.items() if isinstance(v, str)}


def _number(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(v)


def _normal(key: str, value: str) -> str:
    """An attribute value as compared by CreateQueue (a redrive policy's JSON normalised)."""
    if key == "RedrivePolicy" and value:
        try:
            p = json.loads(value)
            return json.dumps({"a": p.get("deadLetterTargetArn"), "c": int(p.get("maxReceiveCount"))})
        except (ValueError, TypeError, AttributeError):
            return value
    return value


def _message_attributes(value: Any, name: str) -> dict[str, dict[str, Any]]:
    """Message attributes checked as SQS checks them: at most 10, each a valid name and a
    value of its data type."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid_parameter(f"Value for parameter {name} is invalid. Reason: must be a map.")
    if len(value) > MAX_ATTRIBUTES:
        raise invalid_parameter(
            f"Number of message attributes [{len(value)}] exceeds the allowed maximum [{MAX_ATTRIBUTES}]."
        )
    out: dict[str, dict[str, Any]] = {}
    for key, v in value.items():
        low = key.lower()
        if (
            not _ATTR_NAME.fullmatch(key)
            or low.startswith(("aws.", "amazon."))
            or ".." in key
            or key.startswith(".")
            or key.endswith(".")
            or key == BODY_ENCODING
        ):
            raise invalid_parameter(f"Message attribute name '{key[:256]}' is invalid.")
        if not isinstance(v, dict) or not isinstance(v.get("DataType"), str):
            raise invalid_parameter(f"The message attribute '{key}' must contain non-empty message attribute type.")
        dtype = v["DataType"]
        if not _DATA_TYPE.fullmatch(dtype):
            raise invalid_parameter(
                f"The type of message attribute '{key}' is invalid. You must use only the following supported"
                " type prefixes: Binary, Number, String."
            )
        if dtype.startswith("Binary"):
            raw = v.get("BinaryValue")
            try:
                data = raw if isinstance(raw, bytes) else base64.b64decode(raw or "", validate=True)
            except (ValueError, binascii.Error, TypeError):
                raise invalid_parameter(f"The message attribute '{key}' has an invalid binary value.") from None
            if not data:
                raise invalid_parameter(
                    f"The message attribute '{key}' must contain non-empty message attribute value."
                )
            out[key] = {"BinaryValue": base64.b64encode(data).decode("ascii"), "DataType": dtype}
            continue
        text = v.get("StringValue")
        if not isinstance(text, str) or text == "":
            raise invalid_parameter(f"The message attribute '{key}' must contain non-empty message attribute value.")
        if _BAD_CHARS.search(text):
            raise invalid_parameter(f"The message attribute '{key}' contains an invalid character.")
        if dtype.startswith("Number"):
            try:
                Decimal(text)
            except InvalidOperation:
                raise invalid_parameter(
                    f"Can't cast the value of message (user) attribute '{key}' to a number."
                ) from None
        out[key] = {"StringValue": text, "DataType": dtype}
    return out


def _attribute_size(key: str, value: Any) -> int:
    """Bytes an attribute counts toward the message size (name, type, value)."""
    if not isinstance(value, dict):
        return 0
    raw = value.get("BinaryValue")
    if raw is not None:
        n = len(raw) if isinstance(raw, bytes) else len(str(raw)) * 3 // 4
    else:
        n = len(str(value.get("StringValue", "")).encode("utf-8"))
    return len(key.encode("utf-8")) + len(str(value.get("DataType", "")).encode("utf-8")) + n


def _stored_attribute(value: Mapping[str, Any]) -> bytes:
    """An attribute as a metadata value: its data type, a space, its value (binary in base64)."""
    payload = value["BinaryValue"] if "BinaryValue" in value else value["StringValue"]
    return f"{value['DataType']} {payload}".encode()


def _loaded_attribute(stored: bytes) -> dict[str, Any]:
    dtype, _, payload = stored.decode("utf-8", "replace").partition(" ")
    if dtype.startswith("Binary"):
        return {"BinaryValue": payload, "DataType": dtype}
    return {"StringValue": payload, "DataType": dtype}


def _wanted(key: str, wanted: list[str]) -> bool:
    return any(w in ("All", ".*") or w == key or (w.endswith(".*") and key.startswith(w[:-1])) for w in wanted)


def _receive_count(msg: StoredMessage, queue_retry: int | None) -> int:
    """Deliveries so far: the record's count, else what LMQ's retry accounting says (the queue's
    retry + 1 deliveries stored at the push, one spent by each), else 1."""
    if msg.ext is not None:
        return max(1, msg.ext.attempts)
    if queue_retry is not None and msg.retry is not None:
        return max(1, queue_retry + 1 - msg.retry)
    return 1
