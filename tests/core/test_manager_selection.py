"""Pull-any and fan-out over many queues: the queues matching a regex are kept per regex and
brought up to date as queues come and go, instead of matching every queue name at every
request; the default list is matched once per queue, not at every push."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Callable

import pytest

from pylmq.core import QueueManager, make_item
from pylmq.core import manager as manager_module
from pylmq.core.pattern import MAX_PROGRAM, Pattern, compile_pattern
from pylmq.store import MemoryStore

QUEUES = 20_000


class SearchCounter:
    """Counts the regex matches the node runs (every caller goes through Pattern.search)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original: Callable[[Pattern, str], bool] = Pattern.search

        def counting(p: Pattern, name: str) -> bool:
            self.calls += 1
            return original(p, name)

        monkeypatch.setattr(Pattern, "search", counting)

    def take(self) -> int:
        n, self.calls = self.calls, 0
        return n


class LoopTurns:
    """``async with LoopTurns() as turns:`` counts the turns another task gets through the event
    loop while the block runs (``turns.count``, from 0 at entry): how often the work in the
    block let other clients in."""

    def __init__(self) -> None:
        self.count = 0
        self._done = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def _other_client(self) -> None:
        while not self._done.is_set():
            self.count += 1
            await asyncio.sleep(0)

    async def __aenter__(self) -> LoopTurns:
        self._task = asyncio.create_task(self._other_client())
        await asyncio.sleep(0)
        self.count = 0
        return self

    async def __aexit__(self, *_: object) -> None:
        self._done.set()
        assert self._task is not None
        await self._task


def costly_searches(monkeypatch: pytest.MonkeyPatch, turns: LoopTurns) -> list[int]:
    """Every regex search costs 3 ms, as one near MAX_PROGRAM can on a hostile name; the list
    returned gets, for each search, the loop turn it ran in."""
    at_turn: list[int] = []
    original: Callable[[Pattern, str], bool] = Pattern.search

    def slow(p: Pattern, name: str) -> bool:
        at_turn.append(turns.count)
        time.sleep(0.003)
        return original(p, name)

    monkeypatch.setattr(Pattern, "search", slow)
    return at_turn


@pytest.fixture
def searches(monkeypatch: pytest.MonkeyPatch) -> SearchCounter:
    return SearchCounter(monkeypatch)


async def _manager(n: int) -> QueueManager:
    m = QueueManager(MemoryStore())
    await m.start()
    for i in range(n):
        await m.ensure(f"q-{i:05d}")
    return m


@pytest.fixture
async def many() -> AsyncIterator[QueueManager]:
    m = await _manager(QUEUES)
    yield m
    await m.close()


async def test_pull_any_matches_every_name_only_the_first_time(many: QueueManager, searches: SearchCounter) -> None:
    await many.push("q-12345", make_item(b"x"))
    searches.take()
    d = await many.pull_any("^q-12345$", 0)
    assert d is not None and d.queue == "q-12345"
    assert searches.take() == QUEUES, "the first pull-any with a regex looks at every queue once"
    for _ in range(5):
        assert await many.pull_any("^q-12345$", 0) is None
    assert searches.take() == 0, "later ones match no name again"


async def test_a_new_queue_is_matched_once_and_then_found(many: QueueManager, searches: SearchCounter) -> None:
    await many.pull_any("^new-", 0)
    searches.take()
    await many.push("new-1", make_item(b"x"))
    d = await many.pull_any("^new-", 0)
    assert d is not None and d.queue == "new-1"
    assert searches.take() == 1, "only the new queue's name is matched"


async def test_a_deleted_queue_is_no_longer_selected(many: QueueManager) -> None:
    await many.push("gone", make_item(b"x"))
    assert [q.name for q in await many.match("^gone$")] == ["gone"]
    await many.delete("gone")
    assert await many.match("^gone$") == []
    await many.push("gone", make_item(b"again"))
    d = await many.pull_any("^gone$", 0)
    assert d is not None and d.message.content[1] == b"again"


async def test_fan_out_uses_the_selection_and_replies_in_name_order(
    many: QueueManager, searches: SearchCounter
) -> None:
    assert await many.push_all("^q-0000[21]$", make_item(b"x")) == {"q-00001": "no", "q-00002": "no"}
    searches.take()
    assert list(await many.push_all("^q-0000[21]$", make_item(b"y"))) == ["q-00001", "q-00002"]
    assert searches.take() == 0


