"""format("lmq") in a fresh Spark session that never called register(): Spark 4 finds the source
through the top-level module pyspark_lmq, which installing pylmq installs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.spark_helpers import NO_PYSPARK

pytest.importorskip("pyspark", reason=NO_PYSPARK)

from pylmq.client import HttpClient

pytestmark = [pytest.mark.spark, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

FRESH_SESSION = """
import sys
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
url, queue = sys.argv[1], sys.argv[2]
rows = spark.read.format("lmq").option("url", url).option("queue", queue).load().collect()
print("BODIES", sorted(r.body.decode() for r in rows))
spark.stop()
"""


def test_format_lmq_works_in_a_fresh_session_without_register(url: str, queue: str, http: HttpClient) -> None:
    http.push_many(queue, ["one", "two"])
    # Only what an installed pylmq puts on the path: the package and the pyspark_lmq module beside it.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [sys.executable, "-c", FRESH_SESSION, url, queue], env=env, capture_output=True, text=True, timeout=180
    )
    assert "BODIES ['one', 'two']" in done.stdout, f"exit {done.returncode}; stderr tail: {done.stderr[-2000:]}"
