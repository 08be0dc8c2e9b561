"""The pylmq benchmark: one run, many targets, ratios. See ``python -m bench --help``.

Modules: :mod:`bench.targets` (servers to measure), :mod:`bench.runner` (workloads),
:mod:`bench.wrk` and :mod:`bench.pygen` (load generators), :mod:`bench.drivers` (protocol
clients of the Python generator), :mod:`bench.report` (results.json, results.md, chart.png). Studies of single design
choices: :mod:`bench.studies` (bench/README.md).
"""
