"""SQS on nodes sharing one PostgreSQL. FIFO receives of several messages of a group: receives
on two nodes at once never both hold messages of one group, each group is received in order,
and a receive takes a group's next messages with its first. A dead-letter queue deleted through
one node is not made again by a receive on the other. And a database at schema version 2
upgrades to the functions that do it (migration 3)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import asyncpg

from pylmq.core.message import PushOptions
from pylmq.node import LMQNode
from pylmq.pgstore import messages as pm
from pylmq.pgstore.schema import MIGRATIONS, SCHEMA_VERSION, migrate
from tests.pgstore.pg_diff import create_queue
from tests.pgstore.pg_store_helpers import sqs_call

QUEUE = "groups.fifo"


async def test_receives_on_two_nodes_at_once_never_share_a_group_and_keep_its_order(sqs_nodes: list[LMQNode]) -> None:
    a, b = sqs_nodes
    groups, n = [f"g{i}" for i in range(6)], 8
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        attrs = {"FifoQueue": "true", "ContentBasedDeduplication": "true"}
        url = (await sqs_call(session, a, "CreateQueue", {"QueueName": QUEUE, "Attributes": attrs}))["QueueUrl"]
        for _ in range(250):  # b hears of the new queue within milliseconds
            if b.manager.get(QUEUE) is not None:
                break
            await asyncio.sleep(0.02)
        entries = [{"MessageBody": f"{g}:{i}", "MessageGroupId": g} for i in range(n) for g in groups]
        for k in range(0, len(entries), 10):
            batch = [{"Id": str(j), **e} for j, e in enumerate(entries[k : k + 10])]
            sent = await sqs_call(session, a, "SendMessageBatch", {"QueueUrl": url, "Entries": batch})
            assert not sent.get("Failed"), sent

        holder: dict[str, str] = {}  # group -> the consumer holding messages of it
        seen: dict[str, list[int]] = {g: [] for g in groups}
        most = 0  # the most messages of one group in one answer

        async def consume(node: LMQNode, me: str) -> None:
            nonlocal most
            for _ in range(400):  # bounded: the whole queue takes a few dozen receives
                if sum(map(len, seen.values())) == len(entries):
                    return
                params = {"QueueUrl": url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 60}
                got = (await sqs_call(session, node, "ReceiveMessage", params)).get("Messages", [])
                if not got:
                    await asyncio.sleep(0.005)
                    continue
                bodies = [(g, int(i)) for g, i in (m["Body"].split(":") for m in got)]
                # While this consumer holds a message of a group (until it deletes the last of
                # them, below), nobody else may get one of that group.
                for g in {g for g, _ in bodies}:
                    assert holder.get(g) is None, f"{me} and {holder[g]} both hold messages of {g}"
                    holder[g] = me
                    most = max(most, sum(1 for x, _ in bodies if x == g))
                for k, (m, (g, i)) in enumerate(zip(got, bodies, strict=True)):
                    seen[g].append(i)
                    if all(x != g for x, _ in bodies[k + 1 :]):
                        del holder[g]  # before the delete that frees the group
                    await sqs_call(
                        session, node, "DeleteMessage", {"QueueUrl": url, "ReceiptHandle": m["ReceiptHandle"]}
                    )
            raise AssertionError(f"{me} gave up with {seen}")

        await asyncio.gather(*(consume(node, f"{who}{k}") for who, node in (("a", a), ("b", b)) for k in range(2)))
    assert seen == {g: list(range(n)) for g in groups}  # each once, in the group's order
    assert most > 1  # a receive took a group's next messages with its first


async def test_a_dead_letter_queue_deleted_through_one_node_is_not_made_again_by_the_other(
    sqs_nodes: list[LMQNode], pg_dsn: str
) -> None:
    a, b = sqs_nodes
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as session:
        dlq = (await sqs_call(session, a, "CreateQueue", {"QueueName": "dl"}))["QueueUrl"]
        policy = json.dumps({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:dl", "maxReceiveCount": 1})
        attrs = {"RedrivePolicy": policy}
        src = (await sqs_call(session, a, "CreateQueue", {"QueueName": "src", "Attributes": attrs}))["QueueUrl"]
        for _ in range(250):  # b hears of both queues and of src's policy within milliseconds
            if b.manager.get("dl") is not None and (await b.manager.get_props("src")).dead_letter == "dl":
                break
            await asyncio.sleep(0.02)
        assert (await b.manager.get_props("src")).dead_letter == "dl"
        sent = await sqs_call(session, a, "SendMessage", {"QueueUrl": src, "MessageBody": "kept"})
        receive = {"QueueUrl": src, "VisibilityTimeout": 0, "AttributeNames": ["ApproximateReceiveCount"]}
        counts = []
        for n in range(3):
            if n == 1:
                # Deleted through a; b receives at once, whether or not it has heard of it yet.
                await sqs_call(session, a, "DeleteQueue", {"QueueUrl": dlq})
            (m,) = (await sqs_call(session, b, "ReceiveMessage", receive))["Messages"]
            assert m["MessageId"] == sent["MessageId"]
            counts.append(m["Attributes"]["ApproximateReceiveCount"])
        assert counts == ["1", "2", "3"]  # past maxReceiveCount, kept and received again
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM lmq.queue WHERE name = 'dl'") == 0
    finally:
        await conn.close()


async def _at_version_2(conn: asyncpg.Connection) -> None:
    """The schema as a node of the previous version left it (migrations 1 and 2, as migrate
    applies them)."""
    await conn.execute("CREATE SCHEMA lmq")
    await conn.execute(
        "CREATE TABLE lmq.schema_version (version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
    )
    for version, sql in MIGRATIONS:
        if version <= 2:
            await conn.execute(sql)
            await conn.execute("INSERT INTO lmq.schema_version (version) VALUES ($1)", version)


async def test_a_database_at_version_2_upgrades_and_its_groups_deliver_several_at_once(pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await _at_version_2(conn)
        q = await create_queue(conn, "old.fifo")
        for i in range(3):  # pushed by a node of version 2
            await pm.push(conn, q, ((), b"%d" % i), None, PushOptions(group="g"), False, 1000.0 + i)
        old = await conn.fetchval("SELECT count(*) FROM pg_proc WHERE proname = 'dequeue_in_group'")
        assert old == 0
        assert await migrate(conn) == 2
        assert await conn.fetchval("SELECT max(version) FROM lmq.schema_version") == SCHEMA_VERSION == 3
        got, _, _ = await pm.dequeue(conn, q, 60.0, 1010.0, None)
        assert got is not None and got[0].items() == [((), b"0")]
        taken = [got[0]]
        for _ in range(3):
            nxt, _ = await pm.dequeue_in_group(conn, q, "g", taken[-1].uuid, 60.0, 1010.0)
            if nxt is None:
                break
            taken.append(nxt[0])
        assert [m.items()[0][1] for m in taken] == [b"0", b"1", b"2"]
        # Nodes still on version 2 call the 5-argument dequeue, which is kept.
        left = await conn.fetchval("SELECT (f.m).uuid FROM lmq.dequeue($1, 60, 1010, NULL, NULL) f", q)
        assert left is None  # all three in processing
    finally:
        await conn.close()


async def test_dequeue_in_group_stops_at_a_record_another_receive_holds(conn: asyncpg.Connection) -> None:
    """A receive takes the group's next record only after the one it holds, never past a record
    in processing: g1 held by another receive (its deadline extended) keeps g2 from the receive
    that got g0 again; and a receive whose record's deadline passed takes nothing."""
    q = await create_queue(conn, "q.fifo")
    for i in range(3):
        await pm.push(conn, q, ((), b"%d" % i), None, PushOptions(group="g"), False, 1000.0 + i)
    got, _, _ = await pm.dequeue(conn, q, 10.0, 1010.0, None)
    assert got is not None
    g0 = got[0]
    g1 = (await pm.dequeue_in_group(conn, q, "g", g0.uuid, 10.0, 1010.0))[0]
    assert g1 is not None and g1[0].items() == [((), b"1")]
    ok, _ = await pm.retain(conn, q, g1[0].uuid, 100.0, 1015.0)
    assert ok
    # g0's deadline passed: the receive that held it takes nothing more of the group.
    assert (await pm.dequeue_in_group(conn, q, "g", g0.uuid, 10.0, 1021.0))[0] is None
    again, _, _ = await pm.dequeue(conn, q, 10.0, 1021.0, None)
    assert again is not None and again[0].items() == [((), b"0")]
    assert (await pm.dequeue_in_group(conn, q, "g", again[0].uuid, 10.0, 1021.0))[0] is None  # g1 is held
    ok, _ = await pm.done(conn, q, g1[0].uuid, 1022.0)
    assert ok
    g2 = (await pm.dequeue_in_group(conn, q, "g", again[0].uuid, 10.0, 1022.0))[0]
    assert g2 is not None and g2[0].items() == [((), b"2")]
