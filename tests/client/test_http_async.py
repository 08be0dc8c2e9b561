"""AsyncHttpClient against a real node: each operation of the HTTP API, errors, failover."""

from __future__ import annotations

import pytest

from pylmq.client import AsyncHttpClient, Part
from pylmq.errors import BadRequest, InvalidProps, InvalidRegex, MessageNotFound, QueueNotFound, Unreachable
from pylmq.node import LMQNode
from pylmq.node.testing import http_url, refused_url


async def test_push_pull_ack_round_trip(http: AsyncHttpClient) -> None:
    assert await http.push("q", b"hello", "text/plain") == "no"
    msg = await http.pull("q", timeout=0)
    assert msg is not None
    assert (msg.queue, msg.type, msg.retry, msg.body, msg.content_type) == ("q", "normal", 2, b"hello", "text/plain")
    assert msg.parts == ()
    await http.ack("q", msg.id)
    assert await http.pull("q", timeout=0) is None


async def test_push_without_content_type_pulls_as_octet_stream(http: AsyncHttpClient) -> None:
    await http.push("q", b"\x00\xff")
    msg = await http.pull("q", timeout=0)
    assert msg is not None and msg.content_type == "application/octet-stream" and msg.body == b"\x00\xff"


async def test_str_body_is_sent_as_utf8_text(http: AsyncHttpClient) -> None:
    await http.push("q", "héllo")
    msg = await http.pull("q", timeout=0)
    assert msg is not None and msg.body == "héllo".encode() and msg.content_type.startswith("text/plain")


async def test_pull_timeout_returns_none(http: AsyncHttpClient) -> None:
    assert await http.pull("empty", timeout=0) is None
    assert await http.pull("empty", timeout=0.05) is None


async def test_queue_name_with_slash_round_trips(http: AsyncHttpClient) -> None:
    await http.push("lmq/a b", b"x")
    msg = await http.pull("lmq/a b", timeout=0)
    assert msg is not None and msg.queue == "lmq/a b"
    await http.ack("lmq/a b", msg.id)


async def test_nack_redelivers_with_a_new_id_and_one_retry_less(http: AsyncHttpClient) -> None:
    await http.push("q", b"x")
    first = await http.pull("q", timeout=0)
    assert first is not None
    await http.nack("q", first.id)
    second = await http.pull("q", timeout=0)
    assert second is not None and second.id != first.id and second.retry == 1
    with pytest.raises(MessageNotFound):
        await http.ack("q", first.id)


async def test_ext_keeps_the_message_ackable(http: AsyncHttpClient) -> None:
    await http.push("q", b"x")
    msg = await http.pull("q", timeout=0)
    assert msg is not None
    await http.ext("q", msg.id)
    await http.ack("q", msg.id)


async def test_ack_of_unknown_id_raises_message_not_found(http: AsyncHttpClient) -> None:
    await http.push("q", b"x")
    with pytest.raises(MessageNotFound) as info:
        await http.ack("q", "00000000-0000-4000-8000-000000000000")
    assert info.value.http_status == 404


async def test_delete_unknown_queue_raises_queue_not_found(http: AsyncHttpClient) -> None:
    with pytest.raises(QueueNotFound):
        await http.delete_queue("never-made")


async def test_delete_queue_drops_its_messages(http: AsyncHttpClient) -> None:
    await http.push("q", b"x")
    await http.delete_queue("q")
    assert await http.pull("q", timeout=0) is None


async def test_compound_pull_multipart_gives_one_part_per_push(http: AsyncHttpClient) -> None:
    await http.update_props("acc", {"accum": 0.05})
    assert await http.push("acc", b"one", "text/plain") == "new"
    assert await http.push("acc", b"two") == "yes"
    msg = await http.pull("acc", timeout=5)
    assert msg is not None and msg.type == "compound"
    assert msg.content_type == f"multipart/mixed; boundary={msg.id}"
    assert msg.parts == (
        Part({"content-type": "text/plain"}, b"one"),
        Part({"content-type": "application/octet-stream"}, b"two"),
    )
    await http.ack("acc", msg.id)


