"""Observable facts of LMQ's HTTP API (read from LMQ's handlers and its test suite
lmq_api_http_SUITE; docs/lmq-contract.md), each checked through a real socket."""

from __future__ import annotations

from tests.api.api_helpers import Api

JSON_CT = {"Content-Type": "application/json"}


async def test_reading_a_queues_properties_does_not_create_the_queue(api: Api) -> None:
    # LMQ's GET /properties/:name only computes the effective properties: no queue appears,
    # so a later fan-out push does not reach it and /stats does not list it.
    r = await api.props("ghost")
    assert (r.status, r.body) == (200, b'{"accum":0,"retry":2,"timeout":30}'), r
    fan = await api.push_all("^ghost$", b"x")
    assert (fan.status, fan.json()) == (200, {}), f"expected no queue to reach, got {fan!r}"
    queues = (await api.request("GET", "/stats")).json()["queues"]
    assert "ghost" not in queues, f"expected no queue 'ghost' after a GET of its properties, got {sorted(queues)}"


async def test_reading_properties_of_an_unknown_queue_applies_the_default_list(api: Api) -> None:
    body = b'[["^dflt/",{"retry":0}]]'
    assert (await api.request("PUT", "/properties", data=body, headers=JSON_CT)).status == 204
    assert (await api.props("dflt/a")).json() == {"accum": 0, "retry": 0, "timeout": 30}


async def test_percent_encoded_bytes_that_are_not_utf8_are_refused_not_taken_literally(api: Api) -> None:
    # "%E9" alone is no UTF-8 text; taking it as the three characters "%E9" would make it the
    # same queue as "%25E9" (a name that really is "%E9").
    r = await api.request("POST", "/messages/%E9", data=b"x")
    assert (r.status, r.json()["error"]) == (400, "invalid_queue_name"), r
    assert (await api.request("POST", "/messages/%25E9", data=b"y")).status == 200
    got = await api.request("GET", "/messages/%25E9", {"t": 0})
    assert (got.status, got.headers["x-lmq-queue-name"], got.body) == (200, "%E9", b"y"), got
    assert (await api.request("GET", "/properties/%E9")).status == 400


async def test_queue_with_a_control_character_in_its_name_can_be_pulled(api: Api) -> None:
    # The name goes back in x-lmq-queue-name, where a raw newline is not allowed: it is sent
    # percent-escaped instead of failing every pull of that queue with a 500.
    assert (await api.request("POST", "/messages/a%0Ab", data=b"x")).status == 200
    r = await api.request("GET", "/messages/a%0Ab", {"t": 0})
    assert (r.status, r.body, r.headers.get("x-lmq-queue-name")) == (200, b"x", "a%0Ab"), r
    assert (await api.ack("a\nb", r.id)).status == 204


async def test_stats_show_a_queues_accum_in_milliseconds_as_lmq_keeps_it(api: Api) -> None:
    # LMQ's /stats prints the queue's property list as stored: accum in whole milliseconds
    # (GET /properties converts to seconds, /stats does not).
    await api.set_props("acc", accum=0.2, timeout=1.5)
    props = (await api.request("GET", "/stats")).json()["queues"]["acc"]["props"]
    assert props == {"accum": 200, "retry": 2, "timeout": 1.5}, f"expected accum in ms, got {props}"
    assert (await api.props("acc")).json()["accum"] == 0.2


async def test_default_list_keeps_the_key_order_it_was_given(api: Api) -> None:
    # LMQ stores each entry's properties as given and prints them back in that order.
    body = b'[["a/.*",{"timeout":5,"retry":1}],["b/.*",{"retry":0,"accum":1.5}]]'
    assert (await api.request("PUT", "/properties", data=body, headers=JSON_CT)).status == 204
    got = (await api.request("GET", "/properties")).body
    assert got == body, f"expected {body!r}, got {got!r}"
