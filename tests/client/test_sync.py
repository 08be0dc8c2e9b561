"""HttpClient and RpcClient (blocking) against a node on a background thread."""

from __future__ import annotations

import asyncio
import pickle
import socket
import threading

import pytest

from pylmq.client import AsyncHttpClient, AsyncRpcClient, HttpClient, Part, RpcClient
from pylmq.errors import InvalidRegex, MessageNotFound, QueueNotFound, Unreachable
from pylmq.node.testing import NodeThread, refused_address, refused_url


def test_http_push_pull_ack_round_trip(sync_http: HttpClient) -> None:
    assert sync_http.push("q", b"hello", "text/plain") == "no"
    msg = sync_http.pull("q", timeout=0)
    assert msg is not None and msg.body == b"hello" and msg.content_type == "text/plain" and msg.retry == 2
    sync_http.ack("q", msg.id)
    assert sync_http.pull("q", timeout=0.05) is None


def test_http_keeps_one_connection_across_calls(sync_http: HttpClient) -> None:
    sync_http.push("q", b"x")
    first = sync_http._conn
    sync_http.push("q", b"y")
    assert first is not None and sync_http._conn is first


def test_http_compound_in_both_formats(sync_http: HttpClient) -> None:
    sync_http.update_props("acc", {"accum": 0.05})
    for cf in ("multipart", "msgpack"):
        sync_http.push("acc", b"one", "text/plain")
        sync_http.push("acc", b"two")
        msg = sync_http.pull("acc", timeout=5, cf=cf)
        assert msg is not None and msg.type == "compound", cf
        assert msg.parts == (
            Part({"content-type": "text/plain"}, b"one"),
            Part({"content-type": "application/octet-stream"}, b"two"),
        ), cf
        sync_http.ack("acc", msg.id)


def test_http_errors_map_to_the_exception_tree(sync_http: HttpClient) -> None:
    sync_http.push("q", b"x")
    with pytest.raises(MessageNotFound):
        sync_http.ack("q", "00000000-0000-4000-8000-000000000000")
    with pytest.raises(QueueNotFound):
        sync_http.delete_queue("never-made")
    with pytest.raises(InvalidRegex):
        sync_http.push_all("(", b"x")
    assert sync_http.push("q", b"still usable") == "no"


def test_http_failover_to_the_second_url(node_thread: NodeThread) -> None:
    with HttpClient([refused_url(), node_thread.http_url]) as c:
        assert c.push("q", b"x") == "no"
        assert c.base_url == node_thread.http_url


def test_http_no_node_reachable_raises_unreachable() -> None:
    with HttpClient(refused_url()) as c, pytest.raises(Unreachable):
        c.pull("q", timeout=0)


def test_http_client_pickles_without_its_connection(sync_http: HttpClient) -> None:
    sync_http.push("q", b"x")
    copy = pickle.loads(pickle.dumps(sync_http))
    assert copy._conn is None
    msg = copy.pull("q", timeout=0)
    assert msg is not None and msg.body == b"x"
    copy.close()


def test_http_reconnects_after_the_node_closes_the_connection(sync_http: HttpClient) -> None:
    sync_http.push("q", b"x")
    assert sync_http._conn is not None
    sync_http._conn.sock.shutdown(socket.SHUT_RDWR)  # as if the node had dropped the idle connection
    msg = sync_http.pull("q", timeout=0)  # GET: sent again on a new connection
    assert msg is not None and msg.body == b"x"


def test_rpc_push_pull_done_round_trip(sync_rpc: RpcClient) -> None:
    assert sync_rpc.push("q", b"data") == "ok"
    msg = sync_rpc.pull("q", 0)
    assert msg is not None and msg.content == b"data" and msg.type == "normal"
    sync_rpc.done("q", msg.id)
    assert sync_rpc.pull("q", 0.05) is None


def test_rpc_package_of_pushed_values(sync_rpc: RpcClient) -> None:
    sync_rpc.update_props("pk", {"pack": 0.05})
    assert sync_rpc.push("pk", "a") == "packing started"
    assert sync_rpc.push("pk", "b") == "packed"
    msg = sync_rpc.pull("pk", 5)
    assert msg is not None and msg.type == "compound" and msg.content == ["a", "b"]