async def test_compound_pull_msgpack_gives_the_same_parts(http: AsyncHttpClient) -> None:
    await http.update_props("acc", {"accum": 0.05})
    await http.push("acc", b"one", "text/plain")
    await http.push("acc", b"\r\n--two")
    msg = await http.pull("acc", timeout=5, cf="msgpack")
    assert msg is not None and msg.type == "compound" and msg.content_type == "application/x-msgpack"
    assert [p.body for p in msg.parts] == [b"one", b"\r\n--two"]
    assert [p.content_type for p in msg.parts] == ["text/plain", "application/octet-stream"]


async def test_push_all_reaches_existing_matching_queues(http: AsyncHttpClient) -> None:
    await http.push("fan/a", b"0")
    await http.push("fan/b", b"0")
    await http.push("other", b"0")
    assert await http.push_all("^fan/", b"1") == {"fan/a": "no", "fan/b": "no"}


async def test_pull_any_takes_from_a_matching_queue(http: AsyncHttpClient) -> None:
    await http.push("any/a", b"x")
    msg = await http.pull_any("^any/", timeout=0)
    assert msg is not None and msg.queue == "any/a" and msg.body == b"x"
    assert await http.pull_any("^any/", timeout=0) is None


async def test_bad_regex_raises_invalid_regex_with_the_server_reason(http: AsyncHttpClient) -> None:
    with pytest.raises(InvalidRegex) as info:
        await http.pull_any("(", timeout=0)
    assert info.value.reason == "invalid_regex" and "HTTP 400" in info.value.detail


async def test_negative_timeout_is_refused_before_sending(http: AsyncHttpClient) -> None:
    with pytest.raises(BadRequest):
        await http.pull("q", timeout=-1)


async def test_props_update_merge_and_reset(http: AsyncHttpClient) -> None:
    assert await http.get_props("p") == {"accum": 0, "retry": 2, "timeout": 30}
    await http.update_props("p", {"retry": 5})
    await http.update_props("p", {"timeout": 1.5})
    assert await http.get_props("p") == {"accum": 0, "retry": 5, "timeout": 1.5}
    await http.reset_props("p")
    assert await http.get_props("p") == {"accum": 0, "retry": 2, "timeout": 30}


async def test_unknown_property_raises_invalid_props(http: AsyncHttpClient) -> None:
    with pytest.raises(InvalidProps):
        await http.update_props("p", {"colour": 1})


async def test_default_props_set_get_delete(http: AsyncHttpClient) -> None:
    await http.set_default_props([("^d/", {"retry": 7})])
    assert await http.get_default_props() == [("^d/", {"retry": 7})]
    assert (await http.get_props("d/x"))["retry"] == 7
    await http.delete_default_props()
    assert await http.get_default_props() == []


async def test_stats_is_a_json_object(http: AsyncHttpClient) -> None:
    await http.push("s", b"x")
    assert isinstance(await http.stats(), dict)


async def test_failover_to_the_second_url_when_the_first_refuses(node: LMQNode) -> None:
    async with AsyncHttpClient([refused_url(), http_url(node)]) as c:
        assert await c.push("q", b"x") == "no"
        assert c.base_url == http_url(node)


async def test_comma_separated_urls_are_tried_in_turn(node: LMQNode) -> None:
    async with AsyncHttpClient(f"{refused_url()},{http_url(node)}") as c:
        assert await c.pull("q", timeout=0) is None


async def test_no_node_reachable_raises_unreachable() -> None:
    async with AsyncHttpClient([refused_url(), refused_url()], connect_timeout=2) as c:
        with pytest.raises(Unreachable):
            await c.push("q", b"x")


async def test_session_passed_in_is_left_open(node: LMQNode) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async with AsyncHttpClient(http_url(node), session=session) as c:
            await c.push("q", b"x")
        assert not session.closed


async def test_push_many_and_pull_many_compound_as_parts(http: AsyncHttpClient) -> None:
    await http.update_props("acc", {"accum": 0.05})
    assert await http.push_many("acc", [("text/plain", b"one"), b"two"]) == 2
    [m] = await http.pull_many("acc", 5, timeout=2)
    assert m.type == "compound" and [(p.content_type, p.body) for p in m.parts] == [
        ("text/plain", b"one"),
        ("application/octet-stream", b"two"),
    ]


async def test_pull_many_bad_count_raises_bad_request(http: AsyncHttpClient) -> None:
    with pytest.raises(BadRequest, match="n must be a whole number"):
        await http.pull_many("q", 0)
