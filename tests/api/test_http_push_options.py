"""Push options, dead letters, peek and virtual queues over real HTTP (docs/http-api-extensions.md).

The node runs on a ManualClock: delays, expiries and intervals pass when the test advances it,
with no sleeping."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import aiohttp
import pytest

from pylmq.client import AsyncHttpClient, DeadLetterInfo, HttpClient, PushOptions
from pylmq.core.clock import ManualClock
from pylmq.errors import ConfigError, InvalidOptions, NotFound
from pylmq.node import LMQNode
from pylmq.wire.batch import encode_pushes
from tests.api.api_helpers import Api, Reply, base_url
from tests.suite_store import SuiteOptions

START = 1_800_000_000.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
async def node(suite_options: SuiteOptions, clock: ManualClock) -> AsyncIterator[LMQNode]:
    n = LMQNode(suite_options(http=("127.0.0.1", 0), rpc=None), clock=clock)
    await n.start()
    try:
        yield n
    finally:
        await n.stop()


@pytest.fixture
async def api(node: LMQNode, session: aiohttp.ClientSession) -> Api:
    return Api(session, base_url(node))


async def push(api: Api, name: str, body: bytes = b"m", **options: Any) -> Reply:
    return await api.request("POST", f"/messages/{api.q(name)}", options, data=body)


async def pushed_id(api: Api, name: str, body: bytes = b"m", **options: Any) -> str:
    r = await push(api, name, body, **options)
    assert r.status == 200, r
    doc = r.json()
    assert set(doc) == {"accum", "id"} and doc["accum"] == "no", doc
    return str(doc["id"])


async def peek(api: Api, name: str, **query: Any) -> list[dict[str, Any]]:
    r = await api.request("GET", f"/peek/{api.q(name)}", query)
    assert r.status == 200, r
    doc: list[dict[str, Any]] = r.json()
    return doc


# -- LMQ's answers stay LMQ's ---------------------------------------------------------------------


async def test_a_push_without_options_is_answered_as_lmq_and_delivered_without_new_headers(api: Api) -> None:
    r = await push(api, "plain", b"x", foo="1", t="3")  # parameters LMQ ignores stay ignored
    assert (r.status, r.body) == (200, b'{"accum":"no"}')
    got = await api.pull("plain")
    assert got.status == 200
    assert not [h for h in got.headers if h.lower().startswith(("x-lmq-attempts", "x-lmq-dead"))]


# -- each option end to end ------------------------------------------------------------------------


async def test_delay_holds_the_message_until_due(api: Api, clock: ManualClock) -> None:
    pid = await pushed_id(api, "d", b"later", delay="10")
    await push(api, "d", b"now")
    first = await api.pull("d")
    assert first.body == b"now"
    assert (await api.pull("d")).status == 204
    [entry] = [e for e in await peek(api, "d") if e["state"] == "available"]
    assert (entry["id"], entry["ts"]) == (pid, START + 10)
    clock.advance(9.9)
    assert (await api.pull("d")).status == 204
    clock.advance(0.2)
    got = await api.pull("d")
    assert (got.status, got.body) == (200, b"later")


async def test_ttl_an_expired_message_never_delivered_is_delivered_once(api: Api, clock: ManualClock) -> None:
    await api.set_props("t1", timeout=5)
    await pushed_id(api, "t1", b"late", ttl="2")
    clock.advance(3)  # expired before anyone pulled it
    got = await api.pull("t1")
    assert (got.status, got.body, got.retry) == (200, b"late", "0")
    assert got.headers["x-lmq-attempts"] == "1"
    clock.advance(6)  # past its deadline: not redelivered
    assert (await api.pull("t1")).status == 204
    assert await peek(api, "t1") == []


async def test_ttl_a_delivered_message_is_not_redelivered_after_expiry(api: Api, clock: ManualClock) -> None:
    await pushed_id(api, "t2", b"x", ttl="10", interval="3")
    assert (await api.pull("t2")).headers["x-lmq-attempts"] == "1"
    clock.advance(3.5)
    again = await api.pull("t2")  # redelivered within its ttl
    assert (again.status, again.headers["x-lmq-attempts"]) == (200, "2")
    clock.advance(10)  # now expired after a delivery: dropped, no dead_letter here
    assert (await api.pull("t2")).status == 204
    assert await peek(api, "t2") == []


async def test_interval_replaces_the_queue_timeout_and_redelivers_without_limit(api: Api, clock: ManualClock) -> None:
    await pushed_id(api, "iv", b"x", interval="2")
    first = await api.pull("iv")
    assert first.retry == "infinity"
    clock.advance(1.5)
    assert (await api.pull("iv")).status == 204  # the queue's 30 s would hold it; 2 s does
    clock.advance(1)
    second = await api.pull("iv")
    assert (second.status, second.headers["x-lmq-attempts"]) == (200, "2")
    ext = await api.reply("iv", second.id, "ext")  # ext extends by the interval too
    assert ext.status == 204
    [entry] = await peek(api, "iv")
    assert entry["state"] == "processing" and entry["ts"] == pytest.approx(clock.now() + 2)


async def test_once_is_delivered_once_and_its_ack_still_answers(api: Api, clock: ManualClock) -> None:
    await pushed_id(api, "o", b"x", once="1")
    got = await api.pull("o")
    assert (got.status, got.retry) == (200, "0")
    assert (await api.ack("o", got.id)).status == 204
    await pushed_id(api, "o", b"y", once="true")
    assert (await api.pull("o")).status == 200
    clock.advance(31)  # never acked: not redelivered
    assert (await api.pull("o")).status == 204


async def test_priority_higher_first_fifo_within_a_level(api: Api, clock: ManualClock) -> None:
    for body, p in ((b"p1", "1"), (b"p5a", "5"), (b"p0", None), (b"p5b", "5"), (b"p255", "255")):
        await (push(api, "pr", body, priority=p) if p is not None else api.push("pr", body))
        clock.advance(0.001)  # FIFO is by push time (one time each, as on a real clock)
    order = [(await api.pull("pr")).body for _ in range(5)]
    assert order == [b"p255", b"p5a", b"p5b", b"p1", b"p0"]


async def test_retry_per_message_overrides_the_queue(api: Api, clock: ManualClock) -> None:
    await pushed_id(api, "r", b"x", retry="0")
    got = await api.pull("r")
    assert got.retry == "0"
    clock.advance(31)
    assert (await api.pull("r")).status == 204


# -- dead letters ----------------------------------------------------------------------------------


async def test_dead_letter_prop_round_trips_and_lmq_props_keep_their_shape(api: Api) -> None:
    await api.set_props("src", dead_letter="src.dead")
    assert (await api.props("src")).json() == {"accum": 0, "retry": 2, "timeout": 30, "dead_letter": "src.dead"}
    assert (await api.props("other")).json() == {"accum": 0, "retry": 2, "timeout": 30}
    bad = await api.patch_props("src", {"dead_letter": 5})
    assert bad.status == 400 and "dead_letter" in bad.json()["detail"]


async def test_an_exhausted_message_moves_to_the_dead_letter_queue_with_its_history(
    api: Api, clock: ManualClock
) -> None:
    await api.set_props("jobs", dead_letter="jobs.dead", retry=1, timeout=5)
    await api.push("jobs", b"work")
    first = await api.pull("jobs")
    assert first.headers["x-lmq-attempts"] == "1"  # a queue with dead_letter gives every push its fields
    clock.advance(6)
    assert (await api.pull("jobs")).headers["x-lmq-attempts"] == "2"
    clock.advance(6)
    assert (await api.pull("jobs")).status == 204
    dead = await api.pull("jobs.dead")
    assert (dead.status, dead.body) == (200, b"work")
    h = dead.headers
    assert (h["x-lmq-dead-origin"], h["x-lmq-dead-failures"], h["x-lmq-dead-reason"]) == ("jobs", "2", "retries")
    assert float(h["x-lmq-dead-last-delivery"]) == START + 6
    assert h["x-lmq-attempts"] == "1"


async def test_requeue_moves_dead_letters_back_to_their_origin(api: Api, clock: ManualClock) -> None:
    await api.set_props("rq", dead_letter="rq.dead", retry=0, timeout=5)
    for body in (b"a", b"b", b"c"):
        await api.push("rq", body)
        assert (await api.pull("rq")).status == 200
    clock.advance(6)
    assert (await api.pull("rq")).status == 204  # the three die here
    entries = await peek(api, "rq.dead")
    assert [e["dead"]["origin"] for e in entries] == ["rq", "rq", "rq"]
    r = await api.request("POST", "/requeue/rq.dead", {"n": "2"})
    assert (r.status, r.json()) == (200, {"requeued": 2})
    back = [await api.pull("rq") for _ in range(2)]
    assert all(b.status == 200 and "x-lmq-dead-origin" not in b.headers for b in back)
    assert len(await peek(api, "rq.dead")) == 1
    r = await api.request("POST", "/requeue/rq.dead", {"to": "elsewhere"})
    assert r.json() == {"requeued": 1}
    rest = await api.pull("elsewhere")
    assert {b.body for b in back} | {rest.body} == {b"a", b"b", b"c"}
    assert (await api.request("POST", "/requeue/rq.dead")).json() == {"requeued": 0}


async def test_requeue_never_makes_a_queue_of_a_virtual_name_nor_requeues_into_the_dlq(
    api: Api, clock: ManualClock
) -> None:
    """A dead letter's origin queue deleted, then its name bound as a virtual queue: a requeue
    to the origin would create a real queue of that name (virtual and real names must stay
    disjoint). It stays in the dead-letter queue instead, and can be requeued ``to`` a queue.
    A requeue ``to`` the dead-letter queue itself is refused: it would erase the provenance."""
    await api.set_props("gone", dead_letter="gone.dead", retry=0, timeout=5)
    await api.push("gone", b"d")
    assert (await api.pull("gone")).status == 200
    clock.advance(6)
    assert (await api.pull("gone")).status == 204  # dies into gone.dead
    assert (await api.request("DELETE", "/queues/gone")).status == 204
    assert (await put_virtual(api, "gone", {"queues": ["gone.member"]})).status == 204
    r = await api.request("POST", "/requeue/gone.dead")
    assert (r.status, r.json()) == (200, {"requeued": 0})
    assert (await api.pull("gone")).status == 400  # still a virtual name only, no queue
    r = await api.request("POST", "/requeue/gone.dead", {"to": "gone.dead"})
    assert r.status == 400 and r.json()["error"] == "bad_request", r
    [entry] = await peek(api, "gone.dead")
    assert entry["dead"]["origin"] == "gone"  # untouched by either
    r = await api.request("POST", "/requeue/gone.dead", {"to": "gone.member"})
    assert r.json() == {"requeued": 1}
    assert (await api.pull("gone.member")).body == b"d"


# -- peek ---------------------------------------------------------------------------------------------


async def test_peek_pages_through_a_queue_without_delivering(api: Api, clock: ManualClock) -> None:
    ids = []
    for i in range(5):
        ids.append(await pushed_id(api, "pk", f"m{i}".encode(), priority="0"))
        clock.advance(0.001)  # the queue's order is (time, uuid): one time each keeps push order
    page1 = await peek(api, "pk", n=2)
    page2 = await peek(api, "pk", n=2, after=page1[-1]["id"])
    page3 = await peek(api, "pk", n=2, after=page2[-1]["id"])
    assert [e["id"] for e in page1 + page2 + page3] == ids
    assert "body" not in page1[0]
    with_body = await peek(api, "pk", n=1, body="1")
    assert with_body[0]["body"] == "m0" and with_body[0]["content_type"] == "application/octet-stream"
    assert (await api.pull("pk")).body == b"m0"  # peek delivered nothing
    assert len(await peek(api, "pk")) == 5  # one processing, four available
    await api.push("bin", b"\xff\xfe")
    assert (await peek(api, "bin", body="true"))[0]["body_base64"] == "//4="


@pytest.mark.parametrize("query", [{"n": "0"}, {"n": "1001"}, {"n": "x"}, {"body": "yes"}])
async def test_peek_refuses_bad_parameters(api: Api, query: dict[str, str]) -> None:
    await api.push("pq")
    r = await api.request("GET", "/peek/pq", query)
    assert r.status == 400 and r.json()["error"] == "bad_request"


# -- virtual queues -------------------------------------------------------------------------------------


async def put_virtual(api: Api, name: str, body: Any) -> Reply:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await api.request("PUT", f"/virtual/{api.q(name)}", data=data)


async def test_a_virtual_queue_fans_out_and_answers_each_id(api: Api) -> None:
    assert (await put_virtual(api, "fan", {"queues": ["fa", "fb"]})).status == 204
    assert (await api.request("GET", "/virtual")).json() == {"fan": ["fa", "fb"]}
    assert (await api.request("GET", "/virtual/fan")).json() == {"queues": ["fa", "fb"]}
    r = await api.push("fan", b"hello")
    doc = r.json()
    assert set(doc) == {"queues"} and set(doc["queues"]) == {"fa", "fb"}
    assert all(v["accum"] == "no" for v in doc["queues"].values())
    for q in ("fa", "fb"):
        assert [e["id"] for e in await peek(api, q)] == [doc["queues"][q]["id"]]
        assert (await api.pull(q)).body == b"hello"
    r = await push(api, "fan", b"later", delay="5")  # with options too
    assert set(r.json()["queues"]) == {"fa", "fb"}
    stats = (await api.request("GET", "/stats")).json()
    assert "fan" not in stats["queues"]  # a push to a virtual name creates no queue of that name


async def test_a_virtual_queue_refuses_pulls_and_props_naming_its_queues(api: Api) -> None:
    await put_virtual(api, "vv", {"queues": ["x1", "x2"]})
    for r in (await api.pull("vv"), await api.props("vv"), await api.request("DELETE", "/queues/vv")):
        assert r.status == 400 and "x1, x2" in r.json()["detail"], r


@pytest.mark.parametrize(
    "body",
    [
        {"queues": []},
        {"queues": ["a", "a"]},
        {"queues": [""]},
        {"queues": "a"},
        {"members": ["a"]},
        {"queues": [f"q{i}" for i in range(65)]},
        b"not json",
    ],
)
async def test_bad_virtual_queue_shapes_are_refused(api: Api, body: Any) -> None:
    r = await put_virtual(api, "bad", body)
    assert r.status == 400, r
    assert (await api.request("GET", "/virtual")).json() == {}


async def test_virtual_and_real_names_stay_disjoint(api: Api) -> None:
    await api.push("real")
    assert (await put_virtual(api, "real", {"queues": ["a"]})).status == 400
    await put_virtual(api, "v1", {"queues": ["a"]})
    assert (await put_virtual(api, "v2", {"queues": ["v1"]})).status == 400
    assert (await api.request("DELETE", "/virtual/v1")).status == 204
    assert (await api.request("DELETE", "/virtual/v1")).status == 404
    assert (await api.request("GET", "/virtual/v1")).status == 404


# -- bad options: 400 naming the option, nothing pushed ---------------------------------------------


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ({"delay": "soon"}, "delay"),
        ({"delay": "-1"}, "delay"),
        ({"delay": ""}, "delay"),
        ({"ttl": "abc"}, "ttl"),
        ({"ttl": "5", "delay": "5"}, "ttl"),
        ({"ttl": "1", "delay": "3"}, "ttl"),
        ({"retry": "foo"}, "retry"),
        ({"retry": "-2"}, "retry"),
        ({"interval": "0"}, "interval"),
        ({"priority": "300"}, "priority"),
        ({"priority": "high"}, "priority"),
        ({"once": "maybe"}, "once"),
        ({"once": "1", "retry": "3"}, "once"),
        ({"ttl": "1e-7"}, "'ttl'"),  # above 0, yet no later than now at the clock's precision
        ({"delay": "\uff11"}, "delay"),  # a digit, but not an ASCII one
        ({"priority": "\u0661"}, "priority"),
        ({"retry": "\u0663"}, "retry"),
    ],
)
async def test_bad_options_get_400_naming_the_option_and_push_nothing(
    api: Api, query: dict[str, str], named: str
) -> None:
    r = await push(api, "bad.opts", b"x", **query)
    assert r.status == 400, r
    doc = r.json()
    assert doc["error"] == "invalid_options" and named in doc["detail"], doc
    fan = await api.request("POST", "/messages", {"qre": "^bad", **query}, data=b"x")
    assert fan.status == 400 and fan.json()["error"] == "invalid_options"
    assert "bad.opts" not in (await api.request("GET", "/stats")).json()["queues"]


async def test_options_on_an_accumulating_queue_are_refused(api: Api) -> None:
    await api.set_props("acc", accum=1)
    r = await push(api, "acc", b"x", delay="1")
    assert r.status == 400 and r.json()["error"] == "invalid_options"
    assert await peek(api, "acc") == []


# -- fan-out and batch pushes with options --------------------------------------------------------------


async def test_fan_out_with_options_answers_each_queue_its_id(api: Api) -> None:
    for name in ("fo.a", "fo.b"):
        await api.request("PATCH", f"/properties/{name}", data=b"{}")  # created, empty
        await api.set_props(name, retry=1)
    r = await api.request("POST", "/messages", {"qre": r"^fo\.", "priority": "3"}, data=b"x")
    doc = r.json()
    assert list(doc) == ["fo.a", "fo.b"] and all(v["accum"] == "no" for v in doc.values())
    for name in ("fo.a", "fo.b"):
        [entry] = await peek(api, name)
        assert (entry["id"], entry["priority"]) == (doc[name]["id"], 3)
    plain = await api.request("POST", "/messages", {"qre": r"^fo\."}, data=b"y")
    assert plain.body == b'{"fo.a":{"accum":"no"},"fo.b":{"accum":"no"}}'  # LMQ's answer


async def test_fan_out_with_options_refuses_before_pushing_when_one_queue_accumulates(api: Api) -> None:
    await api.set_props("fz.a", retry=1)
    await api.set_props("fz.b", accum=1)
    r = await api.request("POST", "/messages", {"qre": r"^fz\.", "delay": "1"}, data=b"x")
    assert r.status == 400 and "fz.b" in r.json()["detail"]
    assert await peek(api, "fz.a") == []


async def test_batch_push_with_options_answers_the_ids(api: Api, clock: ManualClock) -> None:
    body = encode_pushes([b"one", ("text/plain", b"two")])
    headers = {"Content-Type": "application/x-msgpack"}
    r = await api.request("POST", "/batch/bt", {"delay": "5"}, data=body, headers=headers)
    doc = r.json()
    assert r.status == 200 and doc["pushed"] == 2 and len(doc["ids"]) == 2
    assert {e["id"] for e in await peek(api, "bt")} == set(doc["ids"])
    assert (await api.pull("bt")).status == 204
    clock.advance(5)
    assert {(await api.pull("bt")).body for _ in range(2)} == {b"one", b"two"}
    plain = await api.request("POST", "/batch/bt", data=body, headers=headers)
    assert plain.body == b'{"pushed":2}'  # without options: as before
    bad = await api.request("POST", "/batch/bt", {"ttl": "x"}, data=body, headers=headers)
    assert bad.status == 400 and "'ttl'" in bad.json()["detail"]


# -- app.config's virtual queues ---------------------------------------------------------------------------


async def test_configured_virtual_queues_are_served_and_a_clash_with_a_queue_stops_the_start(
    suite_options: SuiteOptions, session: aiohttp.ClientSession
) -> None:
    opts = suite_options(durable=True, http=("127.0.0.1", 0), rpc=None)
    n = LMQNode(replace(opts, virtual_queues={"cfg": ("c1", "c2")}))
    await n.start()
    try:
        api = Api(session, base_url(n))
        assert (await api.request("GET", "/virtual")).json() == {"cfg": ["c1", "c2"]}
        assert set((await api.push("cfg", b"x")).json()["queues"]) == {"c1", "c2"}
    finally:
        await n.stop()
    clash = LMQNode(replace(opts, virtual_queues={"c1": ("z",)}))
    with pytest.raises(ConfigError, match="virtual_queues 'c1': a queue has that name"):
        await clash.start()


# -- pylmq.client over HTTP, asyncio and blocking ------------------------------------------------------------


async def test_the_http_clients_speak_the_extensions(node: LMQNode, clock: ManualClock) -> None:
    url = base_url(node)
    async with AsyncHttpClient(url) as c:
        ids = await c.push_with("hc", "body", options=PushOptions(delay=2, priority=7))
        assert list(ids) == ["hc"]
        [entry] = await c.peek("hc", body=True)
        assert (entry["id"], entry["priority"], entry["body"]) == (ids["hc"], 7, "body")
        assert await c.pull("hc", 0) is None
        clock.advance(2)
        msg = await c.pull("hc", 0)
        assert msg is not None and (msg.body, msg.attempts, msg.dead) == (b"body", 1, None)
        with pytest.raises(InvalidOptions):
            await c.push_with("hc", "x", options=PushOptions(ttl=1, delay=2))
        await c.update_props("hw", {"dead_letter": "hw.dead", "retry": 0, "timeout": 1})
        await c.push("hw", "w")
        assert await c.pull("hw", 0) is not None
        clock.advance(2)
        assert await c.pull("hw", 0) is None
        [dead] = await c.pull_many("hw.dead", 5, 0)
        assert dead.dead == DeadLetterInfo("hw", 1, START + 2, "retries") and dead.attempts == 1

    def blocking() -> None:
        with HttpClient(url) as s:
            s.nack("hw.dead", dead.id)
            assert s.requeue("hw.dead", to="hw2") == 1
            s.set_virtual("hv", ["h1", "h2"])
            assert s.virtual_queues() == {"hv": ["h1", "h2"]} and s.get_virtual("hv") == ["h1", "h2"]
            assert set(s.push_with("hv", b"x")) == {"h1", "h2"}
            s.delete_virtual("hv")
            with pytest.raises(NotFound):
                s.get_virtual("hv")

    await asyncio.to_thread(blocking)


async def test_a_virtual_queue_with_an_accumulating_member_refuses_http_pushes(api: Api) -> None:
    await api.set_props("va.acc", accum=1)
    await put_virtual(api, "va", {"queues": ["va.plain", "va.acc"]})
    r = await api.push("va", b"x")
    assert r.status == 400 and "va.acc" in r.json()["detail"]
    # Checked before anything was pushed: the other member was not even created.
    assert (await api.request("GET", "/peek/va.plain")).status == 404


async def test_dead_letter_in_the_default_list_round_trips_and_applies(api: Api, clock: ManualClock) -> None:
    body = json.dumps([["^dl\\.", {"dead_letter": "dl.graveyard", "retry": 0}], ["^other", {"retry": 1}]])
    assert (await api.request("PUT", "/properties", data=body.encode())).status == 204
    listed = await api.request("GET", "/properties")
    assert listed.json() == [["^dl\\.", {"dead_letter": "dl.graveyard", "retry": 0}], ["^other", {"retry": 1}]]
    assert (await api.props("dl.x")).json()["dead_letter"] == "dl.graveyard"
    await api.push("dl.x", b"x")
    assert (await api.pull("dl.x")).status == 200
    clock.advance(31)
    assert (await api.pull("dl.x")).status == 204
    assert (await api.pull("dl.graveyard")).headers["x-lmq-dead-origin"] == "dl.x"


async def test_a_waiting_pull_gets_a_delayed_message_when_it_becomes_due(api: Api, clock: ManualClock) -> None:
    await pushed_id(api, "wake", b"due", delay="30")
    waiting = asyncio.ensure_future(api.pull("wake", t=60))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    clock.advance(30.01)  # the queue's wake-up timer has a little slack past the due time
    got = await asyncio.wait_for(waiting, 5)
    assert (got.status, got.body) == (200, b"due")


async def test_delay_on_the_real_clock(session: aiohttp.ClientSession, suite_options: SuiteOptions) -> None:
    n = LMQNode(suite_options(http=("127.0.0.1", 0), rpc=None))
    await n.start()
    try:
        api = Api(session, base_url(n))
        start = asyncio.get_running_loop().time()
        await pushed_id(api, "rt", b"soon", delay="0.3")
        assert (await api.pull("rt", t=0)).status == 204
        got = await api.pull("rt", t=5)
        assert got.body == b"soon"
        assert asyncio.get_running_loop().time() - start >= 0.25  # not before it was due
    finally:
        await n.stop()
