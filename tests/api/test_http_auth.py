"""The credential of the HTTP API (``http_auth``, pylmq.api._auth) over real HTTP: which routes
it guards in each protect mode, the forms a token is accepted in, and that no token ever
reaches a log, an answer or a challenge that would make a browser keep it."""

from __future__ import annotations

import base64
import hmac
import logging
from collections.abc import AsyncIterator, Callable

import aiohttp
import pytest

from pylmq.api.http import _route_table
from pylmq.node import LMQNode, NodeOptions
from tests.api.api_helpers import Api, base_url

TOKEN = "s3cret-token-0123456789"
OTHERS = ("another-token-abcdefghij", "third.token~ABCDEFGHIJ")
OPEN_UNDER_MUTATING = {("GET", "/stats"), ("GET", "/properties"), ("GET", "/properties/"), ("GET", "/props"),
                       ("GET", "/props/"), ("GET", "/properties/{name}"), ("GET", "/props/{name}"),
                       ("GET", "/virtual"), ("GET", "/virtual/{name}")}  # fmt: skip


async def guarded_api(session: aiohttp.ClientSession, protect: str) -> AsyncIterator[Api]:
    opts = NodeOptions(
        http=("127.0.0.1", 0), rpc=None, store="memory", http_tokens=(*OTHERS, TOKEN), http_protect=protect
    )
    n = LMQNode(opts)
    await n.start()
    try:
        yield Api(session, base_url(n))
    finally:
        await n.stop()


@pytest.fixture
async def mutating(session: aiohttp.ClientSession) -> AsyncIterator[Api]:
    async for api in guarded_api(session, "mutating"):
        yield api


@pytest.fixture
async def everything(session: aiohttp.ClientSession) -> AsyncIterator[Api]:
    async for api in guarded_api(session, "all"):
        yield api


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def basic(user_password: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(user_password.encode()).decode()}


def concrete(path: str) -> str:
    return path.replace("{name}", "q").replace("{id}", "00000000-0000-0000-0000-000000000000")


async def test_under_mutating_every_route_but_monitoring_reads_needs_the_token(mutating: Api) -> None:
    routes = _route_table()
    assert ("POST", "/purge/{name}") in {(m, p) for m, p, _ in routes}
    for method, path, _ in routes:
        # No body on reads: a request announcing one needs the token whatever its route.
        r = await mutating.request(method, concrete(path), {"t": 0}, data=None if method == "GET" else b"[]")
        if (method, path) in OPEN_UNDER_MUTATING:
            assert r.status != 401, (method, path, r)
        else:
            assert (r.status, r.json()["error"]) == (401, "unauthorized"), (method, path, r)


async def test_under_all_every_route_needs_the_token(everything: Api) -> None:
    for method, path, _ in _route_table():
        r = await everything.request(method, concrete(path), {"t": 0}, data=b"[]")
        assert r.status == 401, (method, path, r)
    assert (await everything.request("GET", "/stats", headers=bearer(OTHERS[1]))).status == 200


async def test_purge_needs_the_token_and_works_with_it(mutating: Api) -> None:
    assert (await mutating.request("POST", "/messages/p", data=b"x", headers=bearer(TOKEN))).status == 200
    assert (await mutating.request("POST", "/purge/p")).status == 401
    r = await mutating.request("POST", "/purge/p", headers=bearer(TOKEN))
    assert (r.status, r.json()) == (200, {"purged": 1})


@pytest.mark.parametrize(
    "headers",
    [bearer(TOKEN), bearer(OTHERS[0]), {"Authorization": f"bearer   {TOKEN}  "}, {"Authorization": f"BEARER {TOKEN}"},
     basic(f":{TOKEN}"), basic(f"anyone:{TOKEN}"), basic(f"user:{OTHERS[1]}")],
)  # fmt: skip
async def test_accepted_forms(mutating: Api, headers: dict[str, str]) -> None:
    assert (await mutating.request("POST", "/messages/f", data=b"x", headers=headers)).status == 200


@pytest.mark.parametrize(
    "headers",
    [{}, bearer(TOKEN[:-1]), bearer(TOKEN + "x"), bearer(TOKEN.upper()), bearer("A" * 6000),
     {"Authorization": TOKEN}, {"Authorization": f"Token {TOKEN}"}, {"Authorization": "Bearer"},
     basic(TOKEN), basic(f"{TOKEN}:"), basic(f"{TOKEN}:wrong-password-0123"),
     {"Authorization": "Basic %%%not-base64"}, {"Authorization": "Basic " + "QQ" * 3000},
     {"X-Auth-Token": TOKEN}],
)  # fmt: skip
async def test_refused_forms_get_401_with_a_bearer_challenge_only(mutating: Api, headers: dict[str, str]) -> None:
    r = await mutating.request("POST", "/messages/f", data=b"x", headers=headers)
    assert (r.status, r.json()["error"]) == (401, "unauthorized"), r
    # Basic is accepted, never offered: a browser that saw a Basic challenge would prompt and
    # then send the credential by itself with every request (a CSRF hole).
    assert r.headers.getall("WWW-Authenticate") == ['Bearer realm="pylmq"']
    assert "basic" not in str(dict(r.headers)).lower()
    assert TOKEN.encode() not in r.body


async def test_a_token_in_the_query_string_is_not_a_credential(mutating: Api) -> None:
    r = await mutating.request("POST", "/messages/f", {"token": TOKEN, "access_token": TOKEN}, data=b"x")
    assert r.status == 401


async def test_no_token_reaches_any_log_or_answer(mutating: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, the access log included
    sent = [bearer(TOKEN), basic(f"me:{TOKEN}"), bearer(TOKEN + "-wrong"), basic(f":{TOKEN}x")]
    answers = []
    for headers in sent:
        for method, path in (("POST", "/messages/l"), ("GET", "/messages/l"), ("GET", "/console/api/overview")):
            answers.append(await mutating.request(method, path, {"t": 0}, data=b"x", headers=headers))
    assert {r.status for r in answers} == {200, 401}
    assert "/messages/l" in caplog.text, "the access log was captured"
    secrets = [TOKEN, base64.b64encode(f"me:{TOKEN}".encode()).decode(), base64.b64encode(TOKEN.encode()).decode()]
    for secret in secrets:
        assert secret not in caplog.text
        for r in answers:
            assert secret.encode() not in r.body and secret not in str(dict(r.headers))


async def test_every_configured_token_is_compared_in_constant_time_each_time(
    mutating: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    compared: list[tuple[int, int]] = []
    real: Callable[[bytes, bytes], bool] = hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)  # _auth calls it as hmac.compare_digest
    for token in (OTHERS[0], TOKEN, "wrong-" + TOKEN, "x" * 300):
        compared.clear()
        await mutating.request("POST", "/messages/c", data=b"x", headers=bearer(token))
        # No early exit on a match, and digests of one length whatever was sent. A request with
        # a body is checked from its head (before the body is read), and again once routed if
        # it passed: every check compares all three tokens.
        refused = token.startswith(("wrong", "x"))
        assert compared == [(32, 32)] * (3 if refused else 6), token
