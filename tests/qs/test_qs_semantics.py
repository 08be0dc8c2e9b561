"""queue_server's semantics through its protocol, on real sockets against a real node: delay,
ttl (queue_server's expiry rule), the retry-interval cycle, at-most-once, priority, virtual
fan-out, dead-letter provenance, and the msg_id mapping across the HTTP API."""

from __future__ import annotations

import asyncio

from pylmq.core.message import msg_key, parse_uuid
from pylmq.wire.qs import Produce
from tests.qs.qs_helpers import Tcp, Udp, clock_node, http, qs_node


async def test_produce_answers_the_key_of_the_record_and_drops_body_and_times() -> None:
    async with clock_node() as (node, clock):
        tcp = await Tcp.open(node)
        now = clock.now()
        a = await tcp.ask({"action": 1, "queue": "q", "data": "d", "seq": 11, "delay": now - 100, "retry": 3})
        assert set(a) == {"action", "queue", "seq", "code", "msg_id"}
        [record] = node.store.messages("q")
        assert a["msg_id"] == msg_key(record.uuid) and a["seq"] == 11
        # A past delay means now; the default ttl is a day after the message is due; retry N
        # is a redelivery interval with no limit on the count.
        assert record.ts == now and record.retry is None
        assert record.ext is not None and (record.ext.expires, record.ext.interval) == (now + 86400, 3.0)
        assert (await tcp.ask({"action": 4, "queue": "q"}))["max_id"] == a["msg_id"]
        # retry 0: at most once; its ttl changes nothing (one delivery whenever it comes).
        later = now + 50
        await tcp.ask({"action": 1, "queue": "once", "data": "d", "delay": later, "ttl": later + 1, "retry": 0})
        [record] = node.store.messages("once")
        assert record.ts == later
        assert record.ext is not None and record.ext.once and record.ext.expires is None
        await tcp.close()


async def test_delay_is_an_absolute_not_before_time() -> None:
    async with clock_node() as (node, clock):
        udp = Udp(node)
        a = await udp.ask({"action": 1, "queue": "q", "data": "later", "delay": clock.now() + 10, "retry": 5})
        assert a["code"] == 0
        assert "msg_id" not in await udp.ask({"action": 2, "queue": "q"})
        clock.advance(9.5)
        assert "msg_id" not in await udp.ask({"action": 2, "queue": "q"})
        clock.advance(0.5)
        got = await udp.ask({"action": 2, "queue": "q"})
        assert got["data"] == "later"
        udp.close()


async def test_retry_interval_cycle_as_queue_servers_own_test() -> None:
    # Produce with retry=2, consume; nothing 1 s later; redelivered once the 2 s interval has
    # passed; confirmed; then nothing.
    async with clock_node() as (node, clock):
        tcp = await Tcp.open(node)
        p = await tcp.ask({"action": 1, "queue": "q", "data": "cycle", "retry": 2})
        first = await tcp.ask({"action": 2, "queue": "q"})
        assert first["data"] == "cycle"
        clock.advance(1)
        assert "msg_id" not in await tcp.ask({"action": 2, "queue": "q"})
        clock.advance(1)
        again = await tcp.ask({"action": 2, "queue": "q"})
        assert again["data"] == "cycle"
        assert len({p["msg_id"], first["msg_id"], again["msg_id"]}) == 3  # an id per delivery
        # The first delivery's id no longer names anything: nothing confirmed.
        stale = await tcp.ask({"action": 3, "queue": "q", "msg_id": first["msg_id"]})
        assert (stale["code"], stale["confirmed"]) == (0, False)
        ok = await tcp.ask({"action": 3, "queue": "q", "msg_id": again["msg_id"]})
        assert (ok["code"], ok["confirmed"]) == (0, True)
        clock.advance(10)
        assert "msg_id" not in await tcp.ask({"action": 2, "queue": "q"})
        assert node.store.size("q") == 0
        await tcp.close()


async def test_retry_interval_cycle_on_the_real_clock() -> None:
    async with qs_node() as node:
        tcp = await Tcp.open(node)
        await tcp.ask({"action": 1, "queue": "q", "data": "real", "retry": 1})
        assert (await tcp.ask({"action": 2, "queue": "q"}))["data"] == "real"
        assert "msg_id" not in await tcp.ask({"action": 2, "queue": "q"})
        await asyncio.sleep(1.1)
        again = await tcp.ask({"action": 2, "queue": "q"})
        assert again["data"] == "real"
        assert (await tcp.ask({"action": 3, "queue": "q", "msg_id": again["msg_id"]}))["confirmed"] is True
        assert "msg_id" not in await tcp.ask({"action": 2, "queue": "q"})
        await tcp.close()


