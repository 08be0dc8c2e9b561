"""Messages over HTTP (docs/lmq-contract.md#http-api): push, pull, ack/nack/ext, redelivery, retry,
accumulation, fan-out and pull-any, through a real node and real sockets."""

from __future__ import annotations

import asyncio
import os
import uuid

import msgpack

from pylmq.wire.compound import decode_multipart
from tests.api.api_helpers import Api


def _ids_differ(a: str, b: str) -> bool:
    return uuid.UUID(a) != uuid.UUID(b)


# -- push and pull -------------------------------------------------------------------------------


async def test_push_answers_accum_no_as_json(api: Api) -> None:
    r = await api.push("q", b'{"message":"lmq test"}', "application/json")
    assert (r.status, r.body) == (200, b'{"accum":"no"}'), r
    assert r.headers["content-type"] == "application/json"


async def test_pull_returns_body_and_lmq_headers(api: Api) -> None:
    await api.push("q", b'{"message":"lmq test"}', "application/json")
    r = await api.pull("q", t=None)
    assert (r.status, r.body) == (200, b'{"message":"lmq test"}'), r
    assert r.headers["content-type"] == "application/json"
    assert r.headers["x-lmq-queue-name"] == "q"
    assert r.headers["x-lmq-message-type"] == "normal"
    assert r.retry == "2"
    assert str(uuid.UUID(r.id)) == r.id, f"message id should be canonical UUID text, got {r.id!r}"


async def test_pull_defaults_content_type_to_octet_stream(api: Api) -> None:
    await api.push("q", b"raw")
    r = await api.pull("q")
    assert r.headers["content-type"] == "application/octet-stream", r


async def test_ack_removes_the_message(api: Api) -> None:
    await api.push("q")
    r = await api.pull("q")
    assert (await api.ack("q", r.id)).status == 204
    assert (await api.pull("q")).status == 204
    assert (await api.ack("q", r.id)).status == 404, "a second ack of the same id must be 404"


async def test_pull_with_t_0_on_an_empty_queue_answers_204_at_once(api: Api) -> None:
    r = await api.pull("empty", t=0)
    assert (r.status, r.body) == (204, b""), r


async def test_pull_with_t_answers_204_when_nothing_comes_in_time(api: Api) -> None:
    r = await api.pull("empty", t=0.2)
    assert r.status == 204, r


async def test_pull_takes_fractional_and_integer_t(api: Api) -> None:
    await api.push("q", b"a")
    await api.push("q", b"b")
    assert (await api.pull("q", t="1")).body == b"a"
    assert (await api.pull("q", t="0.5")).body == b"b"


async def test_long_poll_without_t_receives_a_later_push(api: Api) -> None:
    waiting = asyncio.create_task(api.pull("later", t=None))
    await asyncio.sleep(0.1)
    assert not waiting.done(), "a pull without t must wait"
    await api.push("later", b"now")
    r = await waiting
    assert (r.status, r.body) == (200, b"now"), r


async def test_waiting_pullers_are_served_in_arrival_order(api: Api) -> None:
    first = asyncio.create_task(api.pull("fifo", t=5))
    await asyncio.sleep(0.05)
    second = asyncio.create_task(api.pull("fifo", t=5))
    await asyncio.sleep(0.05)
    await api.push("fifo", b"1")
    await api.push("fifo", b"2")
    assert ((await first).body, (await second).body) == (b"1", b"2")


async def test_messages_are_delivered_in_push_order(api: Api) -> None:
    for i in range(5):
        await api.push("order", str(i))
    got = [(await api.pull("order")).body for _ in range(5)]
    assert got == [b"0", b"1", b"2", b"3", b"4"]


async def test_other_message_headers_are_not_invented(api: Api) -> None:
    await api.push("q", b"x", "text/plain; charset=utf-8")
    r = await api.pull("q")
    assert r.headers["content-type"] == "text/plain; charset=utf-8"
    assert "x-lmq-sequence" not in r.headers


async def test_8_mb_body_round_trips(api: Api) -> None:
    body = os.urandom(8 * 1024 * 1024)
    assert (await api.push("big", body)).status == 200
    r = await api.pull("big")
    assert r.status == 200 and r.body == body, f"expected the 8 MB body back, got {len(r.body)} bytes"


async def test_10_mb_body_round_trips_as_in_lmqs_large_data_test(api: Api) -> None:
    body = os.urandom(10 * 1024 * 1024)
    assert (await api.push("big", body)).status == 200
    assert (await api.pull("big")).body == body


async def test_empty_body_is_a_message_too(api: Api) -> None:
    assert (await api.push("q", b"")).status == 200
    r = await api.pull("q")
    assert (r.status, r.body) == (200, b""), r


