"""Amazon SQS's two wire protocols, without I/O (docs/sqs.md): requests, answers, errors,
checksums, queue URLs, receipt handles and SigV4 signatures.

- The JSON protocol current SDKs speak: ``POST /`` with ``Content-Type:
  application/x-amz-json-1.0`` and ``X-Amz-Target: AmazonSQS.<Action>``; the body is the
  action's input as JSON. An error is ``{"__type": ..., "message": ...}`` with the header
  ``x-amzn-query-error: <query code>;Sender`` from which botocore takes the error code.
- The query protocol older SDKs and tools speak: a form (``Action=SendMessage&...``) in the body
  or the query string, lists and maps flattened (``Attribute.1.Name``); answers are XML in the
  2012-11-05 namespace, errors an ``ErrorResponse``.

Both are parsed into one shape, the JSON protocol's input (:class:`SqsRequest.params`), so that
the actions (:mod:`pylmq.api.sqs`) read one form; both answers are made from one JSON-shaped
result. Nothing here knows a queue.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import hashlib
import hmac
import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import parse_qsl, quote, unquote, urlsplit
from xml.sax.saxutils import escape

from pylmq.errors import LMQError
from pylmq.wire.numbers import whole_number

__all__ = [
    "DEFAULT_ACCOUNT",
    "DEFAULT_MAX_BODY",
    "DEFAULT_REGION",
    "JSON_CONTENT_TYPE",
    "MAX_BATCH_ENTRIES",
    "MAX_MESSAGE_BYTES",
    "MAX_SKEW",
    "NAMESPACE",
    "Authorization",
    "SqsError",
    "SqsRequest",
    "check_signature",
    "decode_receipt",
    "encode_error",
    "encode_receipt",
    "encode_result",
    "integer_of",
    "md5_attributes",
    "md5_body",
    "parse_authorization",
    "parse_request",
    "queue_arn",
    "queue_name_of",
    "queue_url",
    "signature_time",
]

NAMESPACE: Final = "http://queue.amazonaws.com/doc/2012-11-05/"
JSON_CONTENT_TYPE: Final = "application/x-amz-json-1.0"
DEFAULT_ACCOUNT: Final = "000000000000"
DEFAULT_REGION: Final = "us-east-1"
MAX_MESSAGE_BYTES: Final = 262_144
"""SQS's largest message (body and attributes): 256 KiB."""
MAX_BATCH_ENTRIES: Final = 10
MAX_IN_FLIGHT: Final = 120_000
"""SQS's in-flight messages (received, not deleted, visibility timeout running) per standard
queue: a receive past it is answered ``OverLimit``."""
DEFAULT_MAX_BODY: Final = 4 << 20
"""Bytes of one request: a batch of 256 KiB with JSON escapes and base64 fits, much more does not."""
MAX_PARAMS: Final = 2000
"""Fields of one query-protocol form (ten entries of ten attributes each take a few hundred)."""
MAX_INDEX: Final = 100
"""Highest list index of a flattened query parameter (``Attribute.N``)."""

Protocol = Literal["json", "query"]


class SqsError(LMQError):
    """An SQS error answer: ``code`` is the error's query-protocol code (what botocore reports as
    ``Error.Code``), ``shape`` its name in the JSON protocol's ``__type``."""

    reason = "sqs_error"
    http_status = 400

    def __init__(self, code: str, message: str, *, status: int = 400, shape: str | None = None, sender: bool = True):
        super().__init__(message)
        self.code = code
        self.message = message
        self.http_status = status
        self.shape = shape or code
        self.sender = sender


