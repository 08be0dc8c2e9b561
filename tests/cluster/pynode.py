"""A pylmq node in a mixed cluster, as a killable process for the tests.

``python tests/cluster/pynode.py --name N --cookie C --data-dir D [--join NODE]`` starts an
LMQNode over a MnesiaStore (durable local store), its hidden distribution node and a Cluster,
registers ``lmq_console:status/join/leave`` for the tests' Erlang driver, prints one JSON line
``{"http": PORT, "rpc": PORT, "sqs": PORT}`` when it serves, and stops on SIGTERM (SIGKILL for the failure tests).
``--rpc-timeout``, ``--stall-timeout`` and ``--net-ticktime`` (seconds) are the settings of the same names.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from pylmq.cluster import Cluster
from pylmq.cluster.mnesia_store import RPC_TIMEOUT, MnesiaStore
from pylmq.erlang import Atom, start_node
from pylmq.erlang.terms import Term
from pylmq.errors import ClusterError
from pylmq.node import LMQNode, NodeOptions
from pylmq.store.durable import DurableStore

A = Atom


def status_term(node: LMQNode, cluster: Cluster) -> Term:
    every, active = cluster.status_nodes()
    queues = [(q["name"].encode(), [(A("size"), q["size"]), (A("memory"), q["memory"])]) for q in node.manager.status()]
    return [
        (A("all_nodes"), [A(n) for n in every]),
        (A("active_nodes"), [A(n) for n in active]),
        (A("mode"), A(cluster.mode)),
        (A("stalled_nodes"), [(A(n), s) for n, s in sorted(cluster.stalled().items())]),
        (A("queues"), queues),
    ]


async def run(args: argparse.Namespace) -> None:
    opts = NodeOptions(
        http=("127.0.0.1", 0),
        rpc=("127.0.0.1", 0),
        sqs=("127.0.0.1", 0),
        store="durable",
        data_dir=Path(args.data_dir),
        fsync="none",
    )
    store = MnesiaStore(DurableStore(opts.data_dir, fsync=opts.fsync), rpc_timeout=args.rpc_timeout)
    node = LMQNode(opts, store=store)
    await node.start()
    dist = await start_node(args.name, args.cookie, net_ticktime=args.net_ticktime, stall_timeout=args.stall_timeout)
    cluster = Cluster(dist, store, node.manager)
    node.show_cluster(cluster)  # the console's cluster view, as the service shows it

    async def join(target: Term) -> Term:
        try:
            await cluster.join(target.name if isinstance(target, Atom) else str(target))
        except ClusterError as e:
            return (A("error"), e.detail.encode())
        return A("ok")

    async def leave() -> Term:
        try:
            await cluster.leave()
        except ClusterError as e:
            return (A("error"), e.detail.encode())
        return A("ok")

    dist.register_function("lmq_console", "status", lambda: status_term(node, cluster))
    dist.register_function("lmq_console", "join", join)
    dist.register_function("lmq_console", "leave", leave)
    if args.join:
        await cluster.join(args.join)
    assert node.http_address is not None and node.rpc_address is not None
    assert node.sqs_address is not None
    ports = {"http": node.http_address[1], "rpc": node.rpc_address[1], "sqs": node.sqs_address[1]}
    print(json.dumps(ports), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await cluster.close()
    await node.stop()
    await dist.stop()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--name", required=True)
    p.add_argument("--cookie", required=True)
    p.add_argument("--data-dir", required=True)
    p.add_argument("--join")
    p.add_argument("--rpc-timeout", type=float, default=RPC_TIMEOUT)
    p.add_argument("--stall-timeout", type=float, default=3.0)
    p.add_argument("--net-ticktime", type=float, default=60.0)
    args = p.parse_args()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(name)s [%(levelname)s] %(message)s", stream=sys.stderr
    )
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