async def test_queue_names_with_slashes_work_percent_encoded(api: Api) -> None:
    await api.push("a/b", b"x")
    r = await api.pull("a/b")
    assert (r.status, r.headers["x-lmq-queue-name"]) == (200, "a/b"), r


# -- timeouts, redelivery, retry ------------------------------------------------------------------


async def test_unacked_message_is_redelivered_after_timeout_with_a_new_id(api: Api) -> None:
    await api.set_props("redo", timeout=0.2)
    await api.push("redo", b"m")
    first = await api.pull("redo")
    assert (await api.pull("redo", t=0)).status == 204, "a processing message is not delivered again at once"
    second = await api.pull("redo", t=2)
    assert (second.status, second.body) == (200, b"m"), second
    assert _ids_differ(first.id, second.id), "every delivery carries a fresh id"
    assert (first.retry, second.retry) == ("2", "1")


async def test_ack_with_the_id_of_an_earlier_delivery_is_404(api: Api) -> None:
    await api.set_props("redo", timeout=0.2)
    await api.push("redo")
    first = await api.pull("redo")
    second = await api.pull("redo", t=2)
    assert (await api.ack("redo", first.id)).status == 404
    assert (await api.ack("redo", second.id)).status == 204


async def test_ack_after_the_deadline_is_404(api: Api) -> None:
    await api.set_props("late", timeout=0.2)
    await api.push("late")
    r = await api.pull("late")
    await asyncio.sleep(0.3)
    reply = await api.ack("late", r.id)
    assert reply.status == 404, reply
    assert reply.json()["error"] == "not_found"


async def test_message_is_discarded_when_retry_is_exhausted(api: Api) -> None:
    await api.set_props("once", retry=0, timeout=0.2)
    await api.push("once")
    r = await api.pull("once")
    assert r.retry == "0"
    again = await api.pull("once", t=0.5)
    assert again.status == 204, f"a message with retry 0 must not come back, got {again!r}"
    stats = (await api.request("GET", "/stats")).json()
    assert stats["queues"]["once"]["size"] == 0


async def test_retry_counts_down_through_every_redelivery(api: Api) -> None:
    await api.set_props("count", retry=2, timeout=0.1)
    await api.push("count")
    retries = [(await api.pull("count", t=2)).retry for _ in range(3)]
    assert retries == ["2", "1", "0"]
    assert (await api.pull("count", t=0.3)).status == 204


async def test_infinite_retry_is_sent_as_infinity(api: Api) -> None:
    await api.set_props("inf", retry="infinity")
    await api.push("inf")
    assert (await api.pull("inf")).retry == "infinity"


async def test_timeout_change_applies_to_messages_already_queued(api: Api) -> None:
    await api.push("tchange")
    await api.set_props("tchange", timeout=0.2)
    await api.pull("tchange")
    r = await api.pull("tchange", t=2)
    assert (r.status, r.retry) == (200, "1"), r


# -- nack / ext -------------------------------------------------------------------------------------


async def test_nack_makes_the_message_available_at_once_and_spends_the_retry(api: Api) -> None:
    await api.set_props("nack", retry=1)
    await api.push("nack", b"n")
    first = await api.pull("nack")
    assert first.retry == "1"
    assert (await api.reply("nack", first.id, "nack")).status == 204
    second = await api.pull("nack", t=0)
    assert (second.status, second.body, second.retry) == (200, b"n", "0"), second
    assert (await api.reply("nack", second.id, "nack")).status == 204
    assert (await api.pull("nack", t=0)).status == 204, "retry exhausted: the nacked message is discarded"


async def test_nacked_message_queues_behind_waiting_messages(api: Api) -> None:
    await api.push("behind", b"first")
    await api.push("behind", b"second")
    r = await api.pull("behind")
    await api.reply("behind", r.id, "nack")
    assert (await api.pull("behind")).body == b"second"
    assert (await api.pull("behind")).body == b"first"


async def test_nack_and_ext_keep_the_id_and_ack_then_works(api: Api) -> None:
    await api.push("keep")
    r = await api.pull("keep")
    assert (await api.reply("keep", r.id, "ext")).status == 204
    assert (await api.reply("keep", r.id, "nack")).status == 204
    # After nack the message is available again: the old id no longer names a processing message.
    assert (await api.reply("keep", r.id, "nack")).status == 404
    assert (await api.reply("keep", r.id, "ack")).status == 404


async def test_ext_extends_the_deadline_by_the_timeout(api: Api) -> None:
    await api.set_props("ext", timeout=1.0)
    await api.push("ext")
    r = await api.pull("ext")
    await asyncio.sleep(0.6)
    assert (await api.reply("ext", r.id, "ext")).status == 204
    await asyncio.sleep(0.6)  # past the first deadline, before the extended one
    assert (await api.pull("ext", t=0)).status == 204, "an extended message must not be redelivered yet"
    assert (await api.ack("ext", r.id)).status == 204