# The modeled errors: shape name (JSON __type) -> query code (botocore's Error.Code).
_QUERY_CODES: Final = {
    "QueueDoesNotExist": "AWS.SimpleQueueService.NonExistentQueue",
    "QueueNameExists": "QueueAlreadyExists",
    "QueueDeletedRecently": "AWS.SimpleQueueService.QueueDeletedRecently",
    "BatchEntryIdsNotDistinct": "AWS.SimpleQueueService.BatchEntryIdsNotDistinct",
    "TooManyEntriesInBatchRequest": "AWS.SimpleQueueService.TooManyEntriesInBatchRequest",
    "EmptyBatchRequest": "AWS.SimpleQueueService.EmptyBatchRequest",
    "InvalidBatchEntryId": "AWS.SimpleQueueService.InvalidBatchEntryId",
    "BatchRequestTooLong": "AWS.SimpleQueueService.BatchRequestTooLong",
    "MessageNotInflight": "AWS.SimpleQueueService.MessageNotInflight",
    "UnsupportedOperation": "AWS.SimpleQueueService.UnsupportedOperation",
    "PurgeQueueInProgress": "AWS.SimpleQueueService.PurgeQueueInProgress",
    "ReceiptHandleIsInvalid": "ReceiptHandleIsInvalid",
    "InvalidAttributeName": "InvalidAttributeName",
    "InvalidAttributeValue": "InvalidAttributeValue",
    "InvalidMessageContents": "InvalidMessageContents",
    "OverLimit": "OverLimit",
}


def modeled(shape: str, message: str) -> SqsError:
    """One of the errors SQS's model names (its query code looked up)."""
    return SqsError(_QUERY_CODES[shape], message, shape=shape)


