"""Deliveries whose client never got them go back to their queue, retry intact.

Both API servers find this out in a callback (a closed transport, a lost connection), where
nothing can be awaited: the put-back runs as a task owned here, and a server's close waits for
what is still running.
"""

from __future__ import annotations

import asyncio
import logging

from pylmq.core.manager import QueueManager
from pylmq.core.message import uuid_text
from pylmq.core.queue import Delivery
from pylmq.errors import LMQError

__all__ = ["Deliveries", "PutBacks"]

Deliveries = Delivery | tuple[Delivery, ...]
"""What one response carries: a pull's message, or a pull-many's messages."""

log = logging.getLogger("pylmq.api")


class PutBacks:
    def __init__(self, manager: QueueManager, api: str) -> None:
        self.manager = manager
        self.api = api  # "http" or "rpc", for the log
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, d: Deliveries) -> None:
        for one in d if isinstance(d, tuple) else (d,):
            task = asyncio.get_running_loop().create_task(self._put_back(one))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def wait(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the put-backs still running."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    async def _put_back(self, d: Delivery) -> None:
        mid = uuid_text(d.message.uuid)
        log.info("%s client left before message %s of %s was written: putting it back", self.api, mid, d.queue)
        try:
            await self.manager.put_back(d.queue, d.message.uuid)
        except LMQError as e:  # the queue was deleted meanwhile, say
            log.warning("%s: could not put back message %s of %s: %s", self.api, mid, d.queue, e.detail)
        except Exception:
            log.exception("%s: put back of message %s of %s failed", self.api, mid, d.queue)
