"""The emulated worker's ``GET /metrics``: SGLang 0.5.23's Prometheus names, labels and buckets
for what the emulation can honestly compute.

SGLang serves ``/metrics`` only with ``--enable-metrics`` (``http_server.py``'s lifespan mounts
``add_prometheus_middleware`` when ``enable_metrics``; without it the route does not exist: 404),
and so does the emulated worker (``EmulatedConfig.enable_metrics``; the route is
``server.metrics``). Names, types, label names
and default buckets are those of ``sglang/srt/observability/metrics_collector.py``
(``SchedulerMetricsCollector``, ``TokenizerMetricsCollector``; checked against that file by
``tests/integration/test_workers_sglang_metrics.py``):

- scheduler gauges, labels ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank`` (the
  ``labels`` dict of ``SchedulerMetricsCollectorContext.init_new``; ``dp_rank`` only with DP,
  which the emulated worker does not have; ``engine_type`` ``unified``/``prefill``/``decode`` as
  ``DisaggregationMode.to_engine_type``): ``num_running_reqs``, ``num_queue_reqs``,
  ``token_usage``, ``num_used_tokens``, ``kv_used_tokens``, ``kv_evictable_tokens``,
  ``kv_available_tokens`` (``Engine.kv_token_stats``), ``cache_hit_rate`` (the last prefill's,
  as SGLang reports the last prefill batch's), ``max_total_num_tokens``, ``page_size``,
  ``num_pages``, ``context_len``; with a DRAM tier (SGLang's HiCache host pool)
  ``hicache_host_used_tokens`` and ``hicache_host_total_tokens``;
- tokenizer metrics, labels ``model_name, engine_type`` (``tokenizer_metric_labels``), per
  finished request as ``observe_one_finished_request`` records it: ``prompt_tokens_total``,
  ``generation_tokens_total``, ``num_requests_total`` and ``e2e_request_latency_seconds`` (label
  ``is_streaming``), ``cached_tokens_total`` (``cache_source`` ``device``/``host``),
  ``prompt_tokens_histogram``, ``uncached_prompt_tokens_histogram``,
  ``generation_tokens_histogram``; ``time_to_first_token_seconds`` (``is_streaming``) at the
  first output SGLang would send (a stream's first token; a non-streamed request's 50th token,
  ``SGLANG_FORCE_STREAM_INTERVAL``, or its end; never on a PD prefill worker or an abort);
  ``num_aborted_requests_total``.

Times are wall seconds as a scraper sees them (``--time-scale`` shrinks them with every sleep).
Not emitted, because the emulation has nothing true to put there: throughput, speculative
decoding, grammar, LoRA, memory in GB, CUDA graphs, inter-token latency. The exposition is
Prometheus text format 0.0.4 as ``prometheus_client``'s multiprocess collector writes it for
SGLang (``mostrecent`` gauges carry no ``pid`` label; no ``_created`` samples). Must not: hold
engine state.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kvcompass.types import Tier
from workers.emulated.engine import Engine

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
TOKENIZER_LABELS = ("model_name", "engine_type")
FORCE_STREAM_INTERVAL = 50
"""SGLang's ``SGLANG_FORCE_STREAM_INTERVAL`` default: a non-streamed request's output goes to the
tokenizer manager every this many tokens (``output_streamer.py``), so its TTFT is observed then."""

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)
TOKEN_BUCKETS = (
    100, 300, 500, 700, 1000, 1500, 2000, 3000, 4000, 5000, 6000, 7000, 8000, 9000, 10000,
    12500, 15000, 17500, 20000, 22500, 25000, 27500, 30000, 35000, 40000, 60000, 80000, 100000,
    200000, 300000, 400000, 600000, 800000, 1000000, 1100000,
)  # fmt: skip
"""SGLang's default buckets: ``bucket_time_to_first_token``, ``bucket_e2e_request_latency`` and
``default_bucket_prompt_tokens`` (also the generation-token histogram's default)."""

HELP: dict[str, str] = {
    "num_running_reqs": "Requests running.",
    "num_queue_reqs": "Requests waiting in the queue.",
    "token_usage": "Used share of the KV pool.",
    "num_used_tokens": "Tokens held by running requests.",
    "kv_used_tokens": "KV pool slots running requests hold.",
    "kv_evictable_tokens": "KV pool slots of cache nobody holds.",
    "kv_available_tokens": "Free KV pool slots.",
    "cache_hit_rate": "Prefix cache hit rate of the last prefill.",
    "max_total_num_tokens": "KV pool capacity in tokens.",
    "page_size": "KV page size in tokens.",
    "num_pages": "KV pages in the pool.",
    "context_len": "Context length.",
    "hicache_host_used_tokens": "Tokens in the host (DRAM) KV tier.",
    "hicache_host_total_tokens": "Capacity of the host (DRAM) KV tier in tokens.",
    "prompt_tokens_total": "Prompt tokens of finished requests.",
    "generation_tokens_total": "Generated tokens of finished requests.",
    "num_requests_total": "Finished requests.",
    "cached_tokens_total": "Cached prompt tokens by source.",
    "num_aborted_requests_total": "Aborted requests.",
    "prompt_tokens_histogram": "Prompt lengths.",
    "uncached_prompt_tokens_histogram": "Uncached prompt lengths.",
    "generation_tokens_histogram": "Generated lengths.",
    "time_to_first_token_seconds": "Time to first token, seconds.",
    "e2e_request_latency_seconds": "Request latency, seconds.",
}


def _num(v: float) -> str:
    """A value as ``prometheus_client`` writes it (``floatToGoString``)."""
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if math.isnan(v):
        return "NaN"
    return repr(float(v))


def _escape(value: str) -> str:
    """A label value escaped as the text format wants (backslash, newline, double quote)."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    body = ",".join(f'{k}="{_escape(v)}"' for k, v in pairs)
    return "{" + body + "}" if body else ""


@dataclass(slots=True)
class Histogram:
    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value


Key = tuple[str, tuple[tuple[str, str], ...]]
"""(metric name without ``sglang:``, extra label pairs)."""


class WorkerMetrics:
    """Counters and histograms of finished requests; gauges are read at scrape time."""

    def __init__(self, model: str, disaggregation_mode: str) -> None:
        engine_type = (
            disaggregation_mode if disaggregation_mode in ("prefill", "decode") else "unified"
        )
        self.prefill_only = disaggregation_mode == "prefill"
        self.tokenizer_labels = (("model_name", model), ("engine_type", engine_type))
        self.scheduler_labels = (*self.tokenizer_labels, ("tp_rank", "0"), ("pp_rank", "0"),
                                 ("moe_ep_rank", "0"))  # fmt: skip
        self.counters: dict[Key, float] = {}
        self.histograms: dict[Key, Histogram] = {}

    def _inc(self, name: str, value: float, extra: tuple[tuple[str, str], ...] = ()) -> None:
        key = (name, extra)
        self.counters[key] = self.counters.get(key, 0.0) + value

    def _observe(self, name: str, bounds: Sequence[float], value: float,
                 extra: tuple[tuple[str, str], ...] = ()) -> None:  # fmt: skip
        key = (name, extra)
        h = self.histograms.get(key)
        if h is None:
            h = self.histograms[key] = Histogram(tuple(float(b) for b in bounds))
        h.observe(value)

    def first_output(self, ttft_s: float, stream: bool) -> None:
        if not self.prefill_only:
            self._observe("time_to_first_token_seconds", TTFT_BUCKETS, ttft_s, _stream(stream))

    def finished(self, prompt: int, generated: int, device: int, host: int, e2e_s: float,
                 stream: bool) -> None:  # fmt: skip
        s = _stream(stream)
        self._inc("prompt_tokens_total", prompt, s)
        self._inc("generation_tokens_total", generated, s)
        for source, n in (("device", device), ("host", host)):
            if n > 0:
                self._inc("cached_tokens_total", n, (("cache_source", source),))
        self._inc("num_requests_total", 1, s)
        self._observe("e2e_request_latency_seconds", E2E_BUCKETS, e2e_s, s)
        self._observe("prompt_tokens_histogram", TOKEN_BUCKETS, prompt)
        self._observe("uncached_prompt_tokens_histogram", TOKEN_BUCKETS, prompt - device - host)
        self._observe("generation_tokens_histogram", TOKEN_BUCKETS, generated)

    def aborted(self) -> None:
        self._inc("num_aborted_requests_total", 1)

    def render(self, engine: Engine, context_len: int) -> str:
        out: list[str] = []
        for name, value in _gauges(engine, context_len):
            out += _head(name, "gauge")
            out.append(f"sglang:{name}{_labels(self.scheduler_labels)} {_num(value)}")
        by_name: dict[str, list[tuple[tuple[tuple[str, str], ...], float]]] = {}
        for (name, extra), v in sorted(self.counters.items()):
            by_name.setdefault(name, []).append((extra, v))
        for name, rows in by_name.items():
            out += _head(name, "counter")
            out += [f"sglang:{name}{_labels((*self.tokenizer_labels, *e))} {_num(v)}"
                    for e, v in rows]  # fmt: skip
        hists: dict[str, list[tuple[tuple[tuple[str, str], ...], Histogram]]] = {}
        for (name, extra), h in sorted(self.histograms.items(), key=lambda kv: kv[0]):
            hists.setdefault(name, []).append((extra, h))
        for name, hrows in hists.items():
            out += _head(name, "histogram")
            for extra, h in hrows:
                base = (*self.tokenizer_labels, *extra)
                acc = 0
                for bound, n in zip((*h.bounds, math.inf), h.counts, strict=True):
                    acc += n
                    le = _labels((*base, ("le", _num(bound))))
                    out.append(f"sglang:{name}_bucket{le} {_num(acc)}")
                out.append(f"sglang:{name}_sum{_labels(base)} {_num(h.total)}")
                out.append(f"sglang:{name}_count{_labels(base)} {_num(acc)}")
        return "\n".join(out) + "\n"


def _stream(stream: bool) -> tuple[tuple[str, str], ...]:
    return (("is_streaming", "true" if stream else "false"),)


def _head(name: str, kind: str) -> list[str]:
    return [f"# HELP sglang:{name} {HELP[name]}", f"# TYPE sglang:{name} {kind}"]


def _gauges(engine: Engine, context_len: int) -> list[tuple[str, float]]:
    cache, ld = engine.cache, engine.loads
    p = cache.page_size
    cap = cache.vram_pages * p
    used, evictable, available = engine.kv_token_stats()
    hit = (
        ld.last_prefill_cached_tokens / ld.last_prefill_prompt_tokens
        if ld.last_prefill_prompt_tokens
        else 0.0
    )
    rows: list[tuple[str, float]] = [
        ("num_running_reqs", ld.running), ("num_queue_reqs", ld.waiting),
        ("cache_hit_rate", hit), ("token_usage", used / cap if cap else 0.0),
        ("num_used_tokens", used), ("kv_available_tokens", available),
        ("kv_evictable_tokens", evictable), ("kv_used_tokens", used),
        ("max_total_num_tokens", cap), ("page_size", p), ("num_pages", cache.vram_pages),
        ("context_len", context_len),
    ]  # fmt: skip
    if cache.dram_pages > 0:
        rows += [("hicache_host_used_tokens", cache.usage_tokens(Tier.DRAM)),
                 ("hicache_host_total_tokens", cache.dram_pages * p)]  # fmt: skip
    return rows
