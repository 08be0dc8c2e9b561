"""pylmq.metrics: push/pull meters, retention histograms, StatsD, and the figures of ``/stats``.

Wiring, for the node: ``emitter = StatsdEmitter(s.statsd_host, s.statsd_port)``,
``await emitter.start()``, ``metrics = QueueMetrics(emitter)`` passed to the
``QueueManager`` as its observer, ``metrics.start()``, and
``PeriodicGauges(emitter, s.stats_interval, sizes).start()``; stop them in reverse order.
"""

from pylmq.metrics.histogram import MIN_SAMPLES, PERCENTILES, HistogramStats, SlidingHistogram, statistics
from pylmq.metrics.history import RateHistory
from pylmq.metrics.meter import TICK_SECONDS, Meter, MeterRates
from pylmq.metrics.registry import QueueMetrics, QueueStats, format_admin_stats
from pylmq.metrics.statsd import (
    SAMPLE_RATE,
    PeriodicGauges,
    QueueSizes,
    StatsdEmitter,
    counter_line,
    escape_queue,
    gauge_line,
    metric_name,
    timing_line,
    unescape_queue,
)

__all__ = [
    "MIN_SAMPLES",
    "PERCENTILES",
    "SAMPLE_RATE",
    "TICK_SECONDS",
    "HistogramStats",
    "Meter",
    "MeterRates",
    "PeriodicGauges",
    "QueueMetrics",
    "QueueSizes",
    "QueueStats",
    "RateHistory",
    "SlidingHistogram",
    "StatsdEmitter",
    "counter_line",
    "escape_queue",
    "format_admin_stats",
    "gauge_line",
    "metric_name",
    "statistics",
    "timing_line",
    "unescape_queue",
]