async def test_retry_zero_is_at_most_once_and_needs_no_confirm() -> None:
    async with clock_node() as (node, clock):
        udp = Udp(node)
        await udp.ask({"action": 1, "queue": "q", "data": "once", "retry": 0})
        assert (await udp.ask({"action": 2, "queue": "q"}))["data"] == "once"
        for _ in range(3):
            clock.advance(100)
            assert "msg_id" not in await udp.ask({"action": 2, "queue": "q"})
        assert node.store.size("q") == 0
        udp.close()


async def test_expired_never_delivered_is_delivered_once_expired_after_delivery_is_dropped() -> None:
    async with clock_node() as (node, clock):
        tcp = await Tcp.open(node)
        now = clock.now()
        # Never delivered before its ttl: delivered once all the same (at-least-once wins)...
        await tcp.ask({"action": 1, "queue": "late", "data": "a", "ttl": now + 5, "retry": 2})
        clock.advance(10)
        assert (await tcp.ask({"action": 2, "queue": "late"}))["data"] == "a"
        # ...and never again: that delivery was its last.
        clock.advance(10)
        assert "msg_id" not in await tcp.ask({"action": 2, "queue": "late"})
        assert node.store.size("late") == 0
        # Delivered before its ttl: redelivered while the interval ends before the ttl, then
        # the delivery whose interval reaches the ttl is the last.
        now = clock.now()
        await tcp.ask({"action": 1, "queue": "q", "data": "b", "ttl": now + 5, "retry": 2})
        seen = 0
        for _ in range(6):
            if "msg_id" in await tcp.ask({"action": 2, "queue": "q"}):
                seen += 1
            clock.advance(2)
        assert seen == 3  # at now, now+2 and now+4 (whose deadline now+6 passes the ttl)
        assert node.store.size("q") == 0
        await tcp.close()


async def test_priority_among_due_messages() -> None:
    async with clock_node() as (node, clock):
        tcp = await Tcp.open(node)
        for data, prio in (("low", 0), ("high", 9), ("mid", 4), ("high2", 9)):
            await tcp.ask({"action": 1, "queue": "q", "data": data, "priority": prio, "retry": 3})
            clock.advance(0.001)  # records of one instant are ordered by uuid, as in LMQ
        order = [(await tcp.ask({"action": 2, "queue": "q"}))["data"] for _ in range(4)]
        assert order == ["high", "high2", "mid", "low"]
        await tcp.close()


async def test_virtual_queue_fan_out() -> None:
    async with clock_node() as (node, _clock):
        await node.manager.set_virtual("v", ["a", "b"])
        udp = Udp(node)
        ans = await udp.ask({"action": 1, "queue": "v", "data": "all", "retry": 1, "seq": 4})
        assert ans["code"] == 0 and ans["seq"] == 4
        ids = ans["msg_ids"]
        assert set(ids) == {"a", "b"} and ans["msg_id"] == ids["b"]  # the last member's
        for q in ("a", "b"):
            [record] = node.store.messages(q)
            assert msg_key(record.uuid) == ids[q]
        assert node.manager.get("v") is None  # no queue of the virtual name
        got = await udp.ask({"action": 2, "queue": "v"})
        assert got["code"] == -1 and "pull from its queues a, b" in got["reason"]
        assert (await udp.ask({"action": 4, "queue": "v"}))["code"] == -1
        assert (await udp.ask({"action": 2, "queue": "a"}))["data"] == "all"
        udp.close()


async def test_dead_letter_provenance_in_a_consume() -> None:
    async with clock_node() as (node, clock):
        await node.manager.update_props("q", {"retry": 0, "timeout": 5.0, "dead_letter": "dlq"})
        async with http(node) as h:
            await h.push("q", b"doomed")
            m = await h.pull("q", 0)
            assert m is not None
        clock.advance(6)
        tcp = await Tcp.open(node)
        assert "msg_id" not in await tcp.ask({"action": 2, "queue": "q"})  # moves it to dlq
        got = await tcp.ask({"action": 2, "queue": "dlq"})
        assert got["data"] == "doomed"
        assert (got["origin"], got["failures"], got["last_delivery"]) == ("q", 1, clock.now() - 6)
        await tcp.close()


