"""Prometheus exposition of the edge's counters and gauges (edge.metrics), read back with
``prometheus_client``'s own parser: what a Prometheus server would scrape."""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

from edge.metrics import HELP, Metrics


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def test_render__counters_and_gauges_parse_as_prometheus_text() -> None:
    m = Metrics()
    m.inc("chosen_total", region="eu", worker=8)
    m.inc("chosen_total", region="eu", worker=8)
    m.inc("decisions_total")
    text = m.render([("belief", (("worker", "8"),), 0.5), ("view_staleness_ms", (), float("inf"))])
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["kvc_edge_chosen"].type == "counter"
    assert families["kvc_edge_belief"].type == "gauge"
    assert families["kvc_edge_belief"].documentation == HELP["belief"]
    got = _samples(text)
    assert got[("kvc_edge_chosen_total", (("region", "eu"), ("worker", "8")))] == 2.0
    assert got[("kvc_edge_decisions_total", ())] == 1.0
    assert got[("kvc_edge_belief", (("worker", "8"),))] == 0.5
    assert math.isinf(got[("kvc_edge_view_staleness_ms", ())])
    assert m.get("chosen_total", worker=8, region="eu") == 2 and m.total("chosen_total") == 2


def test_render__label_values_survive_escaping() -> None:
    m = Metrics()
    m.inc("errors_total", type='a"b\\c\nd')
    assert _samples(m.render()) == {("kvc_edge_errors_total", (("type", 'a"b\\c\nd'),)): 1.0}


def test_render__two_edges_in_one_process_do_not_share_counters() -> None:
    a, b = Metrics(), Metrics()
    a.inc("retries_total")
    assert ("kvc_edge_retries_total", ()) in _samples(a.render())
    assert _samples(b.render()) == {}
