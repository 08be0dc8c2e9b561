"""The console's HTTP side: static assets with their security headers, and the JSON routes.

Assets are read once, at construction, from the package (``importlib.resources``): a request
never touches the file system, and only the names found there are served, so no path can reach
anything else. Every answer carries a strict Content-Security-Policy: the page runs only its own
scripts and styles and talks only to its own origin.

Routes (GET only; anything else is 405)::

    /console                      301 to /console/
    /console/                     index.html
    /console/{asset}              one of the files of assets/ (ETag, 304 on If-None-Match)
    /console/api/session          what the page needs to start (open even with a credential)
    /console/api/overview         a page of queues, totals, node rates, the cluster
    /console/api/queue/{name}     one queue; 404 for an unknown one (reading never creates it)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Any
from urllib.parse import unquote, unquote_to_bytes

from pylmq.api.http import CONSOLE_PREFIX, Authenticator, Request, Response, StatsSource, error_response
from pylmq.api.web import views
from pylmq.core.manager import QueueManager
from pylmq.errors import InvalidQueueName, LMQError, Unauthorized
from pylmq.metrics import RateHistory

__all__ = ["SECURITY_HEAD", "Asset", "ClusterView", "WebConsole", "load_assets"]

ClusterView = Callable[[], dict[str, Any]]
"""What the node says of its cluster (views.cluster_doc's shape); set by the node when it has
one (a Python node joined to Erlang LMQ nodes), else the console describes a standalone node."""

SECURITY_HEAD = (
    b"Content-Security-Policy: default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    b"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'\r\n"
    b"X-Content-Type-Options: nosniff\r\n"
    b"Referrer-Policy: no-referrer\r\n"
    b"Cross-Origin-Opener-Policy: same-origin\r\n"
    b"Cross-Origin-Resource-Policy: same-origin\r\n"
)
"""Headers of every ``/console*`` answer (LMQ's routes never get them)."""

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
}
_CHALLENGE = b'WWW-Authenticate: Bearer realm="pylmq"\r\n'
_JSON_HEAD = b"Content-Type: application/json\r\nCache-Control: no-store\r\n" + SECURITY_HEAD
_dumps = json.JSONEncoder(separators=(",", ":")).encode


@dataclass(frozen=True, slots=True)
class Asset:
    body: bytes
    content_type: str
    etag: str  # quoted, as the header carries it


def load_assets(package: str = "pylmq.api.web") -> dict[str, Asset]:
    """The files of the package's ``assets`` folder whose type is known, by file name."""
    out: dict[str, Asset] = {}
    for entry in files(package).joinpath("assets").iterdir():
        ctype = _TYPES.get(entry.name[entry.name.rfind(".") :]) if "." in entry.name else None
        if ctype is None or not entry.is_file():
            continue
        body = entry.read_bytes()
        out[entry.name] = Asset(body, ctype, '"' + hashlib.sha256(body).hexdigest()[:20] + '"')
    return out


def _etag_matches(header: bytes | None, etag: str) -> bool:
    if header is None:
        return False
    tags = {t.strip().removeprefix("W/") for t in header.decode("latin-1").split(",")}
    return "*" in tags or etag in tags


def _json(doc: Any, status: int = 200) -> Response:
    return Response(status, _JSON_HEAD, _dumps(doc).encode())


def _queue_name(segment: str) -> str:
    try:
        return unquote_to_bytes(segment).decode("utf-8") if "%" in segment else segment
    except UnicodeDecodeError:
        raise InvalidQueueName(f"queue name {segment!r} is not percent-encoded UTF-8") from None


class WebConsole:
    """The console of one node. ``auth`` (None: off) guards the JSON routes but ``session``;
    the static files are always public (they hold no data)."""

    def __init__(
        self,
        manager: QueueManager,
        *,
        metrics: StatsSource | None = None,
        node_name: str = "nonode@nohost",
        auth: Authenticator | None = None,
        protect: str = "mutating",
        history: RateHistory | None = None,
    ) -> None:
        self.manager = manager
        self.metrics = metrics
        self.node_name = node_name
        self.auth = auth
        self.protect = protect
        self.cluster_view: ClusterView | None = None
        self.history = history  # rates of the last minutes (None: the meters' one-minute rates)
        self.index = views.NameIndex()  # the names as pages show them, kept between requests
        self.assets = load_assets()

    async def respond(self, request: Request) -> Response:
        """The answer to a request under ``/console``; LMQError propagates to HttpApi's mapping."""
        path = request.path
        rest = path[len(CONSOLE_PREFIX) :]
        if request.method != "GET":
            detail = f"{request.method} not allowed here; allowed: GET"
            return error_response(405, "method_not_allowed", detail, b"Allow: GET\r\n" + SECURITY_HEAD)
        if rest == "":
            return Response(301, b"Location: " + CONSOLE_PREFIX.encode() + b"/\r\n" + SECURITY_HEAD)
        if rest.startswith("/api/"):
            try:
                return await self._api(request, rest[len("/api/") :])
            except LMQError as e:  # answered here so that errors carry the console's headers too
                extra = _CHALLENGE if isinstance(e, Unauthorized) else b""
                return error_response(
                    e.http_status, e.reason, e.detail, extra + b"Cache-Control: no-store\r\n" + SECURITY_HEAD
                )
        name = "index.html" if rest == "/" else rest[1:]
        asset = self.assets.get(name)
        if asset is None:
            return error_response(404, "not_found", f"no such resource: {unquote(path)}", SECURITY_HEAD)
        head = b"ETag: " + asset.etag.encode() + b"\r\nCache-Control: no-cache\r\n" + SECURITY_HEAD
        if _etag_matches(request.headers.get(b"if-none-match"), asset.etag):
            return Response(304, head)
        return Response(200, b"Content-Type: " + asset.content_type.encode() + b"\r\n" + head, asset.body)

    async def _api(self, request: Request, route: str) -> Response:
        query: Mapping[str, str] = request.query
        if route == "session":
            return _json(views.session_doc(self, request.headers))
        if self.auth is not None:
            self.auth.check(request.headers)
        if route == "overview":
            return _json(await views.overview_doc(self, views.overview_params(query)))
        if route.startswith("queue/") and len(route) > len("queue/") and "/" not in route[len("queue/") :]:
            name = _queue_name(route[len("queue/") :])
            return _json(views.queue_doc(self, name, views.since_param(query)))
        return error_response(404, "not_found", f"no such resource: {unquote(request.path)}", SECURITY_HEAD)
