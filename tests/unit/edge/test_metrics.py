"""Prometheus text exposition of the edge's counters and gauges (edge.metrics)."""

from __future__ import annotations

from edge.metrics import Metrics


def test_render__counters_and_gauges_in_text_format() -> None:
    m = Metrics()
    m.inc("chosen_total", region="eu", worker=8)
    m.inc("chosen_total", region="eu", worker=8)
    m.inc("decisions_total")
    text = m.render([("belief", (("worker", "8"),), 0.5), ("view_staleness_ms", (), float("inf"))])
    lines = text.splitlines()
    assert "# TYPE kvc_edge_chosen_total counter" in lines
    assert 'kvc_edge_chosen_total{region="eu",worker="8"} 2' in lines
    assert "kvc_edge_decisions_total 1" in lines
    assert 'kvc_edge_belief{worker="8"} 0.5' in lines
    assert "kvc_edge_view_staleness_ms +Inf" in lines
    assert m.get("chosen_total", worker=8, region="eu") == 2 and m.total("chosen_total") == 2


def test_render__label_values_escaped() -> None:
    m = Metrics()
    m.inc("errors_total", type='a"b\\c\nd')
    assert 'kvc_edge_errors_total{type="a\\"b\\\\c\\nd"} 1' in m.render().splitlines()