async def test_ext_after_the_deadline_is_404(api: Api) -> None:
    await api.set_props("ext", timeout=0.1)
    await api.push("ext")
    r = await api.pull("ext")
    await asyncio.sleep(0.2)
    assert (await api.reply("ext", r.id, "ext")).status == 404


# -- accumulation and compound messages ---------------------------------------------------------------


async def _accumulate(api: Api, name: str) -> None:
    await api.set_props(name, accum=0.2, retry=5, timeout=0)
    r1 = await api.push(name, b"\x81\xa1a\x01", "application/x-msgpack")
    r2 = await api.push(name, b'{"testcase":"compound 2"}', "application/json")
    assert (r1.body, r2.body) == (b'{"accum":"new"}', b'{"accum":"yes"}'), (r1, r2)


async def test_accumulated_message_is_not_pullable_before_the_window_ends(api: Api) -> None:
    await _accumulate(api, "acc")
    assert (await api.pull("acc", t=0)).status == 204


async def test_accumulated_message_comes_as_multipart_by_default(api: Api) -> None:
    await _accumulate(api, "acc")
    r = await api.pull("acc", t=2)
    assert r.status == 200, r
    assert r.headers["x-lmq-message-type"] == "compound"
    assert r.retry == "5"
    assert r.headers["content-type"] == f"multipart/mixed; boundary={r.id}"
    assert decode_multipart(r.id.encode(), r.body) == [
        (((b"content-type", b"application/x-msgpack"),), b"\x81\xa1a\x01"),
        (((b"content-type", b"application/json"),), b'{"testcase":"compound 2"}'),
    ]


async def test_compound_message_as_msgpack(api: Api) -> None:
    await _accumulate(api, "acc")
    r = await api.pull("acc", t=2, cf="msgpack")
    assert r.headers["content-type"] == "application/x-msgpack", r
    assert msgpack.unpackb(r.body) == [
        [{"content-type": "application/x-msgpack"}, b"\x81\xa1a\x01"],
        [{"content-type": "application/json"}, b'{"testcase":"compound 2"}'],
    ]


async def test_compound_message_is_redelivered_whole_with_explicit_multipart(api: Api) -> None:
    await _accumulate(api, "acc")
    first = await api.pull("acc", t=2)
    # timeout 0: the compound message is due again at once, as one message with one new id.
    second = await api.pull("acc", t=1, cf="multipart")
    assert second.retry == "4"
    assert second.headers["content-type"] == f"multipart/mixed; boundary={second.id}"
    assert second.body.replace(second.id.encode(), b"B") == first.body.replace(first.id.encode(), b"B")


async def test_cf_is_ignored_for_normal_messages(api: Api) -> None:
    await api.push("plain", b"{}", "application/json")
    r = await api.pull("plain", cf="msgpack")
    assert (r.body, r.headers["content-type"]) == (b"{}", "application/json")


async def test_pushes_after_the_window_open_a_new_one(api: Api) -> None:
    await api.set_props("win", accum=0.1)
    assert (await api.push("win", b"1")).body == b'{"accum":"new"}'
    first = await api.pull("win", t=2)
    assert (await api.push("win", b"2")).body == b'{"accum":"new"}'
    second = await api.pull("win", t=2)
    assert decode_multipart(first.id.encode(), first.body)[0][1] == b"1"
    assert decode_multipart(second.id.encode(), second.body)[0][1] == b"2"


async def test_compound_message_is_acked_once(api: Api) -> None:
    await _accumulate(api, "acc")
    await api.set_props("acc", timeout=30)
    r = await api.pull("acc", t=2)
    assert (await api.ack("acc", r.id)).status == 204
    assert (await api.pull("acc", t=0)).status == 204


# -- fan-out and pull-any ----------------------------------------------------------------------------


async def test_fan_out_pushes_to_every_existing_matching_queue(api: Api) -> None:
    for name in ("multi/a", "multi/b", "other"):
        assert (await api.request("DELETE", f"/properties/{api.q(name)}")).status == 204
    r = await api.push_all("multi/.*", b'{"testcase":"multi"}')
    assert r.status == 200, r
    assert r.body == b'{"multi/a":{"accum":"no"},"multi/b":{"accum":"no"}}'
    assert (await api.pull("multi/a")).body == b'{"testcase":"multi"}'
    assert (await api.pull("multi/b")).body == b'{"testcase":"multi"}'
    assert (await api.pull("other")).status == 204


