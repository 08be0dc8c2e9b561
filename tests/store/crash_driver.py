"""The load of the kill -9 test of the durable store's format-2 records
(``test_durable_crash.py``): run as ``python -m tests.store.crash_driver DATA_DIR SEED FIRST``,
concurrent clients of a DurableStore push messages with options (an ext: priority, push time,
failures counted), pull them with a dead-letter queue (unacked ones become dead letters:
transfers), ack some, requeue dead letters and bind virtual queues. Each change is printed once
answered (after its barrier), one flushed line each:

- ``push SEQ``: the message with body ``seq-SEQ`` (priority SEQ % 4) is durable;
- ``ack SEQ``: a delivery of it was acked;
- ``virtual NAME A,B``: the virtual queue is bound to those queues (nothing: removed);
- ``ask KIND ...``: the same change is about to be asked for: if the process dies before its
  answer, it may or may not have happened.

The test kills the process at a random moment and checks the reopened store against the lines.
"""

from __future__ import annotations

import asyncio
import random
import sys
from pathlib import Path

from pylmq.core.message import PushOptions, make_item
from pylmq.store.durable import DurableStore

Q, DEAD = "crash", "crash-dead"
VIRTUAL = ("v0", "v1")
TIMEOUT = 0.02


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def seq_of(body: bytes) -> int:
    return int(body.split(b"-")[1])


async def pusher(store: DurableStore, seqs: list[int]) -> None:
    while True:
        seqs[0] += 1
        seq = seqs[0]
        say(f"ask push {seq}")
        await store.push(Q, make_item(b"seq-%d" % seq), 1, PushOptions(retry=1, priority=seq % 4), track=True)
        await store.barrier()
        say(f"push {seq}")
        await asyncio.sleep(0)  # a barrier under "interval" may return without suspending


async def puller(store: DurableStore, rng: random.Random) -> None:
    while True:
        got = await store.dequeue(Q, TIMEOUT, DEAD)
        if got is None:
            await asyncio.sleep(0.001)
            continue
        msg, _ = got
        if rng.random() < 0.5:
            continue  # never answered: redelivered, then a dead letter
        seq = seq_of(msg.items()[0][1])
        say(f"ask ack {seq}")
        if await store.done(Q, msg.uuid):
            await store.barrier()
            say(f"ack {seq}")
        await asyncio.sleep(0)


async def requeuer(store: DurableStore) -> None:
    while True:
        await asyncio.sleep(0.01)
        await store.requeue(DEAD, 3, None)


async def binder(store: DurableStore, rng: random.Random) -> None:
    while True:
        name = rng.choice(VIRTUAL)
        members = ",".join(rng.sample(["a", "b", "c", "d"], rng.randint(0, 3)))
        say(f"ask virtual {name} {members}")
        await store.set_virtual(name, members.split(",") if members else [])
        await store.barrier()
        say(f"virtual {name} {members}")
        await asyncio.sleep(0.003)


async def main(data_dir: Path, seed: int, first: int) -> None:
    rng = random.Random(seed)
    store = DurableStore(data_dir, fsync="interval", compact_min_bytes=256 << 10)
    await store.open()
    await store.set_queue_props(Q, {"retry": 1, "timeout": TIMEOUT})
    await store.barrier()
    say("ready")
    seqs = [first]
    tasks = [pusher(store, seqs) for _ in range(2)]
    tasks += [puller(store, random.Random(rng.random())) for _ in range(2)]
    tasks += [requeuer(store), binder(store, random.Random(rng.random()))]
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
