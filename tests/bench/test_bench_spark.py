"""The Spark target's report (bench/spark.py): the table the docs quote, from a result."""

from __future__ import annotations

from bench.spark import summary_md


def test_the_spark_table_gives_rates_node_cpu_and_the_parquet_ratio() -> None:
    result = {
        "rows": 1000,
        "rounds": 2,
        "pyspark": "4.3.0",
        "cpus": 2,
        "steps": {
            "generator": {"rows_per_s": 1_000_000.0, "seconds": 0.001, "node_cpu": 0.0},
            "write": {"rows_per_s": 50_000.0, "seconds": 0.02, "node_cpu": 0.5},
            "read+ack": {"rows_per_s": 25_000.0, "seconds": 0.04, "node_cpu": 0.25},
            "parquet write": {"rows_per_s": 100_000.0, "seconds": 0.01, "node_cpu": 0.0},
            "parquet read": {"rows_per_s": 250_000.0, "seconds": 0.004, "node_cpu": 0.0},
        },
    }
    md = summary_md(result)
    assert "| write | 50,000 | 50% | 2.0x slower |" in md, md
    assert "| read+ack | 25,000 | 25% | 10.0x slower |" in md, md
    assert "| generator | 1,000,000 | - |  |" in md, md
    assert "  read" not in md, "steps that were not measured are left out"