async def test_fan_out_with_an_empty_regex_reaches_every_queue_as_in_lmq(api: Api) -> None:
    for name in ("e1", "e2"):
        assert (await api.request("DELETE", f"/properties/{api.q(name)}")).status == 204
    r = await api.push_all("", b"all")
    assert r.status == 200, r
    assert r.json() == {"e1": {"accum": "no"}, "e2": {"accum": "no"}}


async def test_default_props_with_an_empty_regex_apply_to_every_queue(api: Api) -> None:
    body = b'[["", {"retry": 7}]]'
    r = await api.request("PUT", "/properties", data=body, headers={"content-type": "application/json"})
    assert r.status == 204, r
    assert (await api.request("GET", "/properties/anything")).json()["retry"] == 7


async def test_fan_out_creates_no_queue(api: Api) -> None:
    r = await api.push_all("nothing-yet/.*")
    assert (r.status, r.json()) == (200, {}), r
    stats = (await api.request("GET", "/stats")).json()
    assert stats["queues"] == {}


async def test_fan_out_reports_accumulation_per_queue(api: Api) -> None:
    await api.set_props("fan/acc", accum=1)
    await api.set_props("fan/plain")
    r = await api.push_all("^fan/")
    assert r.json() == {"fan/acc": {"accum": "new"}, "fan/plain": {"accum": "no"}}


async def test_pull_any_takes_from_any_matching_queue(api: Api) -> None:
    await api.push("any/a", b"a")
    await api.push("any/b", b"b")
    got = {(await api.pull_any("any/.*")).headers["x-lmq-queue-name"] for _ in range(2)}
    assert got == {"any/a", "any/b"}
    assert (await api.pull_any("any/.*", t=0)).status == 204


async def test_pull_any_with_t_0_and_no_matching_queue_answers_204(api: Api) -> None:
    r = await api.pull_any("no-such-queue-.*", t=0)
    assert r.status == 204, r


async def test_pull_any_with_t_answers_204_when_nothing_comes(api: Api) -> None:
    await api.set_props("idle/a")
    assert (await api.pull_any("idle/.*", t=0.2)).status == 204


async def test_pull_any_sees_a_queue_created_while_it_waits(api: Api) -> None:
    waiting = asyncio.create_task(api.pull_any("^fresh/", t=5))
    await asyncio.sleep(0.1)
    await api.push("fresh/new", b"late")
    r = await waiting
    assert (r.status, r.body, r.headers["x-lmq-queue-name"]) == (200, b"late", "fresh/new"), r


async def test_pull_any_without_t_waits_for_a_push(api: Api) -> None:
    await api.set_props("wait/a")
    waiting = asyncio.create_task(api.pull_any("^wait/", t=None))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    await api.push("wait/a", b"x")
    assert (await waiting).body == b"x"


async def test_pull_any_delivers_compound_as_msgpack(api: Api) -> None:
    await _accumulate(api, "anyc")
    r = await api.pull_any("^anyc$", t=2, cf="msgpack")
    assert r.headers["content-type"] == "application/x-msgpack", r
    assert len(msgpack.unpackb(r.body)) == 2


async def test_reply_to_a_pull_any_delivery_goes_to_its_queue(api: Api) -> None:
    await api.push("rq/a")
    r = await api.pull_any("^rq/")
    assert (await api.ack(r.headers["x-lmq-queue-name"], r.id)).status == 204


# -- queues --------------------------------------------------------------------------------------------


async def test_delete_queue_drops_its_messages(api: Api) -> None:
    await api.push("gone", b"x")
    assert (await api.request("DELETE", "/queues/gone")).status == 204
    assert (await api.pull("gone")).status == 204
    stats = (await api.request("GET", "/stats")).json()
    assert "gone" in stats["queues"], "the pull above created the queue again"
    assert stats["queues"]["gone"]["size"] == 0


async def test_delete_of_an_unknown_queue_is_404(api: Api) -> None:
    r = await api.request("DELETE", "/queues/never")
    assert r.status == 404, r
    assert r.json()["error"] == "queue_not_found"


async def test_delete_ends_a_waiting_pull_with_204(api: Api) -> None:
    await api.set_props("doomed")
    waiting = asyncio.create_task(api.pull("doomed", t=5))
    await asyncio.sleep(0.1)
    assert (await api.request("DELETE", "/queues/doomed")).status == 204
    assert (await waiting).status == 204


async def test_non_ascii_queue_names_and_content_types_round_trip(api: Api) -> None:
    await api.push("キュー", b"x", "text/plain; name=é")
    r = await api.pull("キュー")
    assert r.status == 200, r
    assert r.headers["x-lmq-queue-name"] == "キュー"
    assert r.headers["content-type"] == "text/plain; name=é"
