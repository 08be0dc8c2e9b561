"""LocalStore's transfers between tables (dead letters, requeue): one journal record per move,
the listener told of the target, the target created when missing."""

from __future__ import annotations

from pylmq.core.clock import ManualClock
from pylmq.core.message import PushOptions, State, StoredMessage, make_item
from pylmq.store.local import LocalStore
from tests.core.test_table_options import RecordingJournal
from tests.store.store_helpers import OpenStore


class Journal(RecordingJournal):
    def __init__(self) -> None:
        super().__init__()
        self.transfers: list[tuple[str, bytes, str, StoredMessage]] = []

    def transfer(self, from_queue: str, uuid: bytes, to_queue: str, msg: StoredMessage) -> None:
        super().transfer(from_queue, uuid, to_queue, msg)
        self.transfers.append((from_queue, uuid, to_queue, msg))


async def test_each_dead_letter_is_one_transfer_record_and_the_listener_hears_of_its_queue() -> None:
    clock, journal = ManualClock(), Journal()
    store = LocalStore(clock, journal)
    told: list[str] = []
    store.listen_transfers(told.append)
    await store.set_queue_props("dlq", {"retry": 4})
    for i in range(2):
        await store.push("q", make_item(b"%d" % i), 0, PushOptions(), track=True)
    delivered = [await store.dequeue("q", 1, "dlq") for _ in range(2)]
    assert all(d is not None for d in delivered)
    clock.advance(2)
    journal.ops.clear()
    assert await store.dequeue("q", 1, "dlq") is None
    assert [op for op, _ in journal.ops] == ["transfer", "transfer"], "one record per move, nothing else"
    assert {(f, t) for f, _, t, _ in journal.transfers} == {("q", "dlq")}
    assert {u for _, u, _, _ in journal.transfers} == {d[0].uuid for d in delivered if d}
    assert told == ["dlq"]
    moved = store.messages("dlq")
    assert [m.state for m in moved] == [State.AVAILABLE] * 2
    assert [m.retry for m in moved] == [5, 5], "the target's retry, +1 as a push"
    assert store.size("q") == 0


async def test_a_missing_dead_letter_queue_is_created() -> None:
    clock = ManualClock()
    store = LocalStore(clock)
    await store.push("q", make_item(b"x"), 0, PushOptions(), track=True)
    assert await store.dequeue("q", 1, "new-dlq") is not None
    clock.advance(2)
    assert await store.dequeue("q", 1, "new-dlq") is None
    assert "new-dlq" in store.queue_names() and store.size("new-dlq") == 1


async def test_requeue_is_one_transfer_record_per_message_back_to_the_origin() -> None:
    clock, journal = ManualClock(), Journal()
    store = LocalStore(clock, journal)
    told: list[str] = []
    store.listen_transfers(told.append)
    await store.push("q", make_item(b"x"), 0, PushOptions(), track=True)
    assert await store.dequeue("q", 1, "dlq") is not None
    clock.advance(2)
    await store.dequeue("q", 1, "dlq")
    journal.transfers.clear()
    told.clear()
    assert await store.requeue("dlq", 5, None) == 1
    ((src, _, dst, msg),) = journal.transfers
    assert (src, dst, msg.ext and msg.ext.dead) == ("dlq", "q", None)
    assert told == ["q"]
    assert await store.requeue("absent", 5, None) == 0


async def test_the_durable_store_leaves_dead_letters_whose_origin_is_kept_where_they_are(
    open_store: OpenStore, clock: ManualClock
) -> None:
    # The durable store overrides requeue (it refuses changes while failing): the names the
    # caller keeps (virtual queues) must still reach the tables' rule.
    store = await open_store()
    await store.push("q", make_item(b"x"), 0, PushOptions(), track=True)
    assert await store.dequeue("q", 1, "dlq") is not None
    clock.advance(2)
    await store.dequeue("q", 1, "dlq")
    assert await store.requeue("dlq", 5, None, keep={"q"}) == 0
    assert store.size("dlq") == 1 and store.size("q") == 0
    assert await store.requeue("dlq", 5, None) == 1
