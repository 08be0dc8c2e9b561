"""The queue manager: queues created on use, regex matching, pull-any, delete.

This is the one entry point the protocol adapters (HTTP, MessagePack-RPC, the Erlang
distribution services) call. It holds a :class:`~pylmq.core.queue.Queue` per queue name, keeps
effective properties up to date, and tracks pull-any waiters so that a queue created while they
wait is considered too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from pylmq.core.clock import Clock, SystemClock
from pylmq.core.holders import HolderBook, check_holder
from pylmq.core.message import Item, PushOptions, StoredMessage, parse_uuid, uuid_text
from pylmq.core.names import RESERVED_NAMES, validate_name
from pylmq.core.options import check_options
from pylmq.core.pattern import Pattern, compile_pattern
from pylmq.core.props import (
    DefaultList,
    DefaultMatcher,
    Props,
    RawProps,
    effective_props,
    merge_props,
)
from pylmq.core.queue import Delivery, Queue, QueueObserver, Waiter
from pylmq.core.store import Store
from pylmq.core.table import PEEK_MAX, AccumResult
from pylmq.errors import (
    BadRequest,
    InvalidOptions,
    InvalidProps,
    LMQError,
    MessageNotFound,
    QueueNotFound,
)
from pylmq.wire.batch import MAX_BATCH

__all__ = [
    "MAX_BATCH",
    "MAX_BATCH_BYTES",
    "MAX_REPLY_IDS",
    "MAX_VIRTUAL_MEMBERS",
    "REPLIES",
    "RESERVED_NAMES",
    "ClaimOutcome",
    "QueueManager",
    "ReplyOutcome",
    "validate_name",
]

log = logging.getLogger("pylmq.manager")


# Pull-any and fan-out push find their queues in a selection: the names matching one regex,
# kept up to date as queues come, so that a request does not match every queue name again.
SELECTIONS = 256  # regexes whose selection is kept (least recently used go first)
SELECTED_NAMES = 1_000_000  # names held by all kept selections together (~50 MiB)
RECENT_NAMES = 4096  # queues created lately, which a kept selection has yet to look at
SCAN_CHUNK = 256  # queues tried by one pull-any between two turns given to other tasks
SCAN_SLICE = 0.002  # seconds of regex matching between two turns given to other tasks

# Batch push and pull (pylmq's extension to LMQ's API): messages per request (MAX_BATCH, a bound of
# the wire format, from pylmq.wire.batch), and payload bytes a pull-many gathers before it answers.
# Large enough that a request's fixed cost vanishes, small enough that one request holds the loop
# for milliseconds, not seconds.
MAX_BATCH_BYTES = 16 * 1024 * 1024


MAX_VIRTUAL_MEMBERS = 64
"""Queues one virtual queue is bound to: a push to it is a push to each, in one request."""

MAX_REPLY_IDS = 10_000
"""Most ids :meth:`QueueManager.reply_many` takes at once: a batch holds the queue's loop for
its whole length (about 10 ms per 1,000 ids in memory)."""

REPLIES = ("ack", "nack", "ext")
"""The replies a client gives a delivered message."""


@dataclass(slots=True)
class ReplyOutcome:
    """What :meth:`QueueManager.reply_many` did: the ids answered and those not found."""

    ok: list[str | bytes]
    not_found: list[str | bytes]


@dataclass(slots=True)
class ClaimOutcome:
    """What :meth:`QueueManager.claim` did: the messages taken back, in the order asked, the
    ids that named none, and those ``later``: not looked at because the answer reached
    :data:`MAX_BATCH_BYTES`, to be asked again."""

    delivered: list[Delivery]
    not_found: list[str | bytes]
    later: list[str | bytes] = field(default_factory=list)


def _uuid(id_: str | bytes) -> bytes:
    u = parse_uuid(id_)
    if u is None:
        raise MessageNotFound(f"{id_!r} is not a message id")
    return u


class _Selection:
    """The existing queues whose names match ``pattern``, in a stable order: those there when
    it was made, then those created since (the names created up to :attr:`synced`, the
    manager's count of created queues, have been looked at). A deleted queue's name stays
    until the selection is next used."""

    __slots__ = ("counted", "names", "pattern", "synced")

    def __init__(self, pattern: Pattern) -> None:
        self.pattern = pattern
        self.names: dict[str, None] = {}
        self.synced = 0
        self.counted = 0  # names counted in the manager's total while kept


class QueueManager:
    def __init__(
        self,
        store: Store,
        clock: Clock | None = None,
        observer: QueueObserver | None = None,
        virtual: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        """``virtual``: the virtual queues of the configuration (app.config); those the store
        keeps (bound or changed since over the APIs) win for the names they hold."""
        self.store = store
        self.clock = clock or SystemClock()
        self.observer = observer
        self._queues: dict[str, Queue] = {}
        self._any_waiters: dict[Waiter, Pattern] = {}
        self._unmatched: deque[Queue] = deque()  # new queues the waiters' regexes have yet to see
        self._matching: asyncio.Task[None] | None = None  # the task that shows them (owned here)
        self._matching_turn = asyncio.Lock()  # held for a slice of regex matching (_matching_slice)
        self._created = 0  # queues attached so far: the serial number of the last one
        # Purges under way, by queue name: a second purge of the queue waits for the first
        # rather than finding it between its deletion and its re-creation (404).
        self._purging: dict[str, tuple[asyncio.Lock, int]] = {}  # the lock, purges holding or awaiting it
        self._recent: deque[str] = deque(maxlen=RECENT_NAMES)  # the last ones, oldest first
        self._selections: OrderedDict[str, _Selection] = OrderedDict()
        self._selected = 0  # names in self._selections
        self._defaults: DefaultMatcher | None = None  # the store's default list, compiled
        self.props_version = 0  # moves when the default list changes (Queue's PropsSource)
        # Holder tags of deliveries (pylmq/core/holders.py), per queue; in memory only.
        self._holders: dict[str, HolderBook] = {}
        self._any_turn = 0  # where the next pull-any starts looking: every queue gets turns
        self._closed = False
        self._config_virtual = {n: list(qs) for n, qs in (virtual or {}).items()}
        # Virtual queue name -> its real queues; disjoint from the real queue names.
        self._virtual: dict[str, list[str]] = dict(self._config_virtual)
        # Set while the node must not serve queues at all (a cluster member that cannot reach
        # its cluster): the APIs answer every queue request with it.
        self.unavailable: LMQError | None = None

    # -- life cycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Attach to an opened store: a Queue for every queue it holds."""
        self.refresh_virtual()
        self.store.listen_transfers(self._on_transfer)
        for name in self.store.queue_names():
            self._attach(name)
        for q in self._queues.values():
            q.notify()

    async def close(self) -> None:
        self._closed = True
        if self._matching is not None:
            self._matching.cancel()
            await asyncio.wait((self._matching,))
        for w in list(self._any_waiters):
            w.finish(None)
        for q in list(self._queues.values()):
            for w in await q.close():
                w.finish(None)

    def check_available(self) -> None:
        """Raise :attr:`unavailable` when set; the APIs call this before any queue operation."""
        if self.unavailable is not None:
            raise self.unavailable

    # -- queues ------------------------------------------------------------------------------------

    def props_of(self, name: str) -> Props:
        """Effective props of ``name`` (for :class:`Queue`, which keeps them until
        :attr:`props_version` moves)."""
        return self._props_for(name)

    def _props_for(self, name: str) -> Props:
        if self._defaults is None:
            self._defaults = DefaultMatcher(self.store.default_props())
        return effective_props(name, self.store.queue_props(name), self._defaults)

    def _attach(self, name: str) -> Queue:
        q = self._queues.get(name)
        if q is None:
            q = Queue(name, self.store, self, self.observer, self.clock)
            self._queues[name] = q
            self._created += 1
            self._recent.append(name)
            if self._any_waiters:
                # Matched in a task of its own, in time slices: each waiting regex may cost up
                # to a couple of milliseconds, and many may wait. A message pushed to the queue
                # meanwhile is served when the waiter is added (add_waiter serves what is there).
                self._unmatched.append(q)
                if self._matching is None:
                    self._matching = asyncio.get_running_loop().create_task(
                        self._match_waiters(), name="pull-any waiters: new queues"
                    )
        return q

    async def _match_waiters(self) -> None:
        """Offer each queue of :attr:`_unmatched` to the waiting pull-any clients. A waiter that
        comes meanwhile needs none of this: it brings its selection up to date itself."""
        try:
            while self._unmatched:
                q = self._unmatched.popleft()
                if self._queues.get(q.name) is q:  # else deleted meanwhile
                    await self._offer(q)
        except Exception:
            log.exception("matching new queues against waiting pull-any clients failed")
            self._unmatched.clear()
        finally:
            self._matching = None

    async def _offer(self, q: Queue) -> None:
        """Add ``q`` to the waiters whose regex matches its name, in slices of matching."""
        clock = time.perf_counter
        matched: dict[str, bool] = {}  # many clients may wait with one regex: matched once
        left = iter(list(self._any_waiters.items()))
        more = True
        while more:
            async with self._matching_slice():
                until = clock() + SCAN_SLICE
                more = False
                for w, pattern in left:
                    if not w.live:
                        continue  # answered or gone while this waited for its turn
                    hit = matched.get(pattern.text)
                    if hit is None:
                        hit = matched[pattern.text] = pattern.search(q.name)
                    if hit:
                        q.add_waiter(w)
                    if clock() > until:
                        more = True
                        break

    def get(self, name: str) -> Queue | None:
        return self._queues.get(name)

    def queue_names(self) -> list[str]:
        return sorted(self._queues)

    def queue_count(self) -> int:
        """How many queues there are, in O(1) (queue_names sorts them all)."""
        return len(self._queues)

    @property
    def names_version(self) -> tuple[int, int]:
        """Moves whenever a queue is attached or deleted (queues attached so far, queues now):
        a reader that keeps the names (the console's sorted list) rebuilds them only then."""
        return self._created, len(self._queues)

    def names_unsorted(self) -> list[str]:
        """The queues' names in no order, in O(n) without sorting (see queue_names)."""
        return list(self._queues)

    async def ensure(self, name: str) -> Queue:
        """The queue named so, created (in the store too) on first use; never a virtual one."""
        q = self._queues.get(name)
        if q is not None:
            return q
        name = validate_name(name)
        self._refuse_virtual(name)
        await self.store.create(name)
        return self._attach(name)

    async def match(self, regex: str | bytes) -> list[Queue]:
        """The existing queues whose names match ``regex`` (:class:`InvalidRegex` if refused),
        in a stable order (not sorted)."""
        return await self._select(self._selection(compile_pattern(regex)))

    def _selection(self, pattern: Pattern) -> _Selection:
        sel = self._selections.get(pattern.text)
        if sel is None:
            return _Selection(pattern)
        self._selections.move_to_end(pattern.text)
        return sel

    async def _select(self, sel: _Selection) -> list[Queue]:
        """Bring ``sel`` up to date and return its queues. Queues created since it was last
        used are matched one by one; only a selection just made (or left behind by more than
        RECENT_NAMES new queues) matches every name. A selection is kept only once complete."""
        while sel.synced != self._created:
            created = self._created
            behind = created - sel.synced
            if behind > len(self._recent):
                names = list(self._queues)
            else:
                names = list(itertools.islice(self._recent, len(self._recent) - behind, None))
            # Queues created while this runs are matched in the next round.
            await self._match_names(sel, names)
            sel.synced = created
        queues: list[Queue] = []
        gone: list[str] = []
        for n in sel.names:
            q = self._queues.get(n)
            if q is None:
                gone.append(n)
            else:
                queues.append(q)
        for n in gone:
            del sel.names[n]
        self._keep(sel)
        return queues

    async def _match_names(self, sel: _Selection, names: list[str]) -> None:
        """Add the names that match to ``sel``, in slices of SCAN_SLICE seconds (by time, not by
        count: a match costs from a microsecond to a couple of milliseconds by pattern), one
        slice at a time across all requests (:meth:`_matching_slice`)."""
        search, found, queues = sel.pattern.search, sel.names, self._queues
        clock = time.perf_counter
        left = iter(names)
        more = bool(names)
        while more:
            async with self._matching_slice():
                until = clock() + SCAN_SLICE
                more = False
                for n in left:
                    if n in queues and search(n):
                        found[n] = None
                    # After every name: reading the clock costs less than the cheapest search.
                    if clock() > until:
                        more = True
                        break

    @contextlib.asynccontextmanager
    async def _matching_slice(self) -> AsyncIterator[None]:
        """A turn to match regexes for up to SCAN_SLICE seconds, then a turn for other tasks.
        Turns are taken one at a time, first come first served: however many requests match
        costly regexes over many names, the loop runs one slice of matching between two rounds
        of everything else, not one per request (100 such requests made every other client
        wait seconds, though no single step was long)."""
        async with self._matching_turn:
            yield
            # Still holding the turn: the others that want one line up meanwhile, and the next
            # in line gets it in the next round of the loop.
            await asyncio.sleep(0)

    def _keep(self, sel: _Selection) -> None:
        """Keep ``sel`` (or count its new size), then drop the least recently used selections
        beyond the bounds."""
        text = sel.pattern.text
        kept = self._selections.setdefault(text, sel)
        if kept is not sel:
            return  # another request made the same selection meanwhile: that one is kept
        self._selected += len(sel.names) - sel.counted
        sel.counted = len(sel.names)
        while self._selections and (len(self._selections) > SELECTIONS or self._selected > SELECTED_NAMES):
            _, old = self._selections.popitem(last=False)
            self._selected -= old.counted
            old.counted = 0

    async def delete(self, name: str) -> None:
        if name not in self._queues:
            self._refuse_virtual(name)
        q = self._queues.pop(name, None)
        self._holders.pop(name, None)
        try:
            existed = await self.store.delete(name)
        finally:
            # Also when the store failed or the caller left midway: a Queue no longer in
            # the table would keep its waiters forever (a surviving queue is attached anew).
            if q is not None:
                await self._close_queue(q)
        if q is None and not existed:
            raise QueueNotFound(f"no queue named {name!r}")
        await self.store.barrier()

    async def purge(self, name: str) -> int:
        """Drop every message of the queue, in flight or not, and keep the queue with its own
        props: how many records it held. The queue is deleted and made again through the store
        (as SQS's PurgeQueue always did here), so every store does it alike: waiting pulls end
        empty, and acks of what was in flight find nothing (404)."""
        self._refuse_virtual(name)
        lock, users = self._purging.get(name) or (asyncio.Lock(), 0)
        self._purging[name] = lock, users + 1
        try:
            async with lock:
                own = self.store.queue_props(name)  # None: no such queue, here or in the store
                if own is None and name not in self._queues:
                    raise QueueNotFound(f"no queue named {name!r}")
                held = self.store.size(name)
                await self.delete(name)
                if own:
                    await self.update_props(name, own, merge=False)
                else:
                    await self.ensure(name)
                await self.store.barrier()
                return held
        finally:
            lock, users = self._purging[name]
            if users == 1:
                del self._purging[name]
            else:
                self._purging[name] = lock, users - 1

    async def _close_queue(self, q: Queue) -> None:
        if self.observer is not None:
            self.observer.on_delete(q.name)
        for w in await q.close():
            if w not in self._any_waiters:
                w.finish(None)

    def _require(self, name: str) -> Queue:
        q = self._queues.get(name)
        if q is None:
            self._refuse_virtual(name)
            raise QueueNotFound(f"no queue named {name!r}")
        return q

    # -- virtual queues ----------------------------------------------------------------------------

    def virtual_members(self, name: str) -> list[str] | None:
        """The real queues of the virtual queue ``name``; None when it is not one."""
        members = self._virtual.get(name)
        return None if members is None else list(members)

    def virtual_queues(self) -> dict[str, list[str]]:
        return {n: list(qs) for n, qs in self._virtual.items()}

    def refresh_virtual(self) -> None:
        """Read the store's virtual queues again (in a cluster, other pylmq nodes bind them):
        those of the configuration, then the store's, which win for the names they hold."""
        self._virtual = {**self._config_virtual, **self.store.virtual_queues()}

    def _refuse_virtual(self, name: str) -> None:
        """Only pushes go to a virtual queue; anything else names its queues in the refusal."""
        members = self._virtual.get(name)
        if members is not None:
            raise BadRequest(f"virtual queue: pull from its queues {', '.join(members)}")

    async def set_virtual(self, name: str, queues: Sequence[str]) -> None:
        """Bind the virtual queue ``name`` to ``queues`` (replacing its binding): 1 to
        :data:`MAX_VIRTUAL_MEMBERS` distinct valid names of queues that are not virtual. A
        name that is an existing queue, or a member of a virtual queue, cannot be bound."""
        name = validate_name(name)
        if not isinstance(queues, Sequence) or isinstance(queues, str | bytes):
            raise BadRequest("a virtual queue is bound to a list of queue names")
        if not 1 <= len(queues) <= MAX_VIRTUAL_MEMBERS:
            raise BadRequest(f"a virtual queue is bound to 1 to {MAX_VIRTUAL_MEMBERS} queues, got {len(queues)}")
        members = [validate_name(q) for q in queues]
        if len(set(members)) != len(members):
            raise BadRequest(f"virtual queue {name!r}: a queue is listed twice in {members!r}")
        for m in members:
            if m == name or m in self._virtual:
                raise BadRequest(f"virtual queue {name!r}: {m!r} is a virtual queue, not a queue")
        if name in self._queues or name in self.store.queue_names():
            raise BadRequest(f"{name!r} is a queue: a virtual queue needs a name of its own")
        for other, qs in self._virtual.items():
            if other != name and name in qs:
                raise BadRequest(f"{name!r} is a queue of virtual queue {other!r}: it cannot be virtual")
        # A dead-letter queue is a real queue, created when a message first dies.
        used = [props for _, props in self.store.default_props()]
        used += [p for p in map(self.store.queue_props, self.store.queue_names()) if p]
        if any(p.get("dead_letter") == name for p in used):
            raise BadRequest(f"{name!r} is a dead-letter queue: it cannot be virtual")
        await self.store.set_virtual(name, members)
        self._virtual[name] = members
        await self.store.barrier()

    async def delete_virtual(self, name: str) -> bool:
        """Unbind the virtual queue ``name``; False when there was none. Its queues stay."""
        if name not in self._virtual:
            return False
        # The store may tell this manager of the change while it is made (a cluster's mirror
        # sees its own write): pop, not del, and the configuration's binding goes first.
        self._config_virtual.pop(name, None)
        await self.store.set_virtual(name, [])
        self._virtual.pop(name, None)
        await self.store.barrier()
        return True

    def _on_transfer(self, name: str) -> None:
        """The store moved records into ``name`` (dead letters, a requeue): wake its waiters;
        a dead-letter queue the store just created gets its Queue here."""
        if self._closed or name in RESERVED_NAMES:
            return
        q = self._attach(name)
        if self.observer is not None:
            self.observer.on_push(name)
        q.notify()

    # -- messages ----------------------------------------------------------------------------------

    async def push(self, name: str, item: Item) -> AccumResult:
        q = self._queues.get(name)
        if q is None and name in self._virtual:
            # LMQ's push to a virtual name is a push to each of its queues; the answer (one
            # AccumResult) is its first queue's.
            queues = [await self.ensure(n) for n in self._virtual[name]]
            results = [await q.push(item) for q in queues]
            return results[0]
        return await (q or await self.ensure(name)).push(item)

    async def push_with(self, name: str, item: Item, options: PushOptions | None) -> list[tuple[str, bytes]]:
        """Push one item with per-message options (checked here too) to the queue ``name``, or
        to each queue of the virtual queue ``name``; one ``(queue, uuid)`` per queue. Every
        queue is checked first (nothing is pushed if one refuses: a queue that accumulates
        cannot take a record outside its window), then all are pushed with no await between
        them on a local store, and one commit covers them."""
        opts = PushOptions() if options is None else check_options(options, self.clock.now())
        members = self._virtual.get(name) if name not in self._queues else None
        names = list(members) if members is not None else [validate_name(name)]
        if members is None:
            self._refuse_virtual(names[0])
        for n in names:
            props = self._queues[n].props if n in self._queues else self._props_for(n)
            if props.accum > 0:
                raise InvalidOptions(
                    f"queue {n!r} accumulates messages (accum {props.accum} s): "
                    "a push with options or a returned id needs a queue with accum 0"
                )
            # Before any queue is created: a refused push leaves no trace in the store.
            self.store.check_push(opts, props.retry)
        queues = [await self.ensure(n) for n in names]
        out = [(q.name, await q.push_with(item, opts)) for q in queues]
        await self.store.barrier()
        return out

    async def peek(self, name: str, after: str | None, limit: int) -> list[StoredMessage]:
        """Up to ``limit`` (1 to :data:`~pylmq.core.table.PEEK_MAX`) records of the queue in
        id order, after the record whose uuid text is ``after``; delivers and changes
        nothing. :class:`MessageNotFound` when that record has left the queue."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= PEEK_MAX:
            raise BadRequest(f"a peek lists 1 to {PEEK_MAX} messages, got {limit!r}")
        cursor = None if after is None else parse_uuid(after)
        if after is not None and cursor is None:
            raise BadRequest(f"the peek cursor must be a message id, got {after!r}")
        self._require(name)
        return await self.store.peek(name, cursor, limit)

    async def requeue(self, dlq: str, count: int, to: str | None) -> int:
        """Move up to ``count`` available dead letters of ``dlq`` back to the queue each came
        from, or to ``to``: available now, no delivery counted, no provenance. How many moved.
        A dead letter whose origin has become a virtual queue's name stays (a queue of that
        name would break the names' disjointness): it can be requeued ``to`` a queue."""
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_REPLY_IDS:
            raise BadRequest(f"a requeue moves 1 to {MAX_REPLY_IDS} messages, got {count!r}")
        if to is not None:
            to = validate_name(to)
            self._refuse_virtual(to)
            if to == dlq:
                # It would only lose the provenance that a later requeue needs.
                raise BadRequest(f"a requeue moves dead letters out of {dlq!r}: 'to' must name another queue")
        self._require(dlq)
        moved = await self.store.requeue(dlq, count, to, frozenset(self._virtual))
        if moved:
            await self.store.barrier()
        return moved

    def resolve_key(self, name: str, key: int) -> bytes | None:
        """The uuid of the delivery of queue ``name`` whose integer key is ``key`` (queue_server's
        ``msg_id``); None when no processing record or more than one has it."""
        if name not in self._queues or isinstance(key, bool) or not isinstance(key, int):
            return None
        return self.store.find_delivery(name, key)

    async def push_all(self, regex: str | bytes, item: Item) -> dict[str, AccumResult]:
        """Fan-out to every EXISTING queue whose name matches (as LMQ)."""
        out: dict[str, AccumResult] = {}
        # In name order, as before selections: the reply lists the queues in that order.
        for q in sorted(await self.match(regex), key=attrgetter("name")):
            out[q.name] = await q.push(item)
        return out

    async def push_many(self, name: str, items: Sequence[Item]) -> list[AccumResult]:
        """Push ``items`` to one queue, in order, with one commit for all (see
        :meth:`Queue.push_many`); at most :data:`MAX_BATCH`."""
        if len(items) > MAX_BATCH:
            raise BadRequest(f"a batch holds at most {MAX_BATCH} messages, got {len(items)}")
        return await (await self.ensure(name)).push_many(items)

    async def pull_many(
        self,
        name: str,
        count: int,
        timeout: float | None,
        max_bytes: int = MAX_BATCH_BYTES,
        holder: str | None = None,
        groups: bool = False,
    ) -> list[Delivery]:
        """Up to ``count`` messages of one queue, made durable by one commit. Waits up to
        ``timeout`` for the first only when none is there; then takes what is deliverable at
        once, until ``count``, ``max_bytes`` of payload (at least one message is taken), or a
        client waiting on the queue (a long poll is not starved by batches).

        With ``groups`` (SQS's FIFO receive), each message of a message group taken is followed
        at once by the group's next ones, in order (:meth:`Queue.take_in_group`): several
        messages of a group in one answer, none of them while an earlier one is elsewhere.

        With a ``holder`` tag (a pylmq extension), the node remembers that these deliveries
        went to it, for :meth:`claim_holder`."""
        if not 1 <= count <= MAX_BATCH:
            raise BadRequest(f"a pull takes 1 to {MAX_BATCH} messages, got {count}")
        if holder is not None:
            check_holder(holder)
        q = await self.ensure(name)
        taken: list[Delivery] = []
        try:
            if not q.has_waiters():
                await self._take_at_once(q, taken, count, max_bytes, groups)
            if not taken:
                if timeout is not None and timeout <= 0 and not q.has_waiters():
                    return []
                # Waits in line behind the clients already waiting, as a pull does.
                first = await self._pull([q], timeout, None)
                if first is None:
                    return []
                taken.append(first)
                if groups:
                    await self._follow_group(q, taken, count, max_bytes)
                await self._take_at_once(q, taken, count, max_bytes, groups)
            await self.store.barrier()
        except BaseException:
            # A client that left (or a store that failed) gets nothing: all goes back, retry intact.
            # Recorded all the same: put back, they sort behind newer messages, and the tag's
            # holder (a stream reader killed meanwhile) claims them back first when it restarts.
            self._record(q, holder, taken)
            for d in taken:
                await self._put_back(d)
            raise
        # Recorded before the answer leaves: a caller killed as it arrives can claim them.
        self._record(q, holder, taken)
        return taken

    def _record(self, q: Queue, holder: str | None, taken: list[Delivery]) -> None:
        if holder is None or not taken:
            return
        if self._queues.get(q.name) is not q:
            return  # deleted while the pull waited: its tags went with it, none may come back
        book = self._holders.get(q.name)
        if book is None:
            book = self._holders[q.name] = HolderBook()
        book.record(holder, [d.message.uuid for d in taken])

    async def _take_at_once(
        self, q: Queue, taken: list[Delivery], count: int, max_bytes: int, groups: bool = False
    ) -> None:
        size = sum(d.message.nbytes() for d in taken)
        while len(taken) < count and size < max_bytes and not q.has_waiters():
            d = await q.try_take()
            if d is None:
                return
            taken.append(d)
            size += d.message.nbytes()
            if groups:
                size = await self._follow_group(q, taken, count, max_bytes)

    async def _follow_group(self, q: Queue, taken: list[Delivery], count: int, max_bytes: int) -> int:
        """After ``taken[-1]``, the next messages of its group, while there is room; the payload
        bytes taken in all."""
        ext = taken[-1].message.ext
        size = sum(d.message.nbytes() for d in taken)
        if ext is None or ext.group is None:
            return size
        while len(taken) < count and size < max_bytes:
            d = await q.take_in_group(ext.group, taken[-1].message.uuid)
            if d is None:
                break
            taken.append(d)
            size += d.message.nbytes()
        return size

    async def pull(self, name: str, timeout: float | None) -> Delivery | None:
        """Wait up to ``timeout`` seconds (None: forever, 0: answer at once)."""
        return await self._pull([await self.ensure(name)], timeout, None)

    async def pull_any(self, regex: str | bytes, timeout: float | None) -> Delivery | None:
        """From any matching queue, including queues created while waiting."""
        sel = self._selection(compile_pattern(regex))
        queues = await self._select(sel)
        if len(queues) > 1:
            # LMQ asks all matching queues at once and takes the first answer, so a queue with
            # a backlog does not hold the others back; taking turns gives the same.
            self._any_turn += 1
            start = self._any_turn % len(queues)
            queues = queues[start:] + queues[:start]
        return await self._pull(queues, timeout, sel)

    async def _pull(self, queues: list[Queue], timeout: float | None, sel: _Selection | None) -> Delivery | None:
        at_once = timeout is not None and timeout <= 0
        for i, q in enumerate(queues):
            if i and not i % SCAN_CHUNK:
                await asyncio.sleep(0)  # a pull-any over many queues lets others in between
            if q.has_waiters():
                if not at_once:
                    continue  # join the line below: earlier waiters come first
                # As in LMQ, a t=0 pull is answered after the waiters already in line have
                # been served in this round; what is left then is its to take.
                await q.served()
                if q.has_waiters():
                    continue
            d = await q.try_take()
            if d is not None:
                return await self._confirm(d)
        if at_once:
            return None
        loop = asyncio.get_running_loop()
        waiter = Waiter(loop.create_future())
        timer = self.clock.call_later(timeout, waiter.finish, None) if timeout is not None else None
        # Registering may yield (many queues): a client that leaves meanwhile is cleaned up below.
        try:
            if sel is not None:
                self._any_waiters[waiter] = sel.pattern
                # From now on _attach adds the waiter to new queues; those created while the
                # store was asked above are found by bringing the selection up to date.
                queues = await self._select(sel)
            for i, q in enumerate(queues):
                if i and not i % SCAN_CHUNK:
                    await asyncio.sleep(0)
                    if not waiter.live:
                        break
                q.add_waiter(waiter)
            if sel is None and not waiter.queues:
                waiter.finish(None)  # its queue was deleted while the store was asked
            delivery = await waiter.future
        except asyncio.CancelledError:
            # The client went away. A message already taken for it goes back, retry intact.
            fut = waiter.future
            if fut.done() and not fut.cancelled() and (d := fut.result()) is not None:
                await self._put_back(d)
            raise
        finally:
            if timer is not None:
                timer.cancel()
            self._any_waiters.pop(waiter, None)
            waiter.finish(None)
        if delivery is None:
            return None
        return await self._confirm(delivery)

    async def _confirm(self, d: Delivery) -> Delivery:
        """Make the delivery durable before the client sees it; put it back if the client left."""
        try:
            await self.store.barrier()
        except asyncio.CancelledError:
            await self._put_back(d)
            raise
        return d

    async def _put_back(self, d: Delivery) -> None:
        try:
            q = self._queues.get(d.queue)
            if q is not None:
                await q.put_back(d.message.uuid)
            else:
                await self.store.put_back(d.queue, d.message.uuid)
        except Exception:
            log.exception("could not put back message %s of %s", d.message.uuid.hex(), d.queue)

    async def _replied(self, name: str) -> Queue:
        """The queue a reply to a delivery names. One this node does not know may have been
        created on another node sharing its store (the delivery was made there): the store is
        asked before the reply is refused, so the answer is not lost."""
        q = self._queues.get(name)
        if q is None and name not in self._virtual and await self.store.lookup(name):
            q = self._queues.get(name) or self._attach(name)
        return self._require(name) if q is None else q

    async def put_back(self, name: str, id_: str | bytes) -> None:
        """Server-side put back, for an adapter whose client vanished after a pull returned. A
        holder tag's record stays: its holder never got the message, and claims it back by
        the tag (first, where a pull would find it behind newer messages) if it comes back."""
        await (await self._replied(name)).put_back(_uuid(id_))

    async def ack(self, name: str, id_: str | bytes) -> None:
        u = _uuid(id_)
        await (await self._replied(name)).ack(u)
        self._forget(name, (u,))

    async def nack(self, name: str, id_: str | bytes) -> None:
        u = _uuid(id_)
        await (await self._replied(name)).nack(u)
        self._forget(name, (u,))

    def _forget(self, name: str, uuids: Iterable[bytes]) -> None:
        """These deliveries are over: their holder tags, if any, go."""
        book = self._holders.get(name)
        if book is not None:
            book.forget(uuids)

    async def ext(self, name: str, id_: str | bytes, timeout: float | None = None) -> None:
        """Extend a delivery's deadline to ``timeout`` seconds from now (None: the queue's
        timeout, LMQ's ext; a message with its own interval keeps using that)."""
        await (await self._replied(name)).ext(_uuid(id_), timeout)

    async def reply_many(self, name: str, reply: str, ids: Sequence[str | bytes]) -> ReplyOutcome:
        """``ack``, ``nack`` or ``ext`` for every id (a pylmq extension): one request and one
        group commit for a batch. An id that is not a message id, or names no message in
        processing (unknown, expired, answered before, or earlier in the same batch), goes to
        ``not_found``; the others were answered. The ids come back as given, in order."""
        if reply not in REPLIES:
            raise BadRequest(f"reply must be ack, nack or ext, got {reply!r}")
        if len(ids) > MAX_REPLY_IDS:
            raise BadRequest(f"at most {MAX_REPLY_IDS} ids in one reply, got {len(ids)}")
        q = await self._replied(name)
        parsed = [parse_uuid(i) for i in ids]
        found = await q.reply_many(reply, [u for u in parsed if u is not None])
        if reply != "ext":
            self._forget(name, [u for u in parsed if u is not None])
        outcome = ReplyOutcome([], [])
        answers = iter(found)
        for id_, u in zip(ids, parsed, strict=True):
            (outcome.ok if u is not None and next(answers) else outcome.not_found).append(id_)
        return outcome

    async def claim(self, name: str, ids: Sequence[str | bytes], max_bytes: int = MAX_BATCH_BYTES) -> ClaimOutcome:
        """Take messages back by the id of their last delivery (a pylmq extension), for a
        client that lost track of what it held (a restarted stream reader): each message in
        processing under that id, or available again under it (nacked, or its deadline passed
        and nobody pulled it since), is delivered again to the caller with the same id and
        a new deadline (see :meth:`QueueTable.claim <pylmq.core.table.QueueTable.claim>` for
        the retry). Ids that name no such message go to ``not_found``. As a pull-many, the
        answer holds at most ``max_bytes`` of payload (at least one message): the ids after
        that bound are left alone and go to ``later``."""
        if len(ids) > MAX_REPLY_IDS:
            raise BadRequest(f"at most {MAX_REPLY_IDS} ids in one claim, got {len(ids)}")
        # As a reply: the deliveries may have been made by another node sharing the store.
        q = await self._replied(name)
        parsed = [parse_uuid(i) for i in ids]
        got = iter(await q.claim([u for u in parsed if u is not None], max_bytes))
        outcome = ClaimOutcome([], [])
        end = object()
        for id_, u in zip(ids, parsed, strict=True):
            msg = next(got, end) if u is not None else None
            if msg is end:
                outcome.later.append(id_)
            elif msg is None:
                outcome.not_found.append(id_)
            else:
                assert isinstance(msg, StoredMessage)
                outcome.delivered.append(Delivery(name, msg))
        return outcome

    async def claim_holder(self, name: str, holder: str, max_bytes: int = MAX_BATCH_BYTES) -> ClaimOutcome:
        """Take back, as :meth:`claim` by their ids, every message still claimable whose
        delivery went to ``holder`` (a pull-many with that tag), oldest delivery first: for a
        caller that lost even the ids (see pylmq/core/holders.py). ``not_found`` stays empty;
        ``later`` names those past ``max_bytes``, still recorded: claim by the tag again. Claims
        :data:`MAX_REPLY_IDS` at a time, letting other clients in between."""
        check_holder(holder)
        q = await self._replied(name)
        book = self._holders.get(name)
        uuids = book.of(holder) if book is not None else []
        got: list[StoredMessage | None] = []
        size = 0
        # A tag may name up to MAX_RECORDS deliveries: claimed in slices of what a claim by ids
        # takes, with a turn for other clients between two, so that no slice holds the loop long.
        for start in range(0, len(uuids), MAX_REPLY_IDS):
            if start:
                await asyncio.sleep(0)
            if size >= max_bytes:
                break
            part = uuids[start : start + MAX_REPLY_IDS]
            taken = await q.claim(part, max_bytes - size)
            got += taken
            size += sum(m.nbytes() for m in taken if m is not None)
            if len(taken) < len(part):
                break  # max_bytes reached inside the slice
        outcome = ClaimOutcome([], [])
        gone: list[bytes] = []
        for i, u in enumerate(uuids):
            if i >= len(got):
                outcome.later.append(uuid_text(u))
            elif (msg := got[i]) is None:
                gone.append(u)  # acked elsewhere, redelivered, discarded: the record is stale
            else:
                outcome.delivered.append(Delivery(name, msg))
        if book is not None and gone:
            book.forget(gone)
        return outcome

    # -- properties ------------------------------------------------------------------------------

    async def get_props(self, name: str) -> Props:
        """Effective properties. Reading them creates no queue (LMQ's ``get_props`` only reads),
        so a fan-out push or /stats does not see a queue someone merely looked at."""
        q = self._queues.get(name)
        if q is not None:
            return q.props
        name = validate_name(name)
        self._refuse_virtual(name)
        return self._props_for(name)

    def raw_props(self, name: str) -> RawProps | None:
        return self.store.queue_props(name)

    async def update_props(self, name: str, props: RawProps | None, *, merge: bool = True) -> Props:
        """Merge ``props`` into the queue's own properties; ``None`` resets them."""
        if props:
            dl = props.get("dead_letter")
            if dl is not None and (dl == name or dl in self._virtual):
                what = "itself" if dl == name else "a virtual queue"
                raise InvalidProps(f"'dead_letter' must name another queue, not {what}: {dl!r}")
            # Before the queue is created: props the store refuses must leave no queue behind.
            self.store.check_props(props)
        q = await self.ensure(name)
        own = self.store.queue_props(name) or {}
        new = {} if props is None else (merge_props(own, props) if merge else dict(props))
        await self.store.set_queue_props(name, new)
        # In use from the moment they are stored, even if the client leaves during the commit.
        q.props = self._props_for(name)
        q.notify()
        await self.store.barrier()
        return q.props

    def default_props(self) -> DefaultList:
        return self.store.default_props()

    async def set_default_props(self, defaults: DefaultList) -> None:
        for regex, props in defaults:
            dl = props.get("dead_letter")
            if dl is not None and dl in self._virtual:
                raise InvalidProps(f"default props of {regex!r:.60}: 'dead_letter' names virtual queue {dl!r}")
        await self.store.set_default_props(defaults)
        self.refresh_props()
        await self.store.barrier()

    def refresh_props(self, names: Iterable[str] | None = None) -> None:
        """The props of ``names`` changed in the store; None: the default list (or anything)
        did. Then each queue computes its props again at its next use, not all of them now."""
        if names is None:
            self._defaults = None
            self.props_version += 1
            for queue in self._queues.values():
                queue.notify()
            return
        for n in names:
            q = self._queues.get(n)
            if q is not None:
                q.props = self._props_for(n)
                q.notify()

    # -- events from outside (another node of the cluster) -----------------------------------------

    def on_remote_new_message(self, name: str) -> None:
        q = self._queues.get(name)
        if q is not None:
            q.notify()

    def on_remote_queue_created(self, name: str) -> None:
        if name not in RESERVED_NAMES:
            self._attach(name).notify()

    async def on_remote_queue_deleted(self, name: str) -> None:
        q = self._queues.pop(name, None)
        self._holders.pop(name, None)
        if q is not None:
            await self._close_queue(q)

    # -- status -------------------------------------------------------------------------------------

    def status(self) -> list[dict[str, Any]]:
        """Per queue, in name order: name, size, memory (bytes) and effective props."""
        return [
            {
                "name": n,
                "size": self.store.size(n),
                "memory": self.store.memory(n),
                "props": self._queues[n].props,
            }
            for n in sorted(self._queues)
        ]
