"""Helpers of the PostgresStore tests: a recorder of what a store tells its queue manager about
other nodes' changes, a way to wait for it without sleeping a fixed time, and one SQS action
sent to a node."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from pylmq.node import LMQNode
from pylmq.pgstore import PostgresStore

WAIT = 5.0
"""Upper bound of any wait for another store to hear of a change (normally milliseconds)."""


class Recorder:
    """Stands for the queue manager (pylmq.pgstore.store.RemoteEvents): records each event and
    wakes whoever waits for one."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []
        self._changed = asyncio.Condition()

    def _add(self, kind: str, arg: object) -> None:
        self.events.append((kind, arg))

        async def tell() -> None:
            async with self._changed:
                self._changed.notify_all()

        asyncio.get_running_loop().create_task(tell())

    def on_remote_queue_created(self, name: str) -> None:
        self._add("created", name)

    async def on_remote_queue_deleted(self, name: str) -> None:
        self._add("deleted", name)

    def refresh_props(self, names: Iterable[str] | None = None) -> None:
        self._add("props", None if names is None else list(names))

    def refresh_virtual(self) -> None:
        self._add("virtual", None)

    async def wait_for(self, kind: str, arg: object) -> None:
        async def seen() -> None:
            async with self._changed:
                await self._changed.wait_for(lambda: (kind, arg) in self.events)

        await asyncio.wait_for(seen(), WAIT)


@asynccontextmanager
async def opened(dsn: str, **kw: object) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(dsn, refresh_delay=0.01, **kw)  # type: ignore[arg-type]
    await store.open()
    try:
        yield store
    finally:
        await store.close()


async def sqs_call(session: aiohttp.ClientSession, node: LMQNode, action: str, params: dict[str, Any]) -> Any:
    """One SQS JSON-protocol action on ``node``, which must answer 200; its decoded answer."""
    assert node.sqs_address is not None
    host, port = node.sqs_address
    headers = {"Content-Type": "application/x-amz-json-1.0", "X-Amz-Target": f"AmazonSQS.{action}"}
    async with session.post(f"http://{host}:{port}/", data=json.dumps(params), headers=headers) as r:
        body = await r.read()
        assert r.status == 200, (r.status, body)
        return json.loads(body)
