"""The shipped Grafana dashboard plots what the edge exports, and the edge exports the split.

Every panel query of ``infra/grafana/kvcompass-edge.json`` names only ``kvc_edge_*`` metrics the
edge knows (``edge.metrics.HELP``); after requests through a real edge (``assemble`` + its
service, as the handlers drive it) its ``/metrics`` text carries the routing-visibility counter
with every kind of ``kvcompass.reuse_split``, and ``/debug/explain`` the request's own split.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from edge import debug_views
from edge.app import assemble, gauges
from edge.config import EdgeConfig
from edge.metrics import HELP, PREFIX
from kvcompass.reuse_split import REUSE_KINDS
from tests.unit.edge.test_handlers import DEP, MODEL

DASHBOARD = Path(__file__).resolve().parents[3] / "infra/grafana/kvcompass-edge.json"
_METRIC = re.compile(r"\bkvc_edge_[a-z_]+")


def test_every_panel_queries_metrics_the_edge_exports() -> None:
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10
    named = {m for e in exprs for m in _METRIC.findall(e)}
    known = {PREFIX + k for k in HELP}
    assert named and named <= known, sorted(named - known)
    assert f"{PREFIX}reuse_tokens_total" in named
    kinds = {k for e in exprs for k in re.findall(r'kind="([a-z_]+)"', e)}
    assert kinds <= set(REUSE_KINDS) and len(kinds) >= 4


def test_requests_through_an_edge__split_in_metrics_and_explain() -> None:
    cfg = EdgeConfig.from_mapping({"region": "a", "model": MODEL, "loads_poll_period_ms": 0.0})
    app = assemble(cfg, DEP)
    svc = app.service
    tokens = np.arange(300, dtype=np.int32) % 250
    ex = svc.decide("v-1", tokens)
    w = ex.plan.worker
    svc.dispatch(ex, w, tokens)
    svc.on_accepted("v-1", ex, w)
    svc.on_first_token(ex, w, 0)
    svc.on_done(ex)
    text = svc.metrics.render(gauges(app))
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == f"{PREFIX}reuse_tokens_total"]  # fmt: skip
    assert {s.labels["kind"] for s in samples} == set(REUSE_KINDS)
    assert {s.labels["region"] for s in samples} == {DEP.regions[DEP.worker_region[w]].name}
    explained = debug_views.explain(svc, "v-1")
    assert explained is not None and set(explained["reuse_tokens"]) == set(REUSE_KINDS)
    assert explained["reuse_tokens"]["delivered"] == 0
