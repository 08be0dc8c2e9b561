"""One queue: its pull waiters (served in arrival order) and its wake-up timer.

Like LMQ's ``lmq_queue`` process, a :class:`Queue` owns the clients waiting on it. Messages
themselves live in the store; the queue asks the store to dequeue when there is a waiter and
the store's first record is deliverable, and sleeps until the first record's deadline
otherwise. Wake-ups also come from outside (:meth:`Queue.notify`): a push on this node, or a
``new_message`` event from another node of the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from pylmq.core.clock import Clock, SystemClock, Timer
from pylmq.core.message import Item, PushOptions, StoredMessage
from pylmq.core.props import Props
from pylmq.core.store import Store
from pylmq.core.table import AccumResult
from pylmq.errors import MessageNotFound

__all__ = ["Delivery", "PropsSource", "Queue", "QueueObserver", "Waiter"]

log = logging.getLogger("pylmq.queue")

_NO_OPTIONS = PushOptions()

REPLY_CHUNK = 500  # replies of a batch done before other tasks get a turn
RETRY_AFTER_ERROR = 0.5  # seconds before waiters are served again after the store failed


@dataclass(slots=True, frozen=True)
class Delivery:
    """A message handed to a client: the queue it came from and the processing record."""

    queue: str
    message: StoredMessage


class QueueObserver(Protocol):
    """Receives the events that metrics and cluster broadcast care about."""

    def on_push(self, queue: str) -> None: ...

    def on_pull(self, queue: str, retention: float) -> None: ...

    def on_delete(self, queue: str) -> None:
        """The queue is gone (here or elsewhere in the cluster): drop what is kept for it."""
        ...


class PropsSource(Protocol):
    """Where a queue's effective props come from when they are not given outright: asked again
    when :attr:`props_version` has moved (the default list changed), else kept."""

    props_version: int

    def props_of(self, name: str) -> Props: ...


class Waiter:
    """A client waiting for a message; one waiter may wait on several queues (pull-any)."""

    __slots__ = ("future", "queues")

    def __init__(self, future: asyncio.Future[Delivery | None]) -> None:
        self.future = future
        self.queues: list[Queue] = []

    @property
    def live(self) -> bool:
        return not self.future.done()

    def finish(self, result: Delivery | None) -> None:
        if not self.future.done():
            self.future.set_result(result)
        for q in self.queues:
            q._waiters.pop(self, None)
        self.queues.clear()


async def _retain(store: Store, timeout: float, queue: str, uuid: bytes) -> bool:
    return await store.retain(queue, uuid, timeout)


class Queue:
    def __init__(
        self,
        name: str,
        store: Store,
        props: Props | PropsSource,
        observer: QueueObserver | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.name = name
        self.store = store
        self._source = props if not isinstance(props, Props) else None
        self._props = props if isinstance(props, Props) else None
        self._props_version = -1
        self.observer = observer
        self.clock: Clock = clock or SystemClock()
        # dict as an ordered set: arrival order, O(1) removal of a waiter that gave up.
        self._waiters: dict[Waiter, None] = {}
        self._serving: asyncio.Task[None] | None = None
        self._timer: Timer | None = None
        self._closed = False
        # Whether this queue has held message groups (docs/message-options.md#message-groups):
        # then an ack may free a group's next record, and waiters are told.
        self.grouped = False

    @property
    def props(self) -> Props:
        """Effective props; from a source they are computed at first use and kept until the
        source's version moves, so a push does not match the default list's regexes again."""
        src = self._source
        if src is not None and (self._props is None or self._props_version != src.props_version):
            self._props_version = src.props_version
            self._props = src.props_of(self.name)
        assert self._props is not None
        return self._props

    @props.setter
    def props(self, value: Props) -> None:
        self._props = value
        if self._source is not None:
            self._props_version = self._source.props_version

    # -- client operations ------------------------------------------------------------------

    def _dead_letter(self, props: Props) -> str | None:
        """Where exhausted messages go: None for LMQ's discard (a default list's dead_letter
        that names the queue itself means none)."""
        dl = props.dead_letter
        return None if dl == self.name else dl

    async def _enqueue(self, item: Item, props: Props) -> AccumResult:
        if props.dead_letter is not None and props.accum <= 0 and self._dead_letter(props) is not None:
            # Every push gets an ext here, so that a dead letter's failures are counted.
            await self.store.push(self.name, item, props.retry, _NO_OPTIONS, track=True)
            return "no"
        return await self.store.enqueue(self.name, item, props.retry, props.accum)

    async def push(self, item: Item) -> AccumResult:
        props = self.props
        result = await self._enqueue(item, props)
        # The message is in the store from here on, whether or not its client waits for the
        # commit: waiters learn of it now (a delivery waits for the commit itself).
        if self.observer is not None:
            self.observer.on_push(self.name)
        self.notify()
        await self.store.barrier()
        return result

    async def push_many(self, items: Sequence[Item]) -> list[AccumResult]:
        """Push every item in order, then wait for one commit covering them all (one group on the
        durable store, instead of one round trip through the store per message)."""
        props = self.props
        results: list[AccumResult] = []
        try:
            for item in items:
                results.append(await self._enqueue(item, props))
                if self.observer is not None:
                    self.observer.on_push(self.name)
        finally:
            # Those already in the store are deliverable, also when a later one failed.
            if results:
                self.notify()
        await self.store.barrier()
        return results

    async def push_with(self, item: Item, options: PushOptions) -> bytes:
        """Push with per-message options (checked by the caller), telling waiters; no commit
        awaited (the caller awaits one for all the queues it pushes to). The record's uuid."""
        props = self.props
        track = options.track or self._dead_letter(props) is not None
        uuid = await self.store.push(self.name, item, props.retry, options, track=track)
        if options.group is not None:
            self.grouped = True
        if self.observer is not None:
            self.observer.on_push(self.name)
        self.notify()
        return uuid

    async def try_take(self) -> Delivery | None:
        """Dequeue at once if a record is deliverable (no waiting; used by pull and pull-any)."""
        props = self.props
        if props.dead_letter is None:
            got = await self.store.dequeue(self.name, props.timeout)
        else:
            # SQS's rule (a queue with an ``sqs`` prop): a dead-letter queue that was deleted is
            # not made again by a message moving there; the message stays and is received again.
            hold = bool(props.sqs)
            got = await self.store.dequeue(self.name, props.timeout, self._dead_letter(props), hold=hold)
        if got is None:
            return None
        msg, retention = got
        if msg.ext is not None and msg.ext.group is not None:
            self.grouped = True  # also for groups recovered from the store
        if self.observer is not None:
            self.observer.on_pull(self.name, retention)
        return Delivery(self.name, msg)

    async def take_in_group(self, group: str, after: bytes) -> Delivery | None:
        """The next message of ``group`` after those in processing (see
        :meth:`Store.dequeue_in_group`), for a pull that has just taken the group's head and
        then ``after`` (the uuid of the group's message it took last)."""
        got = await self.store.dequeue_in_group(self.name, group, self.props.timeout, after)
        if got is None:
            return None
        msg, retention = got
        if self.observer is not None:
            self.observer.on_pull(self.name, retention)
        return Delivery(self.name, msg)

    def has_waiters(self) -> bool:
        return any(w.live for w in self._waiters)

    def add_waiter(self, waiter: Waiter) -> None:
        if self._closed or waiter in self._waiters:
            return  # deleted meanwhile (no one would ever serve it here), or already here
        self._waiters[waiter] = None
        waiter.queues.append(self)
        self.notify()

    async def ack(self, uuid: bytes) -> None:
        ok = await self.store.done(self.name, uuid)
        if self.grouped:
            self.notify()
        await self._settle(ok)

    # Each change is applied before its commit is awaited, so waiters are told at once: a
    # client that leaves during the commit must not leave them asleep.

    async def nack(self, uuid: bytes) -> None:
        ok = await self.store.release(self.name, uuid)
        self.notify()
        await self._settle(ok)

    async def ext(self, uuid: bytes, timeout: float | None = None) -> None:
        """A new deadline ``timeout`` seconds from now (None: the queue's timeout)."""
        # timeout is read at each ext: a property change applies to messages in flight.
        ok = await self.store.retain(self.name, uuid, self.props.timeout if timeout is None else timeout)
        self.notify()
        await self._settle(ok)

    async def put_back(self, uuid: bytes) -> bool:
        ok = await self.store.put_back(self.name, uuid)
        self.notify()
        await self.store.barrier()
        return ok

    async def reply_many(self, reply: str, uuids: Sequence[bytes]) -> list[bool]:
        """``ack``, ``nack`` or ``ext`` for each uuid, in order; whether each was in processing.
        One barrier for the whole batch: every change is applied first, then one group commit
        makes them all durable (a loop of single replies would wait for one commit each)."""
        store, name = self.store, self.name
        op: Callable[[str, bytes], Awaitable[bool]]
        if reply == "ack":
            op = store.done
        elif reply == "nack":
            op = store.release
        elif reply == "ext":
            op = partial(_retain, store, self.props.timeout)  # read once: one batch, one deadline
        else:
            raise ValueError(f"reply must be ack, nack or ext, got {reply!r}")
        done: list[bool] = []
        for i, u in enumerate(uuids):
            if i and not i % REPLY_CHUNK:
                await asyncio.sleep(0)  # a long batch lets other requests in between
            done.append(await op(name, u))
        if reply != "ack" or self.grouped:
            self.notify()
        if any(done):
            await store.barrier()
        return done

    async def claim(self, uuids: Sequence[bytes], max_bytes: int | None = None) -> list[StoredMessage | None]:
        """Take messages back by the uuid of their delivery (see :meth:`Store.claim`), each
        with a deadline of the queue's timeout; one barrier for the batch."""
        got = await self.store.claim(self.name, uuids, self.props.timeout, max_bytes)
        if any(m is not None for m in got):
            await self.store.barrier()
        return got

    async def _settle(self, ok: bool) -> None:
        if not ok:
            raise MessageNotFound("no message in processing with that id (unknown, expired or redelivered)")
        await self.store.barrier()

    # -- serving waiters ------------------------------------------------------------------------

    def notify(self) -> None:
        """Something may have become deliverable: serve waiters if there are any."""
        if self._closed or self._serving is not None or not self._waiters:
            return
        self._serving = asyncio.get_running_loop().create_task(self._serve(), name=f"serve:{self.name}")

    async def served(self) -> None:
        """Return once the waiters' current round of service is over (a no-op when idle)."""
        task = self._serving
        if task is not None:
            # wait(), not await: a caller that gives up must not stop the service of the others,
            # and a service stopped by close() must not look like a cancellation of the caller.
            await asyncio.wait((task,))

    def _first_live(self) -> Waiter | None:
        while self._waiters:
            w = next(iter(self._waiters))
            if w.live:
                return w
            del self._waiters[w]
        return None

    async def _serve(self) -> None:
        try:
            while not self._closed:
                waiter = self._first_live()
                if waiter is None:
                    return
                wait = self.store.waittime(self.name)
                if wait is None:
                    return
                if wait > 0:
                    self._arm_timer(wait)
                    return
                delivery = await self.try_take()
                if delivery is None:
                    continue
                waiter = self._first_live()
                if waiter is None:
                    # Every waiter left while the store worked: the message goes back unharmed.
                    # Look again after: a waiter that came meanwhile found this server busy.
                    await self.store.put_back(self.name, delivery.message.uuid)
                    continue
                waiter.finish(delivery)
        except Exception:
            log.exception("serving waiters of queue %s failed; trying again in %ss", self.name, RETRY_AFTER_ERROR)
            # Nothing else may come to wake the waiters: a store that failed once (a peer
            # gone mid-transaction) gets asked again.
            self._arm_timer(RETRY_AFTER_ERROR)
        finally:
            self._serving = None

    def _arm_timer(self, delay: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        # A little slack so the record's deadline has surely passed when we look again.
        self._timer = self.clock.call_later(delay + 0.0005, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.notify()

    async def close(self) -> list[Waiter]:
        """Stop serving and detach the waiters; returns those left waiting on no queue at all
        (the manager ends them, unless they are pull-any waiters that may see new queues)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        orphans: list[Waiter] = []
        for w in list(self._waiters):
            if self in w.queues:
                w.queues.remove(self)
            if not w.queues and w.live:
                orphans.append(w)
        self._waiters.clear()
        if self._serving is not None:
            self._serving.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._serving
        return orphans