async def test_the_first_scan_lets_other_clients_in_between(
    many: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The scan yields by time (a match costs a microsecond or a millisecond by pattern); with
    # no time allowed it yields after every name.
    monkeypatch.setattr(manager_module, "SCAN_SLICE", 0.0)
    async with LoopTurns() as turns:
        await many.pull_any("^nothing-matches$", 0)
    assert turns.count >= QUEUES // 16 - 1, f"the loop was given {turns.count} turns"


async def test_matching_the_queues_created_since_lets_other_clients_in_between(
    many: QueueManager, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manager_module, "SCAN_SLICE", 0.0)
    await many.pull_any("^late-", 0)
    for i in range(2000):
        await many.ensure(f"late-{i}")
    async with LoopTurns() as turns:
        assert len(await many.match("^late-")) == 2000
    assert turns.count >= 2000 // 16 - 1, f"the loop was given {turns.count} turns"


async def test_a_pull_any_over_many_queues_lets_other_clients_in_between(many: QueueManager) -> None:
    await many.pull_any("^q-", 0)  # the selection is made: what follows only tries the queues
    async with LoopTurns() as turns:
        assert await many.pull_any("^q-", 0) is None
    assert turns.count >= QUEUES // manager_module.SCAN_CHUNK - 1, f"the loop was given {turns.count} turns"


async def test_a_pull_any_cancelled_while_it_registers_leaves_no_waiter_behind(many: QueueManager) -> None:
    await many.pull_any("^q-", 0)  # the selection is made: the pull below only registers
    waiting = asyncio.create_task(many.pull_any("^q-", None))
    for _ in range(1000):  # past the queues tried at once, into the registration
        await asyncio.sleep(0)
        if many._any_waiters:
            break
    assert many._any_waiters and not waiting.done()
    await asyncio.sleep(0)  # registration yields every SCAN_CHUNK queues: cancel it midway
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert not many._any_waiters
    await many.push("q-00001", make_item(b"for a live client"))
    d = await many.pull("q-00001", 0)
    assert d is not None and d.message.content[1] == b"for a live client"


async def test_a_selection_left_far_behind_is_made_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager_module, "RECENT_NAMES", 8)
    m = await _manager(10)
    try:
        assert await m.match("^late-") == []
        for i in range(20):  # more new queues than the manager remembers
            await m.ensure(f"late-{i:02d}")
        assert sorted(q.name for q in await m.match("^late-")) == [f"late-{i:02d}" for i in range(20)]
    finally:
        await m.close()


async def test_kept_selections_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(manager_module, "SELECTIONS", 4)
    monkeypatch.setattr(manager_module, "SELECTED_NAMES", 25)
    m = await _manager(30)
    try:
        for i in range(10):
            await m.pull_any(f"^q-0000{i}$", 0)
        assert len(m._selections) == 4
        await m.pull_any("^q-", 0)  # 30 names: more than may be kept at all
        assert m._selected <= 25 and "^q-" not in m._selections
        assert sum(len(s.names) for s in m._selections.values()) == m._selected
    finally:
        await m.close()


async def test_pull_any_waiting_on_many_queues_gets_a_message_pushed_to_any(many: QueueManager) -> None:
    waiting = asyncio.create_task(many.pull_any("^q-", 5))
    await _until(lambda: (q := many.get("q-19999")) is not None and q.has_waiters())
    await many.push("q-19999", make_item(b"last"))
    d = await asyncio.wait_for(waiting, 5)
    assert d is not None and d.queue == "q-19999"


async def test_default_props_are_matched_once_per_queue_not_at_every_push(
    many: QueueManager, searches: SearchCounter
) -> None:
    await many.set_default_props([("^x-", {"retry": 7}), ("^q-", {"retry": 5})])
    assert searches.take() == 0, "changing the defaults matches no queue yet"
    for _ in range(3):
        await many.push("q-00007", make_item(b"m"))
    assert searches.take() == 2, "the first push looks up the list (two entries), the others keep the result"
    d = await many.pull("q-00007", 0)
    assert d is not None and d.message.retry == 5


async def test_a_stored_default_regex_that_cannot_run_is_skipped() -> None:
    # As an older journal or an Erlang node of the cluster could hold.
    store = MemoryStore()
    await store.set_default_props([("^(?!tmp)", {"retry": 9}), ("^q", {"retry": 4})])
    m = QueueManager(store)
    await m.start()
    try:
        assert (await m.get_props("q1")).retry == 4
    finally:
        await m.close()


