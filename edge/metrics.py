"""The edge's counters and their Prometheus text exposition (format 0.0.4), without a client lib.

Owns counter storage (name + sorted label pairs → value) and rendering. Gauges that are state
of the router or the views (belief, queue estimates, staleness) are not stored here: the scrape
handler reads them from their owners at scrape time and passes them to ``render``. Must not
know HTTP or routing. Counting is a dict update: cheap enough for the per-request path.

Metric names (all prefixed ``kvc_edge_``): ``requests_total{endpoint,status}``,
``decisions_total``, ``chosen_total{region,worker}``, ``matched_tokens_total``,
``claimed_tokens_total``, ``reused_tokens_total``, ``false_hits_total``, ``forward_failures_total
{reason}``, ``retries_total``, ``migrations_total``, ``decisions_published_total``,
``dead_letters_total{topic}``, ``errors_total{type}``, ``piggybacks_total{result}``,
``patches_applied_total``, ``queue_vectors_total``, ``client_disconnect_total``,
``connections_refused_total``, ``cache_unknown_total{worker}``; gauges ``belief{worker}``,
``queue_estimate_ms{worker}``, ``queue_staleness_ms{worker}``, ``view_staleness_ms``,
``view_last_seq{shard}``, ``in_flight``, ``cache_unknown{worker}`` (1 while degraded).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

PREFIX = "kvc_edge_"
Labels = tuple[tuple[str, str], ...]
Sample = tuple[str, Labels, float]
"""(metric name without prefix, labels, value)."""


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


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

    def render(self, gauges: Iterable[Sample] = ()) -> str:
        """Prometheus text: every counter (TYPE counter), then the given gauges (TYPE gauge)."""
        lines: list[str] = []
        by_name: dict[str, list[tuple[Labels, float]]] = {}
        for (name, labels), v in sorted(self._counters.items()):
            by_name.setdefault(name, []).append((labels, v))
        gauge_names: dict[str, list[tuple[Labels, float]]] = {}
        for name, labels, v in gauges:
            gauge_names.setdefault(name, []).append((labels, v))
        for kind, group in (("counter", by_name), ("gauge", gauge_names)):
            for name, samples in group.items():
                lines.append(f"# TYPE {PREFIX}{name} {kind}")
                for labels, v in samples:
                    lab = ",".join(f'{k}="{_escape(x)}"' for k, x in labels)
                    lines.append(f"{PREFIX}{name}{{{lab}}} {_fmt(v)}" if lab
                                 else f"{PREFIX}{name} {_fmt(v)}")  # fmt: skip
        return "\n".join(lines) + "\n"
