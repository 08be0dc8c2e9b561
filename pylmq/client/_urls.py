"""Node addresses: one or several, tried in turn when a connection cannot be made."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from pylmq.errors import BadRequest
from pylmq.wire.ports import DEFAULT_HTTP_PORT, DEFAULT_RPC_PORT

__all__ = ["DEFAULT_HTTP_URL", "DEFAULT_RPC_PORT", "HttpBase", "parse_http_urls", "parse_rpc_addresses"]

DEFAULT_HTTP_URL = f"http://127.0.0.1:{DEFAULT_HTTP_PORT}"


@dataclass(frozen=True, slots=True)
class HttpBase:
    scheme: str
    host: str
    port: int
    prefix: str
    """Path before ``/messages`` etc., without a trailing slash (``""`` at the root)."""

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}{self.prefix}"


def _split(urls: str | Sequence[str]) -> list[str]:
    # A single string may list several nodes, comma separated (the Spark option `url` does).
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = [u.strip() for u in items if u.strip()]
    if not out:
        raise BadRequest("at least one node address is required")
    return out


def parse_http_urls(urls: str | Sequence[str]) -> list[HttpBase]:
    """``http://host:port[/prefix]``; a bare ``host:port`` means http."""
    bases: list[HttpBase] = []
    for i, text in enumerate(_split(urls), 1):
        parts = urlsplit(text if "://" in text else f"http://{text}")
        if "@" in parts.netloc:
            # curl's http://:TOKEN@host form: a client would drop it silently (and every error
            # below would quote it). The URL is not quoted: its user info may be the secret.
            raise BadRequest(
                f"node URL {i}: user info (user:password@) is neither sent nor kept; pass the credential as token="
            )
        if parts.scheme not in ("http", "https"):
            raise BadRequest(f"{text!r}: only http and https URLs are supported")
        if parts.query or parts.fragment:
            raise BadRequest(f"{text!r}: a node URL has no query or fragment")
        try:
            port = parts.port
        except ValueError as e:
            raise BadRequest(f"{text!r}: {e}") from None
        if not parts.hostname:
            raise BadRequest(f"{text!r}: no host")
        default_port = 443 if parts.scheme == "https" else 80
        bases.append(HttpBase(parts.scheme, parts.hostname, port or default_port, parts.path.rstrip("/")))
    return bases


def parse_rpc_addresses(addresses: str | Sequence[str | tuple[str, int]]) -> list[tuple[str, int]]:
    """``host:port`` strings (comma separated, or a list) or ``(host, port)`` pairs."""
    items: list[str | tuple[str, int]] = list(_split(addresses)) if isinstance(addresses, str) else list(addresses)
    if not items:
        raise BadRequest("at least one node address is required")
    out: list[tuple[str, int]] = []
    for item in items:
        if isinstance(item, tuple):
            host, port = item
        else:
            text = item.strip()
            if "://" in text:
                text = text.split("://", 1)[1]
            host, sep, port_text = text.rpartition(":")
            if not sep:
                host, port_text = text, str(DEFAULT_RPC_PORT)
            try:
                port = int(port_text)
            except ValueError:
                raise BadRequest(f"{item!r}: port must be a number") from None
            host = host.strip("[]")
        if not host or not 0 < port < 65536:
            raise BadRequest(f"bad node address {item!r}")
        out.append((host, port))
    return out
