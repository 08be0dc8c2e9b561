"""The stream reader's claim of many ids: the node answers at most 16 MiB a request, the reader
asks again for the ids it left for later, so every message comes back, in the order asked."""

from __future__ import annotations

import asyncio

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread
from pylmq.spark import read_options
from pylmq.spark._connection import NodeConnection


@pytest.mark.parametrize("api", ["http", "rpc"])
def test_claim_of_more_than_one_answer_holds_takes_every_message_back_in_order(api: str) -> None:
    with NodeThread() as node:
        with HttpClient(node.http_url) as http:
            http.push_many("q", [b"%02d" % i + b"x" * (1 << 20) for i in range(18)])
            ids: list[str] = []
            while len(ids) < 18:  # a pull-many stops at 16 MiB too
                ids += [m.id for m in http.pull_many("q", 18, 0)]
        host, port = node.rpc_address
        url = node.http_url if api == "http" else f"rpc://{host}:{port}"

        async def go() -> tuple[list[str], list[str]]:
            async with NodeConnection(read_options({"url": url, "queue": "q"})) as n:
                rows, missing = await n.claim("q", ids)
                return [r[1] for r in rows], missing

        got, missing = asyncio.run(go())
    assert (got, missing) == (ids, [])
