"""A real local Spark session (``local[2]``) and a real pylmq node for the ``lmq`` data source.

One Spark session serves the whole ``tests/spark`` run (a JVM start costs seconds); one node
(memory store, 127.0.0.1, ports picked by the OS) is shared too, and every test uses queues of
its own. Spark's Python workers run this venv's interpreter with the repository root first on
their PYTHONPATH, so they import this checkout's pylmq and, by their package-qualified names, any
function of the test modules that reaches them by reference (``tests.spark....``).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread

ROOT = Path(__file__).resolve().parents[2]

# Set before the JVM starts: its Python workers inherit this environment.
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkSession]:
    # Imported here: without the spark extra this conftest still loads, and the test modules
    # skip themselves (spark_helpers.require_pyspark) instead of failing at collection.
    from pylmq.spark import local_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    session = local_session(
        "pylmq-tests",
        {
            "spark.default.parallelism": "2",
            "spark.sql.warehouse.dir": str(warehouse),
            "spark.sql.streaming.stateStore.maintenanceInterval": "600s",
            "spark.driver.extraJavaOptions": "-Dderby.system.home=" + str(warehouse),
        },
    )
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()


@pytest.fixture(scope="session")
def lmq_node() -> Iterator[NodeThread]:
    with NodeThread() as node:
        yield node


@pytest.fixture(scope="session")
def url(lmq_node: NodeThread) -> str:
    return lmq_node.http_url


@pytest.fixture(scope="session")
def rpc_url(lmq_node: NodeThread) -> str:
    host, port = lmq_node.rpc_address
    return f"rpc://{host}:{port}"


_names = itertools.count()


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    """A queue name no other test uses."""
    return f"{request.node.name.replace('[', '-').rstrip(']')}-{next(_names)}"


@pytest.fixture
def http(url: str) -> Iterator[HttpClient]:
    with HttpClient(url, request_timeout=30) as c:
        yield c
