"""The HTTP API tests' client: ``Api`` (a thin aiohttp client of one node), its ``Reply``, and the
``StartNode`` factory type of the ``start`` fixture (tests/api/conftest.py)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from multidict import CIMultiDictProxy
from yarl import URL

from pylmq.node import LMQNode


@dataclass
class Reply:
    status: int
    headers: CIMultiDictProxy[str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"<Reply {self.status} {dict(self.headers)} {self.body[:200]!r}>"

    @property
    def id(self) -> str:
        return self.headers["x-lmq-message-id"]

    @property
    def retry(self) -> str:
        return self.headers["x-lmq-retry-remaining"]


def q(name: str) -> str:
    """A queue name as one path segment ("a/b" -> "a%2Fb")."""
    return quote(name, safe="")


class Api:
    q = staticmethod(q)

    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    def url(self, path: str, query: Mapping[str, Any] | None = None) -> URL:
        qs = "?" + urlencode({k: str(v) for k, v in query.items()}) if query else ""
        return URL(self.base + path + qs, encoded=True)

    async def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        data: bytes | str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        async with self.session.request(method, self.url(path, query), data=data, headers=headers) as r:
            return Reply(r.status, r.headers, await r.read())

    async def push(
        self, name: str, body: bytes | str = b"hello", content_type: str | None = None, prefix: str = "/messages"
    ) -> Reply:
        headers = {"Content-Type": content_type} if content_type is not None else None
        if isinstance(body, str):
            body = body.encode()
        return await self.request("POST", f"{prefix}/{q(name)}", data=body, headers=headers)

    async def pull(self, name: str, t: Any = 0, prefix: str = "/messages", **query: Any) -> Reply:
        if t is not None:
            query["t"] = t
        return await self.request("GET", f"{prefix}/{q(name)}", query)

    async def pull_any(self, qre: str, t: Any = 0, prefix: str = "/messages", **query: Any) -> Reply:
        query["qre"] = qre
        if t is not None:
            query["t"] = t
        return await self.request("GET", prefix, query)

    async def push_all(self, qre: str | None, body: bytes = b"hello", prefix: str = "/messages") -> Reply:
        return await self.request("POST", prefix, {"qre": qre} if qre is not None else None, data=body)

    async def reply(self, name: str, id_: str, reply: str | None, prefix: str = "/messages") -> Reply:
        query = {"reply": reply} if reply is not None else None
        return await self.request("POST", f"{prefix}/{q(name)}/{id_}", query)

    async def ack(self, name: str, id_: str) -> Reply:
        return await self.reply(name, id_, "ack")

    async def props(self, name: str, prefix: str = "/properties") -> Reply:
        return await self.request("GET", f"{prefix}/{q(name)}")

    async def patch_props(self, name: str, props: Any, prefix: str = "/properties") -> Reply:
        data = props if isinstance(props, str | bytes) else json.dumps(props)
        r = await self.request("PATCH", f"{prefix}/{q(name)}", data=data, headers={"Content-Type": "application/json"})
        return r

    async def set_props(self, name: str, **props: Any) -> None:
        """Set a queue's properties; fails the test unless the server says 204."""
        r = await self.patch_props(name, props)
        assert r.status == 204, f"expected 204 from PATCH properties, got {r!r}"


def base_url(node: LMQNode) -> str:
    assert node.http_address is not None
    host, port = node.http_address
    return f"http://{host}:{port}"


StartNode = Callable[[], Awaitable[tuple[LMQNode, Api]]]