def invalid_parameter(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


def missing_parameter(name: str) -> SqsError:
    return SqsError("MissingParameter", f"The request must contain the parameter {name}.")


def no_queue() -> SqsError:
    return modeled("QueueDoesNotExist", "The specified queue does not exist.")


# -- requests -------------------------------------------------------------------------------------


@dataclass(slots=True)
class SqsRequest:
    """An action, its input in the JSON protocol's shape, and the protocol to answer in."""

    action: str
    params: dict[str, Any]
    protocol: Protocol


_TARGET_PREFIX: Final = "AmazonSQS."
_ACTION: Final = re.compile(r"[A-Za-z]{1,64}")


def _header(headers: Mapping[bytes, bytes], name: bytes) -> str:
    return headers.get(name, b"").decode("latin-1").strip()


def protocol_of(headers: Mapping[bytes, bytes]) -> Protocol:
    """The wire protocol a request speaks, known from its headers (before its body is read)."""
    target = _header(headers, b"x-amz-target")
    ctype = _header(headers, b"content-type").partition(";")[0].strip().lower()
    return "json" if target or ctype.startswith("application/x-amz-json") else "query"


def parse_request(method: str, path: str, query: str, headers: Mapping[bytes, bytes], body: bytes) -> SqsRequest:
    """One HTTP request as an :class:`SqsRequest`, or :class:`SqsError` (answered in the query
    protocol's form unless the request was plainly a JSON one)."""
    target = _header(headers, b"x-amz-target")
    if protocol_of(headers) == "json":
        if method != "POST":
            raise SqsError("InvalidAction", "The JSON protocol takes POST requests only.", status=405)
        if not target.startswith(_TARGET_PREFIX) or not _ACTION.fullmatch(target[len(_TARGET_PREFIX) :]):
            raise SqsError("InvalidAction", f"X-Amz-Target must be AmazonSQS.<Action>, got {target[:80]!r}.")
        try:
            params = json.loads(body) if body.strip() else {}
        except (ValueError, RecursionError):
            raise SqsError("SerializationException", "The request body is not valid JSON.") from None
        if not isinstance(params, dict):
            raise SqsError("SerializationException", "The request body must be a JSON object.")
        return SqsRequest(target[len(_TARGET_PREFIX) :], params, "json")
    if method not in ("GET", "POST"):
        raise SqsError("InvalidAction", f"Method {method} is not supported.", status=405)
    form = query
    if method == "POST" and body:
        try:
            form = (query + "&" if query else "") + body.decode("utf-8")
        except UnicodeDecodeError:
            raise SqsError("MalformedQueryString", "The form is not UTF-8.") from None
    try:
        pairs = parse_qsl(form, keep_blank_values=True, strict_parsing=False, max_num_fields=MAX_PARAMS)
    except ValueError:
        raise SqsError("MalformedQueryString", f"A form holds at most {MAX_PARAMS} fields.") from None
    fields: dict[str, str] = {}
    for k, v in pairs:
        fields.setdefault(k, v)
    action = fields.pop("Action", "")
    if not _ACTION.fullmatch(action):
        raise SqsError("MissingAction", "The request must contain the parameter Action.")
    params = _unflatten(action, fields)
    if "QueueUrl" not in params and path not in ("", "/"):
        # Older SDKs post to the queue's URL and leave QueueUrl out.
        params["QueueUrl"] = path
    return SqsRequest(action, params, "query")


# Flattened query names -> the JSON input's member, for each list or map SQS's actions take.
_LISTS: Final = {
    "AttributeName": "AttributeNames",
    "MessageAttributeName": "MessageAttributeNames",
    "MessageSystemAttributeName": "MessageSystemAttributeNames",
    "TagKey": "TagKeys",
}
_ENTRY_LISTS: Final = {
    "SendMessageBatchRequestEntry": "Entries",
    "DeleteMessageBatchRequestEntry": "Entries",
    "ChangeMessageVisibilityBatchRequestEntry": "Entries",
}
_INTEGERS: Final = frozenset(
    ("DelaySeconds", "MaxNumberOfMessages", "VisibilityTimeout", "WaitTimeSeconds", "MaxResults")
)


def integer_of(text: str) -> int | None:
    """A decimal integer written in ASCII digits, or None: ``str.isdigit`` also takes digits
    ``int`` refuses (``"²"``) and numbers longer than ``int`` parses, each then an
    InternalFailure instead of the client's error."""
    return whole_number(text.strip(), 18, signed=True)


def _index(text: str) -> int:
    n = integer_of(text)
    if n is None or not 1 <= n <= MAX_INDEX:
        raise SqsError("MalformedQueryString", f"A list index must be 1 to {MAX_INDEX}, got {text[:20]!r}.")
    return n


def _scalar(name: str, value: str) -> Any:
    if name in _INTEGERS:
        try:
            return int(value)
        except ValueError:
            raise invalid_parameter(
                f"Value {value[:80]} for parameter {name} is invalid. Reason: not an integer."
            ) from None
    return value


def _attribute_map(items: dict[int, dict[str, str]], value_key: str = "Value") -> dict[str, Any]:
    """``Attribute.N.Name`` / ``Attribute.N.Value`` pairs as a map (in index order)."""
    out: dict[str, Any] = {}
    for _, item in sorted(items.items()):
        if "Name" in item:
            out[item["Name"]] = item.get(value_key, "")
    return out


def _message_attributes(items: dict[int, dict[str, str]]) -> dict[str, Any]:
    """``MessageAttribute.N.Name`` / ``.Value.DataType`` / ``.Value.StringValue`` / ``.Value.BinaryValue``."""
    out: dict[str, Any] = {}
    for _, item in sorted(items.items()):
        if "Name" not in item:
            continue
        value: dict[str, Any] = {}
        for k in ("DataType", "StringValue", "BinaryValue"):
            if f"Value.{k}" in item:
                value[k] = item[f"Value.{k}"]
        out[item["Name"]] = value
    return out


def _unflatten(action: str, fields: dict[str, str]) -> dict[str, Any]:
    """A form's fields in the JSON input's shape, in one pass over them: ``Prefix.N.Rest``
    fields grouped by prefix and index, lists in index order."""
    params: dict[str, Any] = {}
    lists: dict[str, dict[int, str]] = {}
    groups: dict[str, dict[int, dict[str, str]]] = {}
    for k, v in fields.items():
        head, sep, rest = k.partition(".")
        if not sep:
            if k not in ("Version", "Expires", "Timestamp", "SignatureVersion", "SignatureMethod", "AWSAccessKeyId"):
                params[k] = _scalar(k, v)
        elif head in _LISTS:
            lists.setdefault(_LISTS[head], {})[_index(rest)] = v
        else:
            n, sep, sub = rest.partition(".")
            if sep:
                groups.setdefault(head, {}).setdefault(_index(n), {})[sub] = v
    for name, items in lists.items():
        params[name] = [v for _, v in sorted(items.items())]
    for head, grouped in groups.items():
        if head == "Attribute":
            params["Attributes"] = _attribute_map(grouped)
        elif head == "MessageAttribute":
            params["MessageAttributes"] = _message_attributes(grouped)
        elif head == "MessageSystemAttribute":
            params["MessageSystemAttributes"] = _message_attributes(grouped)
        elif head == "Tag":
            # CreateQueue's input names the map ``tags``, TagQueue's ``Tags``.
            tags = {i["Key"]: i.get("Value", "") for _, i in sorted(grouped.items()) if "Key" in i}
            params["Tags" if action == "TagQueue" else "tags"] = tags
        elif head in _ENTRY_LISTS:
            params[_ENTRY_LISTS[head]] = [_entry(e) for _, e in sorted(grouped.items())]
    return params


def _entry(fields: dict[str, str]) -> dict[str, Any]:
    """One batch entry's flattened fields (``Id``, ``MessageBody``, ``MessageAttribute.N....``)."""
    out: dict[str, Any] = {}
    nested: dict[str, dict[int, dict[str, str]]] = {}
    for k, v in fields.items():
        head, sep, rest = k.partition(".")
        if not sep:
            out[k] = _scalar(k, v)
            continue
        n, sep, sub = rest.partition(".")
        if sep:
            nested.setdefault(head, {}).setdefault(_index(n), {})[sub] = v
    if "MessageAttribute" in nested:
        out["MessageAttributes"] = _message_attributes(nested["MessageAttribute"])
    if "MessageSystemAttribute" in nested:
        out["MessageSystemAttributes"] = _message_attributes(nested["MessageSystemAttribute"])
    return out


# -- answers --------------------------------------------------------------------------------------

# JSON result member -> the XML element of each of its items (lists and maps are flattened).
_XML_LISTS: Final = {
    "QueueUrls": "QueueUrl",
    "queueUrls": "QueueUrl",
    "Messages": "Message",
    "Failed": "BatchResultErrorEntry",
}
_XML_MAPS: Final = {"Attributes": "Attribute", "MessageAttributes": "MessageAttribute", "Tags": "Tag"}
# The element naming each entry's key: ``Name``, but a tag's is ``Key`` (ListQueueTagsResult).
_XML_MAP_KEYS: Final = {"Tags": "Key"}


def _xml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return escape(str(v))


def _xml(name: str, value: Any, action: str, out: list[str]) -> None:
    if isinstance(value, list):
        item = _XML_LISTS.get(name, f"{action}ResultEntry" if name == "Successful" else name)
        for v in value:
            _xml(item, v, action, out)
    elif isinstance(value, dict) and name in _XML_MAPS:
        tag = _XML_MAPS[name]
        for k, v in value.items():
            key = _XML_MAP_KEYS.get(name, "Name")
            out.append(f"<{tag}><{key}>{escape(k)}</{key}>")
            if isinstance(v, dict):
                out.append("<Value>")
                for vk, vv in v.items():
                    _xml(vk, vv, action, out)
                out.append("</Value>")
            else:
                out.append(f"<Value>{_xml_value(v)}</Value>")
            out.append(f"</{tag}>")
    elif isinstance(value, dict):
        out.append(f"<{name}>")
        for k, v in value.items():
            _xml(k, v, action, out)
        out.append(f"</{name}>")
    else:
        out.append(f"<{name}>{_xml_value(value)}</{name}>")


def encode_result(req: SqsRequest, result: Mapping[str, Any], request_id: str) -> tuple[bytes, bytes]:
    """An action's result in the request's protocol: (content type, body)."""
    if req.protocol == "json":
        return JSON_CONTENT_TYPE.encode(), json.dumps(result, separators=(",", ":")).encode()
    action = req.action
    out = [f'<?xml version="1.0"?><{action}Response xmlns="{NAMESPACE}">']
    if result:
        out.append(f"<{action}Result>")
        for k, v in result.items():
            _xml(k, v, action, out)
        out.append(f"</{action}Result>")
    out.append(f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>")
    return b"text/xml", "".join(out).encode("utf-8")


def encode_error(protocol: Protocol, err: SqsError, request_id: str) -> tuple[bytes, bytes, bytes]:
    """An error answer: (content type, extra header lines, body)."""
    fault = "Sender" if err.sender else "Receiver"
    if protocol == "json":
        body = json.dumps({"__type": f"com.amazonaws.sqs#{err.shape}", "message": err.message})
        head = f"x-amzn-query-error: {err.code};{fault}\r\n".encode()
        return JSON_CONTENT_TYPE.encode(), head, body.encode()
    xml = (
        f'<?xml version="1.0"?><ErrorResponse xmlns="{NAMESPACE}"><Error><Type>{fault}</Type>'
        f"<Code>{escape(err.code)}</Code><Message>{escape(err.message)}</Message><Detail/></Error>"
        f"<RequestId>{request_id}</RequestId></ErrorResponse>"
    )
    return b"text/xml", b"", xml.encode("utf-8")


# -- checksums ------------------------------------------------------------------------------------


def md5_body(body: str) -> str:
    return hashlib.md5(body.encode("utf-8")).hexdigest()


def _attribute_value(value: Mapping[str, Any]) -> tuple[int, bytes]:
    """The transport byte and the value bytes SQS hashes (1: a string, 2: binary)."""
    if "BinaryValue" in value:
        raw = value["BinaryValue"]
        return 2, raw if isinstance(raw, bytes) else base64.b64decode(raw)
    return 1, str(value.get("StringValue", "")).encode("utf-8")


def md5_attributes(attributes: Mapping[str, Mapping[str, Any]]) -> str:
    """MD5OfMessageAttributes as SQS computes it: for each attribute in name order, the name,
    the data type and the value, each as a 4-byte big-endian length and its UTF-8 bytes, with a
    transport byte (1 string, 2 binary) before the value."""
    h = hashlib.md5()
    for name in sorted(attributes):
        value = attributes[name]
        for part in (name.encode("utf-8"), str(value["DataType"]).encode("utf-8")):
            h.update(struct.pack(">I", len(part)) + part)
        kind, raw = _attribute_value(value)
        h.update(bytes((kind,)) + struct.pack(">I", len(raw)) + raw)
    return h.hexdigest()


# -- queue URLs, ARNs and receipt handles -----------------------------------------------------------


def queue_url(base: str, account: str, name: str) -> str:
    """``http://HOST:PORT/<account>/<name>`` (the name percent-encoded: LMQ names may hold a slash)."""
    return f"{base}/{account}/{quote(name, safe='')}"


def queue_arn(region: str, account: str, name: str) -> str:
    return f"arn:aws:sqs:{region}:{account}:{name}"


def queue_name_of(url: str) -> str:
    """The queue a QueueUrl names: a full URL, a path ``/<account>/<name>``, or a bare name."""
    if "://" in url:
        try:
            path = urlsplit(url).path
        except ValueError:
            raise invalid_parameter(
                f"Value {url[:200]} for parameter QueueUrl is invalid. Reason: not a URL."
            ) from None
    elif url.startswith("/"):
        path = url
    else:
        return url
    parts = [p for p in path.split("/") if p]
    if len(parts) != 2:
        raise invalid_parameter(f"Value {url[:200]} for parameter QueueUrl is invalid. Reason: not a queue URL.")
    return unquote(parts[1])


_RECEIPT_VERSION: Final = b"\x01"


def encode_receipt(queue: str, uuid: bytes) -> str:
    """A receipt handle: one delivery (its uuid) of one queue, opaque to the client."""
    return base64.urlsafe_b64encode(_RECEIPT_VERSION + uuid + queue.encode("utf-8")).decode("ascii")


def decode_receipt(handle: Any) -> tuple[str, bytes]:
    """The queue and delivery uuid of a receipt handle, or ReceiptHandleIsInvalid."""
    bad = modeled(
        "ReceiptHandleIsInvalid", f'The input receipt handle "{str(handle)[:200]}" is not a valid receipt handle.'
    )
    if not isinstance(handle, str) or not 24 <= len(handle) <= 2048:
        raise bad
    try:
        raw = base64.b64decode(handle.encode("ascii"), altchars=b"-_", validate=True)
        queue = raw[17:].decode("utf-8")
    except (ValueError, binascii.Error, UnicodeError):
        raise bad from None
    if raw[:1] != _RECEIPT_VERSION or len(raw) < 18:
        raise bad
    return queue, raw[1:17]


# -- SigV4 ----------------------------------------------------------------------------------------

_CREDENTIAL: Final = re.compile(
    r"AWS4-HMAC-SHA256\s+Credential=([^/,\s]+)/(\d{8})/([^/,\s]+)/([^/,\s]+)/aws4_request,\s*"
    r"SignedHeaders=([a-z0-9;\-]+),\s*Signature=([0-9a-f]{64})\s*"
)


@dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    date: str
    region: str
    service: str
    signed_headers: tuple[str, ...]
    signature: str


def parse_authorization(value: str) -> Authorization | None:
    """The parts of a SigV4 ``Authorization`` header; None when it is not one."""
    m = _CREDENTIAL.fullmatch(value)
    if m is None:
        return None
    key, date, region, service, signed, sig = m.groups()
    return Authorization(key, date, region, service, tuple(signed.split(";")), sig)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode("utf-8"), hashlib.sha256).digest()


def _canonical_query(query: str) -> str:
    pairs = parse_qsl(query, keep_blank_values=True, max_num_fields=MAX_PARAMS)
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(pairs))


