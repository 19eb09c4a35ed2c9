"""Prometheus exposition of one pipeline worker (``kvcompass pipeline worker --metrics-port``).

Owns the metric names of the pipeline worker and a ``prometheus_client`` collector that reads
them from the ``PipelineShell`` at scrape time (the shell keeps plain counters; nothing on the
hot path takes a lock), served by ``prometheus_client``'s own HTTP server on its own
``CollectorRegistry`` (never the library's global one) in a daemon thread. Must not change
what it reads.

Names (prefix ``kvc_pipeline_``): ``key_ops_total``, ``recoveries_total``,
``rebuilds_total`` (shards rebuilt from ``kv-events`` because their ``index-ops`` tail was
gone: self-healing), ``last_rebuild_seconds`` (gauge),
``checkpoints_total`` (checkpoints written), ``last_recovery_seconds`` (gauge),
``hold_failures_total{step}`` (failed attempts of a held take), ``held{step}`` (1 while a step
is held), ``dead_letters_total{reason}``, ``cache_unknown{worker}`` (1 while the worker's
events say its cache is unknown), ``cache_unknown_reports_total``, ``hop_ms{hop}`` (histogram,
ms: where an event's time goes, ``pipeline.shell.HOPS``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from pipeline.shell import PipelineShell

PREFIX = "kvc_pipeline_"


class ShellCollector(Collector):
    """The shell's counters, read when scraped."""

    def __init__(self, shell: PipelineShell) -> None:
        self.shell = shell

    def collect(self) -> Iterator[Metric]:
        s = self.shell
        for name, help_text, value in (
            ("key_ops", "key operations applied to the shards", s.key_ops),
            ("recoveries", "shard recoveries (checkpoint + index-ops tail, fresh epoch)",
             s.recoveries),
            ("rebuilds", "shards rebuilt from kv-events (their index-ops tail was gone)",
             s.rebuilds),
            ("checkpoints", "shard checkpoints written to index-snapshots",
             s.checkpoints.written),
        ):  # fmt: skip
            yield CounterMetricFamily(PREFIX + name, help_text, value=float(value))
        fails = CounterMetricFamily(PREFIX + "hold_failures", "failed attempts of held takes",
                                    labels=["step"])  # fmt: skip
        for step, n in sorted(s.hold.failures.items()):
            fails.add_metric([step], float(n))
        yield fails
        held = GaugeMetricFamily(PREFIX + "held", "1 while a step is held (not committing)",
                                 labels=["step"])  # fmt: skip
        for step in sorted(s.hold.held):
            held.add_metric([step], 1.0)
        yield held
        dead = CounterMetricFamily(PREFIX + "dead_letters", "dead letters filed, by reason",
                                   labels=["reason"])  # fmt: skip
        for reason, n in sorted(s.dead.counts.items()):
            dead.add_metric([reason], float(n))
        yield dead
        unknown = GaugeMetricFamily(
            PREFIX + "cache_unknown",
            "1 while a worker's events say its cache is unknown (degraded sidecar)",
            labels=["worker"],
        )
        for w in sorted(s.cache_unknown):
            unknown.add_metric([str(w)], 1.0)
        yield unknown
        yield CounterMetricFamily(PREFIX + "cache_unknown_reports", "workers reported degraded",
                                  value=float(s.cache_unknown_reports))  # fmt: skip
        yield GaugeMetricFamily(PREFIX + "last_rebuild_seconds",
                                "wall time of the latest shard rebuild from kv-events",
                                value=float(s.last_rebuild_s))  # fmt: skip
        hops = HistogramMetricFamily(
            PREFIX + "hop_ms", "where an event's time goes, per hop, ms", labels=["hop"]
        )
        for hop, h in s.hops.items():
            buckets = [(_le(b), float(c)) for b, c in h.cumulative()]
            hops.add_metric([hop], buckets, h.sum_ms)
        yield hops
        yield GaugeMetricFamily(PREFIX + "last_recovery_seconds",
                                "wall time of the latest shard recovery (checkpoint + tail)",
                                value=float(s.last_recovery_s))  # fmt: skip


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(bound)


def serve_metrics(shell: PipelineShell, port: int, host: str = "127.0.0.1") -> int:
    """Serve ``/metrics`` for ``shell`` on ``host:port`` (0: a free port); returns the port."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ShellCollector(shell))
    server, _ = start_http_server(port, addr=host, registry=registry)
    return int(server.server_address[1])