def test_rpc_errors_map_to_the_exception_tree(sync_rpc: RpcClient) -> None:
    sync_rpc.push("q", b"x")
    with pytest.raises(MessageNotFound):
        sync_rpc.done("q", "00000000-0000-4000-8000-000000000000")
    with pytest.raises(InvalidRegex):
        sync_rpc.pull_any("(", 0)
    assert sync_rpc.push("q", b"still usable") == "ok"


def test_rpc_failover_to_the_second_address(node_thread: NodeThread) -> None:
    with RpcClient(*refused_address(), fallbacks=[node_thread.rpc_address]) as c:
        assert c.push("q", 1) == "ok"
        assert c.address == node_thread.rpc_address


def test_rpc_no_node_reachable_raises_unreachable() -> None:
    with RpcClient(*refused_address()) as c, pytest.raises(Unreachable):
        c.push("q", 1)


def test_rpc_client_pickles_without_its_socket(sync_rpc: RpcClient) -> None:
    sync_rpc.push("q", 42)
    copy = pickle.loads(pickle.dumps(sync_rpc))
    assert copy._sock is None
    msg = copy.pull("q", 0)
    assert msg is not None and msg.content == 42
    copy.close()


def test_rpc_after_node_restart_raises_then_reconnects_to_fallback(node_thread: NodeThread) -> None:
    with NodeThread() as second, RpcClient(*node_thread.rpc_address, fallbacks=[second.rpc_address]) as c:
        c.push("q", 1)
        node_thread.stop()
        with pytest.raises(Unreachable):
            c.push("q", 2)  # the node went away under an open connection
        assert c.push("q", 3) == "ok"  # the next call connects to the fallback
        assert c.address == second.rpc_address


def test_http_push_on_a_dropped_connection_is_not_sent_twice(sync_http: HttpClient) -> None:
    sync_http.push("q", b"x")
    assert sync_http._conn is not None
    sync_http._conn.sock.shutdown(socket.SHUT_RDWR)
    with pytest.raises(Unreachable):
        sync_http.push("q", b"y")  # a POST may have been carried out: the caller decides
    assert sync_http.push("q", b"z") == "no"  # and the next call connects again


def test_async_clients_serve_one_event_loop_after_another(node_thread: NodeThread) -> None:
    # Spark tasks run asyncio.run per batch with the same client object.
    http = AsyncHttpClient(node_thread.http_url)
    rpc = AsyncRpcClient(*node_thread.rpc_address)

    async def batch(i: int) -> tuple[str, str]:
        async with http, rpc:
            return await http.push("q", b"x"), await rpc.push("q", i)

    assert asyncio.run(batch(1)) == ("no", "ok")
    assert asyncio.run(batch(2)) == ("no", "ok")


def test_http_pull_waits_for_a_push_from_another_thread(node_thread: NodeThread, sync_http: HttpClient) -> None:
    def push_later() -> None:
        with HttpClient(node_thread.http_url) as other:
            other.push("wait", b"late")

    pusher = threading.Thread(target=push_later)
    pusher.start()
    msg = sync_http.pull("wait", timeout=10)
    pusher.join()
    assert msg is not None and msg.body == b"late"


def test_rpc_pull_waits_for_a_push_from_another_thread(node_thread: NodeThread, sync_rpc: RpcClient) -> None:
    def push_later() -> None:
        with RpcClient(*node_thread.rpc_address) as other:
            other.push("wait", "late")

    pusher = threading.Thread(target=push_later)
    pusher.start()
    msg = sync_rpc.pull("wait", 10)
    pusher.join()
    assert msg is not None and msg.content == "late"


def test_http_and_rpc_push_many_and_pull_many(sync_http: HttpClient, sync_rpc: RpcClient) -> None:
    assert sync_http.push_many("bq", [b"a", "b", ("application/json", b"{}")]) == 3
    got = sync_http.pull_many("bq", 10, timeout=0)
    assert getattr(got, "queue_size", None) == 3
    assert [(m.body, m.content_type) for m in got] == [
        (b"a", "application/octet-stream"),
        (b"b", "text/plain; charset=utf-8"),
        (b"{}", "application/json"),
    ]
    for m in got:
        sync_http.ack(m.queue, m.id)
    assert sync_http.pull_many("bq", 10, timeout=0) == []
    assert sync_rpc.push_many("rq", [1, "two", b"3"]) == 3
    assert [m.content for m in sync_rpc.pull_many("rq", 2, timeout=0)] == [1, "two"]
