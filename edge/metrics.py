"""The edge's counters and their Prometheus exposition (``prometheus_client``'s text format).

Owns counter storage (name + sorted label pairs → value) and turning counters plus scrape-time
gauges into the exposition through a ``prometheus_client`` collector, so the format (escaping,
``+Inf``, ``# HELP`` / ``# TYPE``) is the library's, not ours. Counting stays a dict update —
cheap enough for the per-request path, where ``prometheus_client``'s ``Counter.labels().inc()``
takes a lock and a label lookup — and each ``Metrics`` renders through its own
``CollectorRegistry``, never the library's process-global one, so two edges in one process
(tests) do not share counters. Gauges that are state of the router or the views (belief, queue
estimates, staleness) are not stored here: the scrape handler reads them from their owners at
scrape time and passes them to ``render``. Must not know HTTP or routing.

Metric names (all prefixed ``kvc_edge_``) and their help text are ``HELP`` below.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from kvcompass.lag import LagHistogram

PREFIX = "kvc_edge_"
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
"""The ``Content-Type`` of ``render``'s output (text format 0.0.4)."""
Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]
"""(metric name without prefix, labels, value)."""

HELP: dict[str, str] = {
    "requests_total": "HTTP requests by endpoint and status",
    "decisions_total": "routing decisions made",
    "chosen_total": "decisions by chosen region and worker",
    "matched_tokens_total": "prefix tokens the view claimed for the chosen worker",
    "claimed_tokens_total": "claimed tokens of served requests",
    "reused_tokens_total": "tokens the serving worker reported reused",
    "false_hits_total": "served requests that reused fewer tokens than claimed",
    "forward_failures_total": "forwards that failed, by reason",
    "pd_prefill_failures_total": "prefill halves of PD pairs that failed, by reason (edge.pd)",
    "pd_decode_open_requests": "requests this edge has open at each decode worker (edge.pd)",
    "retries_total": "forwards retried on another worker",
    "migrations_total": "migration requests published",
    "migrations_out_of_scope_total": "migration requests dropped: target not among the request's "
    "model or tenant workers",
    "decisions_published_total": "sampled RoutingDecision records published",
    "dead_letters_total": "records sent to the dead-letter topic, by source topic",
    "errors_total": "errors by type",
    "piggybacks_total": "queue vectors piggybacked on responses, by result",
    "patches_applied_total": "index patches applied to the views",
    "patch_stalls_total": "checks that found the index-patches follower not reading records the "
    "broker has (each one logged and the partitions assigned again)",
    "queue_vectors_total": "queue-vector records applied",
    "queue_vector_stalls_total": "checks that found the queue-vectors consumer not reading records "
    "the broker has (logged; the partitions assigned again: wire/consumer_watch.py)",
    "view_files_installed_total": "view files installed from the shared directory",
    "belief": "cache belief b_r per worker",
    "queue_estimate_ms": "queueing estimate Tq per worker, ms",
    "queue_staleness_ms": "ms since each worker's queue estimate was refreshed",
    "view_staleness_ms": "ms since a patch was last applied to the view",
    "index_lag_ms": "ms from a worker's cache event (its sidecar's produce) to its patches "
    "applied to this edge's view (the index allowance the pending holders use)",
    "view_last_seq": "last applied patch sequence per shard",
    "views_present": "view files present",
    "open_requests": "requests this edge is serving (received, not yet answered)",
    "client_disconnect_total": "clients that went away before their response was complete",
    "connections_refused_total": "connections refused at the concurrent-connection cap",
    "relay_headers_stripped_total": "client requests whose X-KVC-* headers were dropped (no valid "
    "relay signature: edge.relay_auth), by reason; each was routed like any client's",
    "stream_write_timeouts_total": "streams ended because their client read nothing for "
    "stream_write_timeout_ms (logged; the client's connection closed)",
    "cache_unknown_total": "times a worker's cache became unknown (sidecar degraded), by worker",
    "reuse_tokens_total": "prompt tokens by where their reusable prefix went (kind: reusable, "
    "captured, forgone_wan, delivered, lost_stale; kvcompass.reuse_split), by serving region and "
    "prefix-family bucket",
    "relays_total": "relayed requests this edge owned, by result (accepted, refused)",
    "refusals_total": "this edge's relays refused by the owning region (re-decided once)",
    "vectors_sent_total": "queue-vector records this edge produced, by kind (vector, announce)",
    "vector_bytes_total": "bytes of the queue-vector records this edge produced",
    "decider_open_forwards": "forwards the decider holds open (dispatched, no answer yet)",
    "cache_unknown": "1 while a worker's cache is unknown (degraded sidecar), by worker",
}
"""Help text per metric name (without prefix); a name missing here gets a generic one."""