async def test_produce_over_qs_pull_over_http_confirm_over_qs_by_uuid_and_by_msg_id() -> None:
    async with qs_node() as node, http(node) as h:
        tcp = await Tcp.open(node)
        await tcp.ask({"action": 1, "queue": "x", "data": "héllo", "retry": 30})
        await tcp.ask({"action": 1, "queue": "x", "data": "two", "retry": 30})
        m = await h.pull("x", 0)
        assert m is not None and m.body == "héllo".encode() and m.content_type == "text/plain; charset=utf-8"
        a = await tcp.ask({"action": 3, "queue": "x", "msg_id": m.id})
        assert a["confirmed"] is True
        m2 = await h.pull("x", 0)
        assert m2 is not None and m2.body == b"two"
        u = parse_uuid(m2.id)
        assert u is not None
        a = await tcp.ask({"action": 3, "queue": "x", "msg_id": msg_key(u)})
        assert a["confirmed"] is True
        assert node.store.size("x") == 0
        await tcp.close()


async def test_confirm_of_a_produce_id_or_an_unknown_key_confirms_nothing() -> None:
    async with qs_node() as node:
        tcp = await Tcp.open(node)
        p = await tcp.ask({"action": 1, "queue": "q", "data": "x", "retry": 5})
        a = await tcp.ask({"action": 3, "queue": "q", "msg_id": p["msg_id"]})
        assert (a["code"], a["confirmed"]) == (0, False)  # not delivered: nothing to confirm
        a = await tcp.ask({"action": 3, "queue": "q", "msg_id": 12345})
        assert (a["code"], a["confirmed"]) == (0, False)
        assert node.store.size("q") == 1
        await tcp.close()


async def test_produce_on_an_accumulating_queue_is_refused() -> None:
    async with qs_node() as node:
        await node.manager.update_props("acc", {"accum": 1.0})
        udp = Udp(node)
        a = await udp.ask({"action": 1, "queue": "acc", "data": "x"})
        assert a["code"] == -1 and "accum" in a["reason"]
        assert node.store.size("acc") == 0
        udp.close()


async def test_option_refusals_name_queue_servers_fields() -> None:
    async with clock_node() as (node, clock):
        udp = Udp(node)
        far = clock.now() + 400 * 86400  # beyond the longest span a message may wait or live
        for req, field in (
            ({"delay": far, "ttl": far + 10}, "'delay'"),
            ({"ttl": far, "retry": 1}, "'ttl'"),
            ({"retry": 10**8}, "'retry'"),
        ):
            a = await udp.ask({"action": 1, "queue": "q", "data": "x", **req})
            assert a["code"] == -1 and field in a["reason"], a
        assert node.store.size("q") == 0
        udp.close()


async def test_max_id_memory_is_bounded_by_the_queues_that_exist() -> None:
    async with qs_node() as node:
        server = node._qs
        assert server is not None
        api = server.api
        for i in range(1100):
            await api.handle(Produce(f"q{i}", "x", None, None, 1, 0))
        for i in range(1100):
            await node.manager.delete(f"q{i}")
        assert len(api._max_id) == 1100
        await api.handle(Produce("last", "x", None, None, 1, 0))
        assert set(api._max_id) == {"last"}


async def test_partly_received_requests_are_charged_to_the_nodes_budget() -> None:
    async with qs_node(max_buffered_bytes=4096) as node:
        tcp = await Tcp.open(node)
        # A whole request, then one not whole (held) in the same write: the first is answered.
        await tcp.send(b'{"action":8,"seq":1} {"action":1,"queue":"q","data":"' + b"x" * 8000)
        assert (await tcp.answer())["seq"] == 1
        a = await tcp.answer()
        assert a["code"] == -1 and "max_buffered_bytes" in a["reason"]
        assert await tcp.closed()
        budget = node.budget()
        assert budget.used == 0
        assert node.manager.get("q") is None


async def test_at_most_once_message_too_large_for_udp_is_kept_for_tcp() -> None:
    async with clock_node(qs_udp_max=1024) as (node, _clock):
        tcp = await Tcp.open(node)
        await tcp.ask({"action": 1, "queue": "q", "data": "z" * 3000, "retry": 0})
        udp = Udp(node)
        a = await udp.ask({"action": 2, "queue": "q"})
        assert (a["code"], a["reason"]) == (-1, "too large, use TCP")
        [record] = node.store.messages("q")
        assert record.ext is not None and record.ext.attempts == 0  # not counted as delivered
        assert (await tcp.ask({"action": 2, "queue": "q"}))["data"] == "z" * 3000  # its one delivery
        udp.close()
        await tcp.close()
