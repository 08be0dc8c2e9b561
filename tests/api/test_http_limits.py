"""Request size limit and access log of the HTTP API."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest

from pylmq.api.http import DEFAULT_MAX_BODY
from tests.api.api_helpers import Api


@pytest.mark.slow  # moves 64 MiB through the loopback and back into memory
async def test_body_over_the_default_64_mib_limit_is_413_and_not_queued(api: Api) -> None:
    r = await api.push("huge", b"\0" * (DEFAULT_MAX_BODY + 1))
    assert r.status == 413, r
    assert r.json()["error"] == "too_large"
    assert (await api.pull("huge")).status == 204
    assert (await api.push("huge", b"small")).status == 200, "the server must keep serving"


async def test_each_request_writes_one_access_log_line(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pylmq.access")
    await api.push("logged", b"x")
    await api.pull("logged", t=0)
    await api.request("GET", "/messages/logged", {"t": "-1"})
    lines = [r.getMessage() for r in caplog.records if r.name == "pylmq.access"]
    assert len(lines) == 3, lines
    assert lines[0].startswith("POST /messages/logged 200 "), lines
    assert lines[1].startswith("GET /messages/logged?t=0 200 "), lines
    assert lines[2].startswith("GET /messages/logged?t=-1 400 "), lines
    assert all(line.endswith("ms") for line in lines), lines


async def test_a_client_gone_from_a_long_poll_is_logged_as_499(api: Api, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="pylmq.access")
    with pytest.raises(asyncio.TimeoutError):
        await api.session.get(api.url("/messages/left"), timeout=aiohttp.ClientTimeout(total=0.1))
    for _ in range(100):
        if any(r.name == "pylmq.access" for r in caplog.records):
            break
        await asyncio.sleep(0.01)
    lines = [r.getMessage() for r in caplog.records if r.name == "pylmq.access"]
    assert len(lines) == 1 and lines[0].startswith("GET /messages/left 499 "), lines
