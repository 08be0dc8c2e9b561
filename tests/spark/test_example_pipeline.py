"""examples/spark_pipeline.py end to end: generated JSON events through a real node and Spark."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)
from pyspark.sql import SparkSession

from pylmq.client import HttpClient
from pylmq.node.testing import NodeThread
from tests.spark.spark_helpers import drain, queue_size, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


@pytest.fixture(scope="module")
def pipeline() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["spark_pipeline"] = module
    spec.loader.exec_module(module)
    return module


def test_generated_events_are_totalled_into_the_results_queue_and_parquet_and_all_acked(
    spark: SparkSession,
    url: str,
    queue: str,
    http: HttpClient,
    lmq_node: NodeThread,
    tmp_path: Path,
    pipeline: ModuleType,
) -> None:
    p = pipeline.Pipeline(url, f"{queue}.events", f"{queue}.results", str(tmp_path))
    events, expected = pipeline.generate_events(keys=3, windows=4, per_window=10, seed=7)
    http.update_props(p.events, {"retry": "infinity"})
    for e in events:
        http.push(p.events, e, "application/json")
    query = pipeline.start(spark, p, max_per_trigger=50)
    try:
        wait_until(
            f"{len(expected)} windows in the results queue and no event left",
            lambda: queue_size(lmq_node, p.results) >= len(expected) and queue_size(lmq_node, p.events) == 0,
            deadline=180,
        )
        assert query.exception() is None
    finally:
        query.stop()
    results = dict(pipeline.parse_result(m.body) for m in drain(url, p.results))
    assert results == expected
    assert pipeline.read_parquet(spark, p) == expected


def test_demo_command_runs_on_its_own_node_and_checks_its_output(
    spark: SparkSession, pipeline: ModuleType, tmp_path: Path
) -> None:
    # The demo takes the running session (getOrCreate): the fixture makes it the tests' one.
    rc = pipeline.main(
        [
            "--demo",
            "--keys",
            "2",
            "--windows",
            "2",
            "--per-window",
            "5",
            "--shuffle-partitions",
            "2",
            "--out",
            str(tmp_path),
        ]
    )
    assert rc == 0, "the demo's results did not match the generated events (see its output)"