def _family(kind: str, name: str, samples: list[tuple[Labels, float]]) -> Metric:
    full = PREFIX + name
    # Counter families are named without "_total"; the library adds it back to the samples.
    base = full.removesuffix("_total") if kind == "counter" else full
    fam = Metric(base, HELP.get(name, f"kvc_edge {kind}"), kind)
    sample_name = base + "_total" if kind == "counter" else base
    for labels, value in samples:
        fam.add_sample(sample_name, dict(labels), value)
    return fam


class _Snapshot(Collector):
    """One scrape: the counters as they are now and the gauges read for this scrape."""

    def __init__(self, counters: dict[str, list[tuple[Labels, float]]], gauges: Iterable[Sample],
                 histograms: Iterable[tuple[str, LagHistogram]] = ()) -> None:  # fmt: skip
        self.counters = counters
        self.gauges: dict[str, list[tuple[Labels, float]]] = {}
        for name, labels, value in gauges:
            self.gauges.setdefault(name, []).append((labels, value))
        self.histograms = list(histograms)

    def collect(self) -> Iterator[Metric]:
        for name, samples in self.counters.items():
            yield _family("counter", name, samples)
        for name, samples in self.gauges.items():
            yield _family("gauge", name, samples)
        for name, h in self.histograms:
            fam = HistogramMetricFamily(PREFIX + name, HELP.get(name, "kvc_edge histogram"))
            buckets = [("+Inf" if b == float("inf") else repr(b), float(c))
                       for b, c in h.cumulative()]  # fmt: skip
            fam.add_metric([], buckets, h.sum_ms)
            yield fam


class Metrics:
    """Counters of one edge process."""

    __slots__ = ("_counters",)

    def __init__(self) -> None:
        self._counters: dict[tuple[str, Labels], float] = {}

    def inc(self, name: str, value: float = 1.0, **labels: str | int) -> None:
        if labels:
            key = (name, tuple(sorted((k, str(v)) for k, v in labels.items())))
        else:
            key = (name, ())
        c = self._counters
        c[key] = c.get(key, 0.0) + value

    def get(self, name: str, **labels: str | int) -> float:
        """One counter's value (0 if never incremented); for tests and the benchmark."""
        key = (name, tuple(sorted((k, str(v)) for k, v in labels.items())))
        return self._counters.get(key, 0.0)

    def total(self, name: str) -> float:
        """Sum of a counter over all its label sets."""
        return sum(v for (n, _), v in self._counters.items() if n == name)

    def render(self, gauges: Iterable[Sample] = (),
               histograms: Iterable[tuple[str, LagHistogram]] = ()) -> str:  # fmt: skip
        """The exposition (``CONTENT_TYPE``): every counter, the given gauges and histograms."""
        by_name: dict[str, list[tuple[Labels, float]]] = {}
        for (name, labels), v in sorted(self._counters.items()):
            by_name.setdefault(name, []).append((labels, v))
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Snapshot(by_name, gauges, histograms))
        return generate_latest(registry).decode("utf-8")
