"""Admission of one node's Mnesia transactions on one queue, so that they do not fight over
Mnesia's locks.

Every ``lmq_lib`` call on messages is a Mnesia transaction on the queue's table. Its locks:

- ``enqueue`` writes one new record: a write lock on that record's key only (a new, unique
  ``{timestamp, uuid}``), so enqueues never conflict with each other;
- ``dequeue`` (``mnesia:first``) and ``done`` / ``retain`` / ``release`` / ``put_back``
  (``mnesia:foldr`` to find the uuid) read-lock the whole table, then write-lock records. Two of
  them conflict with each other, and with any enqueue in flight.

Mnesia resolves a conflict by making the younger transaction wait or restart, and a restart
first sleeps a random time that grows with each retry (tens of milliseconds after a few). Run
concurrently, as a node's requests naturally are, a queue's transactions conflict on nearly
every cycle: the throughput collapses and the latency tail is made of those sleeps. They also
make an Erlang node's queue process, which runs the same transactions on the same table one at
a time, restart and wait behind them.

A :class:`QueueGate` per queue therefore admits either any number of enqueues (``shared``) or
one table transaction (``exclusive``). It is phase-fair: an exclusive request waiting holds
back later shared ones, and when it is done every shared request then waiting goes in at once,
before the next exclusive one. So neither kind starves, and enqueues go in groups. An Erlang
LMQ node gets the same effect from its queue process, which runs all of a queue's transactions
(enqueues too) one at a time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

__all__ = ["QueueGate"]


class QueueGate:
    """Phase-fair: all the shared requests waiting go in together, then one exclusive, in turn."""

    __slots__ = ("_exclusive", "_shared", "_waiting_exclusive", "_waiting_shared")

    def __init__(self) -> None:
        self._shared = 0
        self._exclusive = False
        self._waiting_shared: list[asyncio.Future[None]] = []
        self._waiting_exclusive: deque[asyncio.Future[None]] = deque()

    @property
    def idle(self) -> bool:
        """Nobody holds or waits for the gate (it can be dropped)."""
        return not (self._shared or self._exclusive or self._waiting_shared or self._waiting_exclusive)

    def _admit_shared(self) -> bool:
        waiting, self._waiting_shared = self._waiting_shared, []
        for fut in waiting:
            if not fut.done():  # not given up (cancelled) while waiting
                self._shared += 1
                fut.set_result(None)
        return self._shared > 0

    def _admit_exclusive(self) -> bool:
        while self._waiting_exclusive:
            fut = self._waiting_exclusive.popleft()
            if not fut.done():
                self._exclusive = True
                fut.set_result(None)
                return True
        return False

    def _admit(self, after_exclusive: bool) -> None:
        """The gate is free: after an exclusive phase the waiting shared ones go first (all of
        them), after a shared phase the next exclusive one, each falling back on the other."""
        if self._exclusive or self._shared:
            return
        if after_exclusive:
            self._admit_shared() or self._admit_exclusive()
        else:
            self._admit_exclusive() or self._admit_shared()

    async def _acquire(self, exclusive: bool) -> None:
        if exclusive:
            if not (self._exclusive or self._shared or self._waiting_shared or self._waiting_exclusive):
                self._exclusive = True
                return
        elif not (self._exclusive or self._waiting_exclusive):
            self._shared += 1  # joins the shared phase running (or starts one)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        (self._waiting_exclusive.append if exclusive else self._waiting_shared.append)(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release(exclusive)  # admitted just as it was cancelled: pass it on
            else:
                fut.cancel()
                self._admit(not exclusive)  # it may have been next: let the others in
            raise

    def _release(self, exclusive: bool) -> None:
        if exclusive:
            self._exclusive = False
        else:
            self._shared -= 1
        self._admit(exclusive)

    @asynccontextmanager
    async def shared(self) -> AsyncIterator[None]:
        await self._acquire(False)
        try:
            yield
        finally:
            self._release(False)

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[None]:
        await self._acquire(True)
        try:
            yield
        finally:
            self._release(True)
