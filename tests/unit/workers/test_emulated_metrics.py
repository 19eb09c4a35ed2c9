"""workers.emulated.metrics: the exposition parses as Prometheus text (a model name with quotes,
a backslash and a newline included), histograms are cumulative, and a PD prefill worker records
no TTFT (SGLang's prefill servers never observe one) and is labelled ``engine_type="prefill"``.
The names against SGLang's own source: tests/integration/test_workers_sglang_metrics.py."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from workers.emulated.cache import PrefixCache
from workers.emulated.costs import EmulatedCosts
from workers.emulated.engine import Engine
from workers.emulated.metrics import WorkerMetrics


class _NoEvents:
    async def publish(self, events: object) -> None:
        return None


def _engine() -> Engine:
    return Engine(PrefixCache(16, 1024, 0), EmulatedCosts(time_scale=0.0), _NoEvents())  # type: ignore[arg-type]


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip


def test_exposition_parses__odd_model_name__cumulative_buckets() -> None:
    model = 'm "x"\\y\nz'
    m = WorkerMetrics(model, "null")
    for ttft in (0.05, 0.3, 500.0):
        m.first_output(ttft, stream=True)
    m.finished(100, 3, 64, 16, 0.5, stream=True)
    m.aborted()
    got = _samples(m.render(_engine(), 4096))
    lab = (("engine_type", "unified"), ("model_name", model))
    le = {k: v for (n, k), v in got.items() if n == "sglang:time_to_first_token_seconds_bucket"}
    assert le[(*lab[:1], ("is_streaming", "true"), ("le", "0.1"), lab[1])] == 1.0
    assert le[(*lab[:1], ("is_streaming", "true"), ("le", "0.4"), lab[1])] == 2.0
    assert le[(*lab[:1], ("is_streaming", "true"), ("le", "400.0"), lab[1])] == 2.0
    assert le[(*lab[:1], ("is_streaming", "true"), ("le", "+Inf"), lab[1])] == 3.0
    assert got[("sglang:cached_tokens_total", (("cache_source", "host"), *lab))] == 16
    assert got[("sglang:uncached_prompt_tokens_histogram_sum", lab)] == 20.0
    assert got[("sglang:num_aborted_requests_total", lab)] == 1.0
    assert got[("sglang:context_len", (*lab, ("moe_ep_rank", "0"), ("pp_rank", "0"),
                                       ("tp_rank", "0")))] == 4096.0  # fmt: skip


def test_a_pd_prefill_worker_records_no_ttft_and_says_prefill() -> None:
    m = WorkerMetrics("m", "prefill")
    m.first_output(0.2, stream=False)
    m.finished(10, 1, 0, 0, 0.2, stream=False)
    text = m.render(_engine(), 100)
    assert "time_to_first_token" not in text
    assert 'engine_type="prefill"' in text and 'engine_type="unified"' not in text
