"""pylmq.client's queue_server clients (blocking and asyncio) on both transports, against a
real node; resend rules against a silent UDP peer."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from pylmq.client import AsyncQsClient, QsClient
from pylmq.client._qs import Transport
from pylmq.errors import QsRefused, Unreachable
from pylmq.node.testing import NodeThread, local_options
from tests.qs.qs_helpers import qs_address, qs_node

TRANSPORTS: list[Transport] = ["tcp", "udp"]


@pytest.fixture(scope="module")
def node() -> Iterator[NodeThread]:
    with NodeThread(local_options(qs=("127.0.0.1", 0))) as n:
        yield n


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sync_client_cycle(node: NodeThread, transport: Transport) -> None:
    q = f"sync-{transport}"
    with QsClient(*qs_address(node.node), transport=transport) as c:
        ans = c.produce(q, "hello", retry=30)
        assert isinstance(ans["msg_id"], int)
        m = c.consume(q)
        assert m is not None and m.data == "hello" and m.body() == b"hello" and m.uuid
        assert c.consume(q) is None
        assert c.monitor(q)["size"] == 1
        assert c.confirm(q, m.msg_id) is True
        assert c.confirm(q, m.msg_id) is False
        assert c.monitor(q, local=True)["size"] == 0
        assert q in [e["name"] for e in c.list_queues(q)["queue_list"]]
        assert c.leader()["leader_port"] == qs_address(node.node)[1]
        with pytest.raises(QsRefused, match="delay must be before ttl") as e:
            c.produce(q, "x", delay=2_000_000_000, ttl=1_999_999_999)
        assert e.value.answer["code"] == -1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_async_client_concurrent_calls_match_by_seq(transport: Transport) -> None:
    async with qs_node() as node, AsyncQsClient(*qs_address(node), transport=transport) as c:
        answers = await asyncio.gather(*(c.monitor(f"m{i}") for i in range(30)))
        assert [a["queue"] for a in answers] == [f"m{i}" for i in range(30)]
        ans = await c.produce("q", "data", retry=5)
        m = await c.consume("q")
        assert m is not None and m.msg_id != 0 and m.data == "data"
        assert await c.confirm("q", m.uuid or "") is True
        raw = await c.request({"action": 5, "queue": "q"})  # request() returns any answer
        assert raw["code"] == -1 and "not supported" in raw["reason"]
        assert ans["code"] == 0


class SilentUdp:
    """A UDP socket that counts datagrams and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address: tuple[str, int] = self.sock.getsockname()

    def count(self) -> int:
        n = 0
        try:
            while True:
                self.sock.recv(65535)
                n += 1
        except TimeoutError:
            return n


def test_sync_udp_never_resends_a_produce_or_a_consume() -> None:
    peer = SilentUdp()
    with QsClient(*peer.address, transport="udp", request_timeout=0.1, udp_resends=2) as c:
        for call in (lambda: c.produce("q", "x"), lambda: c.consume("q")):
            t0 = time.monotonic()
            with pytest.raises(Unreachable):
                call()
            assert time.monotonic() - t0 < 1
            assert peer.count() == 1
        with pytest.raises(Unreachable):
            c.monitor("q")
        assert peer.count() == 3  # monitor changes nothing: sent again twice
    peer.sock.close()


async def test_async_udp_never_resends_a_produce() -> None:
    peer = SilentUdp()
    async with AsyncQsClient(*peer.address, transport="udp", request_timeout=0.1, udp_resends=2) as c:
        with pytest.raises(Unreachable):
            await c.produce("q", "x")
        assert await asyncio.to_thread(peer.count) == 1
        with pytest.raises(Unreachable):
            await c.leader()
        assert await asyncio.to_thread(peer.count) == 3
    peer.sock.close()


def test_client_refuses_an_unknown_transport() -> None:
    with pytest.raises(ValueError, match="transport"):
        QsClient(transport="sctp")  # type: ignore[arg-type]