def check_signature(
    auth: Authorization, secret: str, method: str, path: str, query: str, headers: Mapping[bytes, bytes], body: bytes
) -> bool:
    """Whether ``auth.signature`` is the SigV4 signature of this request with ``secret``."""
    canonical_headers = []
    for name in auth.signed_headers:
        value = headers.get(name.encode("latin-1"))
        if value is None:
            return False
        canonical_headers.append(f"{name}:{' '.join(value.decode('latin-1').split())}\n")
    payload = hashlib.sha256(body).hexdigest()
    claimed = _header(headers, b"x-amz-content-sha256")
    if claimed and claimed != payload:
        # The signature covers the hash, so the hash must be of the body actually sent: else a
        # captured signature would carry any body.
        return False
    canonical = "\n".join(
        (
            method,
            quote(unquote(path) or "/", safe="/~"),
            _canonical_query(query),
            "".join(canonical_headers),
            ";".join(auth.signed_headers),
            payload,
        )
    )
    amz_date = _header(headers, b"x-amz-date")
    scope = f"{auth.date}/{auth.region}/{auth.service}/aws4_request"
    to_sign = "\n".join(("AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode("utf-8")).hexdigest()))
    key = _hmac(("AWS4" + secret).encode("utf-8"), auth.date)
    for part in (auth.region, auth.service, "aws4_request"):
        key = _hmac(key, part)
    expected = hmac.new(key, to_sign.encode("utf-8"), hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, auth.signature)


MAX_SKEW: Final = 900.0
"""Seconds a SigV4 signature's time may be from the server's (AWS's 15 minutes): a captured
request cannot be replayed later than that."""


def signature_time(auth: Authorization, headers: Mapping[bytes, bytes]) -> float | None:
    """The Unix time a SigV4 request was signed at (its ``X-Amz-Date``, which must fall on the
    credential scope's day), or None when it has none."""
    amz_date = _header(headers, b"x-amz-date")
    try:
        signed = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return None
    if amz_date[:8] != auth.date:
        return None
    return signed.timestamp()


def batch_ids(entries: Sequence[Any]) -> None:
    """The checks every batch action makes of its entries before doing any: 1 to 10, each with
    a valid Id, the Ids distinct."""
    if not entries:
        raise modeled("EmptyBatchRequest", "There should be at least one entry in the request.")
    if len(entries) > MAX_BATCH_ENTRIES:
        raise modeled(
            "TooManyEntriesInBatchRequest",
            f"Maximum number of entries per request are {MAX_BATCH_ENTRIES}. You have sent {len(entries)}.",
        )
    seen: set[str] = set()
    for e in entries:
        eid = e.get("Id") if isinstance(e, dict) else None
        if not isinstance(eid, str) or not _ENTRY_ID.fullmatch(eid):
            raise modeled(
                "InvalidBatchEntryId",
                "A batch entry id can only contain alphanumeric characters, hyphens and underscores. "
                "It can be at most 80 letters long.",
            )
        if eid in seen:
            raise modeled("BatchEntryIdsNotDistinct", f"Id {eid} repeated.")
        seen.add(eid)


_ENTRY_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,80}")
