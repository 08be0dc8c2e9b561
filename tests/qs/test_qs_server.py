"""queue_server's protocol over real TCP and UDP sockets against a real node: framing, bounds,
bad input (each answered, the queue unchanged), and the actions that need no produce."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pylmq.core.message import msg_key, parse_uuid
from tests.qs.qs_helpers import Tcp, Udp, http, qs_node


async def test_tcp_answers_echo_seq_end_in_newline_and_keep_order_when_pipelined() -> None:
    async with qs_node() as node:
        tcp = await Tcp.open(node)
        # Three requests in one write, whitespace and newlines between them, and one invalid.
        await tcp.send(b'{"action":8,"seq":1}\n  {"action":4,"queue":"q","seq":"two"}{"action":99,"seq":3}\r\n')
        a, b, c = await tcp.answer(), await tcp.answer(), await tcp.answer()
        assert (a["seq"], a["code"]) == (1, 0)
        assert (b["seq"], b["code"], b["size"]) == ("two", 0, 0)
        assert (c["seq"], c["code"], c["reason"]) == (3, -1, "invalid action 99")
        # The invalid request did not close the connection.
        assert (await tcp.ask({"action": 7, "seq": 4}))["seq"] == 4
        await tcp.close()


async def test_tcp_request_split_across_writes() -> None:
    async with qs_node() as node:
        tcp = await Tcp.open(node)
        req = b'{"action":4,"queue":"a}{\\"b","seq":5}'
        for i in range(len(req)):
            await tcp.send(req[i : i + 1])
            await asyncio.sleep(0)
        a = await tcp.answer()
        assert (a["queue"], a["seq"], a["code"]) == ('a}{"b', 5, 0)
        await tcp.close()


async def test_tcp_non_json_object_is_answered_and_the_connection_stays() -> None:
    async with qs_node() as node:
        tcp = await Tcp.open(node)
        await tcp.send(b'{"action":1, oops}')
        a = await tcp.answer()
        assert a["code"] == -1 and "not JSON" in a["reason"]
        assert (await tcp.ask({"action": 8, "seq": 1}))["code"] == 0
        await tcp.close()


async def test_tcp_oversized_request_is_answered_then_closed_and_nothing_is_queued() -> None:
    async with qs_node(qs_max_request=1024) as node:
        tcp = await Tcp.open(node)
        await tcp.send({"action": 8, "seq": 1})
        await tcp.send(b'{"action":1,"queue":"q","data":"' + b"x" * 2000 + b'"}')
        assert (await tcp.answer())["seq"] == 1  # the request before it is answered first
        a = await tcp.answer()
        assert a["code"] == -1 and "larger than 1024 bytes" in a["reason"]
        assert await tcp.closed()
        assert node.manager.get("q") is None


async def test_tcp_stray_bytes_between_objects_are_answered_then_closed() -> None:
    async with qs_node() as node:
        tcp = await Tcp.open(node)
        await tcp.send(b'[1,2] {"action":8}')
        a = await tcp.answer()
        assert a["code"] == -1 and "expected a JSON object" in a["reason"]
        assert await tcp.closed()


async def test_tcp_idle_connection_is_closed() -> None:
    async with qs_node(qs_idle_timeout=0.2) as node:
        tcp = await Tcp.open(node)
        assert (await tcp.ask({"action": 8}))["code"] == 0
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert await tcp.closed()
        assert loop.time() - t0 >= 0.15


async def test_tcp_unfinished_request_must_be_whole_within_the_idle_timeout() -> None:
    async with qs_node(qs_idle_timeout=0.3) as node:
        tcp = await Tcp.open(node)
        await tcp.send(b'{"action":8')
        for _ in range(3):  # bytes keep coming, the request never ends
            await asyncio.sleep(0.1)
            await tcp.send(b" ")
        a = await tcp.answer()
        assert a["code"] == -1 and "whole within" in a["reason"]
        assert await tcp.closed()


async def test_tcp_connection_limit_evicts_an_idle_connection_for_a_newcomer() -> None:
    async with qs_node(max_connections=2) as node:
        server = node._qs
        assert server is not None
        server._evictions.evict_after = 0.05
        first, second = await Tcp.open(node), await Tcp.open(node)
        assert (await first.ask({"action": 8}))["code"] == 0
        assert (await second.ask({"action": 8}))["code"] == 0
        await asyncio.sleep(0.1)
        third = await Tcp.open(node)
        assert (await third.ask({"action": 8}))["code"] == 0
        assert len(server.conns) == 2
        assert await first.closed()  # the one idle longest gave up its place
        await second.close()
        await third.close()


async def test_tcp_connection_limit_refuses_when_no_connection_is_idle() -> None:
    async with qs_node(max_connections=1) as node:
        assert node._qs is not None
        node._qs._evictions.evict_after = 60.0  # no connection counts as idle
        first = await Tcp.open(node)
        assert (await first.ask({"action": 8}))["code"] == 0
        second = await Tcp.open(node)  # first was active just now: no place to take
        assert await second.closed()
        assert (await first.ask({"action": 8}))["code"] == 0
        await first.close()


async def test_tcp_inflight_cap_pauses_reading_and_still_answers_all_in_order() -> None:
    async with qs_node() as node:
        server = node._qs
        assert server is not None
        server.max_inflight = 2
        tcp = await Tcp.open(node)
        await tcp.send(b"".join(json.dumps({"action": 4, "queue": f"q{i}", "seq": i}).encode() for i in range(50)))
        seqs = [(await tcp.answer())["seq"] for _ in range(50)]
        assert seqs == list(range(50))
        await tcp.close()


@pytest.mark.parametrize(
    ("req", "reason"),
    [
        (b"not json", "not JSON"),
        (b'"a string"', "not a JSON object"),
        (b'{"action":"2","queue":"q"}', "action must be an integer"),
        (b'{"queue":"q"}', "missing action"),
        (b'{"action":77,"queue":"q"}', "invalid action 77"),
        (b'{"action":2}', "queue must be a non-empty string"),
        (b'{"action":1,"queue":"q","data":5}', "data must be a string"),
        (b'{"action":1,"queue":"q","data":"x","delay":"soon"}', "delay must be a number"),
        (b'{"action":1,"queue":"q","data":"x","delay":2000000000,"ttl":1000}', "delay must be before ttl"),
        (b'{"action":1,"queue":"q","data":"x","delay":2000000000,"ttl":2000000000}', "delay must be before ttl"),
        (b'{"action":1,"queue":"q","data":"x","retry":-1}', "retry must be an integer >= 0"),
        (b'{"action":1,"queue":"q","data":"x","ttl":1e300}', "time error: ttl"),
        (b'{"action":5,"queue":"q"}', "not supported: action 5"),
        (b'{"action":6,"queue":"q"}', "not supported: action 6"),
        (b'{"action":1,"queue":"__lmq_info__","data":"x"}', "reserved"),
    ],
)
async def test_bad_input_is_answered_over_both_transports_and_changes_nothing(req: bytes, reason: str) -> None:
    async with qs_node() as node:
        async with http(node) as h:
            await h.push("q", b"kept")
        udp = Udp(node)
        tcp = await Tcp.open(node)
        answers = [await udp.ask(req)]
        if req.startswith(b"{"):  # over TCP anything else breaks the stream (another test)
            answers.append(await tcp.ask(req))
        for answer in answers:
            assert answer["code"] == -1
            assert reason in answer["reason"], answer
        await tcp.close()
        udp.close()
        assert sorted(node.manager.queue_names()) == ["q"]
        assert node.store.size("q") == 1


async def test_udp_oversized_datagram_is_answered_too_large() -> None:
    async with qs_node(qs_udp_max=1024) as node:
        udp = Udp(node)
        a = await udp.ask(b'{"action":1,"queue":"q","seq":9,"data":"' + b"x" * 2000 + b'"}')
        assert a == {"seq": 9, "action": 1, "queue": "q", "code": -1, "reason": "too large, use TCP"}
        assert node.manager.get("q") is None
        udp.close()


async def test_udp_consume_whose_answer_is_too_large_keeps_the_message_with_its_retry() -> None:
    async with qs_node(qs_udp_max=1024) as node, http(node) as h:
        await h.update_props("q", {"retry": 1})
        await h.push("q", b"y" * 4000, "text/plain")
        udp = Udp(node)
        for _ in range(3):  # each attempt puts it back: no retry is spent
            a = await udp.ask({"action": 2, "queue": "q", "seq": 1})
            assert (a["code"], a["reason"], a["seq"]) == (-1, "too large, use TCP", 1)
        udp.close()
        assert node.store.size("q") == 1
        # Over TCP it comes, still with its whole retry (1 more delivery after this one).
        tcp = await Tcp.open(node)
        a = await tcp.ask({"action": 2, "queue": "q"})
        assert a["code"] == 0 and a["data"] == "y" * 4000
        [record] = node.store.messages("q")
        assert record.retry == 1
        await tcp.close()


async def test_udp_busy_when_too_many_requests_run() -> None:
    async with qs_node() as node:
        server = node._qs
        assert server is not None
        server.udp_max_inflight = 1
        assert server.udp is not None
        server.udp.running = 1  # as if one request were waiting on the store
        udp = Udp(node)
        a = await udp.ask({"action": 8, "seq": 3})
        assert (a["code"], a["reason"], a["seq"]) == (-1, "busy: try again", 3)
        server.udp.running = 0
        assert (await udp.ask({"action": 8}))["code"] == 0
        udp.close()


async def test_consume_over_qs_then_ack_over_http() -> None:
    async with qs_node() as node, http(node) as h:
        await h.push("q", "héllo".encode(), "text/plain")
        tcp = await Tcp.open(node)
        a = await tcp.ask({"action": 2, "queue": "q", "seq": 1})
        assert a["code"] == 0 and a["data"] == "héllo" and "data_encoding" not in a
        u = parse_uuid(a["uuid"])
        assert u is not None and a["msg_id"] == msg_key(u)
        await h.ack("q", a["uuid"])
        assert node.store.size("q") == 0
        assert "msg_id" not in (await tcp.ask({"action": 2, "queue": "q"}))  # nothing left: no msg_id
        await tcp.close()


async def test_consume_binary_body_comes_as_base64_and_compound_says_use_http() -> None:
    async with qs_node() as node, http(node) as h:
        await h.push("bin", b"\xff\x00\xfe")
        udp = Udp(node)
        a = await udp.ask({"action": 2, "queue": "bin"})
        assert (a["data"], a["data_encoding"]) == ("/wD+", "base64")
        await h.update_props("acc", {"accum": 0.01})
        await h.push("acc", b"a")
        await h.push("acc", b"b")
        await asyncio.sleep(0.05)
        a = await udp.ask({"action": 2, "queue": "acc"})
        assert a["code"] == -1 and "use HTTP" in a["reason"]
        assert node.store.size("acc") == 1
        m = await h.pull("acc", 0)
        assert m is not None and len(m.parts) == 2  # still there, retry intact, for HTTP
        udp.close()


async def test_confirm_by_uuid_and_unknown_ids() -> None:
    async with qs_node() as node, http(node) as h:
        await h.push("q", b"one")
        m = await h.pull("q", 0)
        assert m is not None
        tcp = await Tcp.open(node)
        a = await tcp.ask({"action": 3, "queue": "q", "msg_id": m.id, "seq": 2})
        assert (a["code"], a["confirmed"], a["seq"]) == (0, True, 2)
        assert node.store.size("q") == 0
        a = await tcp.ask({"action": 3, "queue": "q", "msg_id": m.id})  # twice: nothing held
        assert (a["code"], a["confirmed"]) == (0, False)
        a = await tcp.ask({"action": 3, "queue": "nosuch", "msg_id": m.id})
        assert (a["code"], a["confirmed"]) == (0, False)
        a = await tcp.ask({"action": 3, "queue": "q", "msg_id": "not-a-uuid"})
        assert a["code"] == -1 and "msg_id" in a["reason"]
        await tcp.close()


async def test_monitor_list_and_leader() -> None:
    async with qs_node() as node, http(node) as h:
        for name in ("apple", "grape", "pear"):
            await h.push(name, b"x")
        await h.push("apple", b"y")
        udp = Udp(node)
        for action in (4, 104):
            a = await udp.ask({"action": action, "queue": "apple", "seq": action})
            assert a["code"] == 0 and a["seq"] == action
            assert (a["size"], a["wait_status"], a["max_size"]) == (2, 1, None)
            assert a["node_id"] == a["leader_node_id"] == 1
        a = await udp.ask({"action": 4, "queue": "none"})
        assert (a["code"], a["size"], a["max_id"], a["wait_status"]) == (0, 0, 0, 0)
        assert node.manager.get("none") is None  # monitoring does not create a queue
        for action in (7, 107):
            a = await udp.ask({"action": action, "pattern": "ap"})
            assert a["queue_count"] == 2
            assert a["queue_list"] == [
                {"size": 2, "wait_status": 1, "name": "apple"},
                {"size": 1, "wait_status": 1, "name": "grape"},
            ]
        assert (await udp.ask({"action": 7}))["queue_count"] == 3
        a = await udp.ask({"action": 8, "seq": 1})
        assert (a["code"], a["leader_host"], a["leader_port"]) == (0, *node.qs_address)  # type: ignore[misc]
        udp.close()


async def test_list_is_capped_and_says_truncated() -> None:
    async with qs_node() as node:
        for i in range(1005):
            await node.manager.ensure(f"q{i:04}")
        tcp = await Tcp.open(node)
        a = await tcp.ask({"action": 7, "pattern": "q"})
        assert a["queue_count"] == 1005 and len(a["queue_list"]) == 1000 and a["truncated"] is True
        assert "truncated" not in await tcp.ask({"action": 7, "pattern": "q000"})
        await tcp.close()


async def test_udp_error_answer_echoing_a_request_near_the_limit_still_fits() -> None:
    async with qs_node(qs_udp_max=1024) as node:
        udp = Udp(node)
        req = b'{"action":99,"seq":5,"pad":"' + b"p" * (1024 - 40) + b'"}'
        assert len(req) <= 1024
        raw = await udp.ask_raw(req)
        assert len(raw) <= 1024
        assert json.loads(raw) == {"seq": 5, "action": 99, "code": -1, "reason": "invalid action 99"}
        udp.close()


async def test_tcp_half_close_still_answers_every_request_sent_then_closes(tmp_path: Path) -> None:
    # The durable store: each produce waits for its commit, so that most of them wait in the
    # backlog (2 in flight) when the end of the stream comes.
    async with qs_node(store="durable", data_dir=tmp_path / "data") as node:
        server = node._qs
        assert server is not None
        server.max_inflight = 2
        tcp = await Tcp.open(node)
        reqs = (json.dumps({"action": 1, "queue": "q", "data": "d", "retry": 5, "seq": i}) for i in range(20))
        await tcp.send("".join(reqs).encode())
        tcp.writer.write_eof()
        assert [(await tcp.answer())["seq"] for _ in range(20)] == list(range(20))
        assert await tcp.closed()
        assert node.store.size("q") == 20