async def _until(condition: Callable[[], object], turns: int = 10_000) -> None:
    """Let the loop run until ``condition()`` holds (registering on 20,000 queues takes many
    turns); fail if it does not within ``turns`` steps."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"not reached in {turns} loop steps")


async def _waiting(m: QueueManager, regexes: list[str], timeout: float) -> list[asyncio.Task[object]]:
    waiters: list[asyncio.Task[object]] = [asyncio.create_task(m.pull_any(r, timeout)) for r in regexes]
    await _until(lambda: len(m._any_waiters) == len(regexes))
    return waiters


async def test_a_new_queue_is_matched_against_waiting_regexes_in_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every search costs 3 ms here, as one of the costliest allowed patterns can: more than a
    # slice of matching, so each waiting regex gets a loop step of its own.
    m = await _manager(0)
    n = 20
    waiters = await _waiting(m, [f"^new-|w{i}" for i in range(n)], 10)
    try:
        async with LoopTurns() as turns:
            at_step = costly_searches(monkeypatch, turns)
            await m.ensure("new-1")
            assert at_step == [], "creating the queue matches no waiting regex itself"
            for i in range(n):
                await m.push("new-1", make_item(b"m%d" % i))
            got = await asyncio.wait_for(asyncio.gather(*waiters), 10)
        assert len(at_step) == n, "each distinct waiting regex is matched once"
        assert len(set(at_step)) == n, f"other tasks ran between matches: steps {at_step}"
        assert sorted(d.message.content[1] for d in got) == sorted(b"m%d" % i for i in range(n))  # type: ignore[attr-defined]
    finally:
        await m.close()


async def test_waiting_with_the_costliest_allowed_regexes_does_not_hold_the_loop() -> None:
    # 300 clients wait, each with a regex just within MAX_PROGRAM that keeps every RE2
    # instruction alive on a name of a and b: 1-3 ms per match, about half a second per new
    # queue, which used to run in one loop step.
    m = await _manager(0)
    regexes = []
    for i in range(300):
        regex = "|".join(f"(?:a[ab]{{{k}}}c)" for k in range(1, 44)) + f"|z{i}"
        assert compile_pattern(regex).program <= MAX_PROGRAM
        regexes.append(regex)
    waiters = await _waiting(m, regexes, 30)
    rng = random.Random(5)
    # Each name ends in "abc": every regex matches it, after scanning it whole.
    names = ["".join(rng.choice("ab") for _ in range(247)) + "abc" for _ in range(2)]
    longest = 0.0
    done = asyncio.Event()

    async def other_client() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    other = asyncio.create_task(other_client())
    await asyncio.sleep(0)  # the other client is running from here on
    try:
        for name in names:
            await m.push(name, make_item(b"m"))
        served, _ = await asyncio.wait(waiters, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        while len(served) < len(names):
            more, _ = await asyncio.wait(set(waiters) - served, timeout=30, return_when=asyncio.FIRST_COMPLETED)
            assert more, "every message found a waiter"
            served |= more
        # A generous bound: the matching itself takes about half a second per queue.
        assert longest < 0.2, f"the loop was held {longest * 1000:.0f} ms"
    finally:
        done.set()
        await other
        for w in waiters:
            w.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)
        await m.close()


async def test_a_scan_with_costly_matches_yields_after_each_one_over_the_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every search costs 3 ms here, as one near MAX_PROGRAM can on a hostile name.
    m = await _manager(40)
    try:
        async with LoopTurns() as turns:
            at_step = costly_searches(monkeypatch, turns)
            assert len(await m.match("^q-")) == 40
    finally:
        await m.close()
    assert len(at_step) == 40 and len(set(at_step)) == 40, f"searches per loop step: {at_step}"


async def test_concurrent_scans_take_their_slices_of_matching_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # Five requests with costly regexes (3 ms a search here) over the same names: the loop runs
    # one slice of matching between two rounds of other tasks, not one per request.
    m = await _manager(10)
    try:
        async with LoopTurns() as turns:
            at_step = costly_searches(monkeypatch, turns)
            found = await asyncio.gather(*(m.match(f"^q-|r{i}") for i in range(5)))
    finally:
        await m.close()
    assert [len(f) for f in found] == [10] * 5
    assert len(at_step) == 50
    busiest = max(at_step.count(s) for s in set(at_step))
    assert busiest == 1, f"{busiest} searches ran in one loop step"
