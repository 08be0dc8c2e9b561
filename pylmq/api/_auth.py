"""The optional credential of the HTTP API and the console (``http_auth`` in app.config).

A request proves it holds one of the configured tokens with ``Authorization: Bearer TOKEN``
(or ``Basic``, any user name and the token as password, for ``curl -u :TOKEN``). Tokens are
compared as SHA-256 digests with :func:`hmac.compare_digest`, every configured one each time,
so that neither the answer's timing nor an early exit tells how much of a guess was right.

``protect``: ``mutating`` (the default) leaves open only the read-only metadata monitoring
reads (``GET /stats``, ``GET /properties[/name]``, ``GET /virtual[/name]``); ``all`` protects
every route. The console's JSON routes but ``session`` are always protected.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Iterable, Mapping

from pylmq.api.http import Handler, HttpApi
from pylmq.errors import ConfigError, Unauthorized

__all__ = ["PROTECT_MODES", "TokenAuth"]

PROTECT_MODES = ("mutating", "all")

# Routes that read only what monitoring reads, left open under protect = mutating. Pulls, peeks
# and batch pulls deliver or show bodies: those are protected like writes.
_OPEN_WHEN_MUTATING: frozenset[Handler] = frozenset(
    {HttpApi.stats, HttpApi.get_default_props, HttpApi.get_props, HttpApi.virtual_queues, HttpApi.get_virtual}
)


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


class TokenAuth:
    """:class:`pylmq.api.http.Authenticator` over a set of tokens."""

    def __init__(self, tokens: Iterable[str], protect: str = "mutating") -> None:
        self._digests = tuple(_digest(t.encode()) for t in tokens)
        if not self._digests:
            raise ConfigError("TokenAuth needs at least one token")
        if protect not in PROTECT_MODES:
            raise ConfigError(f"protect must be one of {', '.join(PROTECT_MODES)}")
        self.protect = protect
        self._open = _OPEN_WHEN_MUTATING if protect == "mutating" else frozenset()

    def protects(self, handler: Handler) -> bool:
        return handler not in self._open

    def check(self, headers: Mapping[bytes, bytes]) -> None:
        given = _presented(headers.get(b"authorization"))
        if given is None:
            raise Unauthorized("this node needs a credential: Authorization: Bearer <token>")
        digest = _digest(given)
        ok = False
        for known in self._digests:  # all of them, always
            ok |= hmac.compare_digest(digest, known)
        if not ok:
            raise Unauthorized("the credential was refused")


def _presented(value: bytes | None) -> bytes | None:
    """The token an Authorization header carries, or None without a usable one."""
    if value is None:
        return None
    scheme, _, rest = value.strip().partition(b" ")
    scheme, rest = scheme.lower(), rest.strip()
    if scheme == b"bearer" and rest:
        return rest
    if scheme == b"basic" and rest:
        try:
            decoded = base64.b64decode(rest, validate=True)
        except (binascii.Error, ValueError):
            return None
        _, sep, password = decoded.partition(b":")
        return password if sep and password else None
    return None
