"""The credential hook of HttpApi and the console with ``http_tokens`` set (TokenAuth).

Off (no tokens) everything is open: test_http_console_bytes shows it adds nothing. On, a route
the protect mode guards answers 401 ``unauthorized`` with ``WWW-Authenticate: Bearer`` unless
the request carries a configured token, as Bearer or as Basic's password.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator

import aiohttp
import pytest

from pylmq.node import LMQNode, NodeOptions
from tests.api.api_helpers import Api, base_url

TOKEN = "s3cret-token-0123456789"
OTHER = "another-token-abcdefghij"


@pytest.fixture(params=["mutating", "all"])
async def guarded(request: pytest.FixtureRequest, session: aiohttp.ClientSession) -> AsyncIterator[tuple[Api, str]]:
    protect: str = request.param
    opts = NodeOptions(
        http=("127.0.0.1", 0), rpc=None, store="memory", http_tokens=(OTHER, TOKEN), http_protect=protect
    )
    n = LMQNode(opts)
    await n.start()
    try:
        yield Api(session, base_url(n)), protect
    finally:
        await n.stop()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_writes_need_the_token(guarded: tuple[Api, str]) -> None:
    api, _ = guarded
    r = await api.request("POST", "/messages/q", data=b"x")
    assert (r.status, r.json()["error"]) == (401, "unauthorized")
    assert r.headers["WWW-Authenticate"] == 'Bearer realm="pylmq"'
    for headers in (bearer("wrong-token-0123456789"), {"Authorization": "Bearer"}, {"Authorization": "Token " + TOKEN}):
        r = await api.request("POST", "/messages/q", data=b"x", headers=headers)
        assert r.status == 401, headers
        assert TOKEN.encode() not in r.body
    assert (await api.request("POST", "/messages/q", data=b"x", headers=bearer(TOKEN))).status == 200
    assert (await api.request("GET", "/messages/q", {"t": 0})).status == 401  # a pull delivers
    basic = base64.b64encode(f":{TOKEN}".encode()).decode()
    r = await api.request("GET", "/messages/q", {"t": 0}, headers={"Authorization": f"Basic {basic}"})
    assert r.status == 200


async def test_monitoring_reads_stay_open_only_under_mutating(guarded: tuple[Api, str]) -> None:
    api, protect = guarded
    for path in ("/stats", "/properties", "/properties/q", "/virtual"):
        r = await api.request("GET", path)
        assert r.status == (200 if protect == "mutating" else 401), (path, r)
    assert (await api.request("GET", "/peek/q")).status == 401


async def test_console_json_needs_the_token_but_session_and_assets_do_not(guarded: tuple[Api, str]) -> None:
    api, protect = guarded
    r = await api.request("GET", "/console/api/session")
    assert r.status == 200
    assert r.json() | {"features": None} == {
        "auth": "on", "authorized": False, "protect": protect, "node": "nonode@nohost", "features": None,
    }  # fmt: skip
    assert (await api.request("GET", "/console/api/session", headers=bearer(TOKEN))).json()["authorized"] is True
    assert (await api.request("GET", "/console/app.js")).status == 200
    r = await api.request("GET", "/console/api/overview")
    assert (r.status, r.json()["error"], r.headers["WWW-Authenticate"]) == (401, "unauthorized", 'Bearer realm="pylmq"')
    assert "Content-Security-Policy" in r.headers
    assert (await api.request("GET", "/console/api/overview", headers=bearer(OTHER))).status == 200
    assert (await api.request("GET", "/console/api/queue/q", headers=bearer(TOKEN))).status == 404
