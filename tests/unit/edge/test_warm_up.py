"""The edge's start-up warm-up reaches every kernel and leaves the service's deciders untouched."""

from __future__ import annotations

import numpy as np

from edge.app import assemble
from edge.config import EdgeConfig
from edge.main import warm_up
from tests.unit.edge.test_handlers import DEP, MODEL


def test_warm_up__rehearses_scratch_deciders_and_changes_nothing_that_serves() -> None:
    cfg = EdgeConfig.from_mapping({"region": "a", "model": MODEL, "loads_poll_period_ms": 0.0})
    app = assemble(cfg, DEP)
    svc = app.service
    assert app.scratch_deciders is not None
    scratch = app.scratch_deciders()
    assert [d.books for d in scratch] == [True, False]  # one per KVCompass scheme
    assert all(d not in svc.deciders.values() for d in scratch)
    now = svc.clock_ms()
    before = {n: d.gauges(now) for n, d in svc.deciders.items()}
    warm_up(app)
    for name, d in svc.deciders.items():
        assert d.open_forwards() == 0
        # belief and queue estimates as before (the one undispatched decision refreshes the
        # local estimates' reading time from the empty booking: their age, not their value)
        for a, b in zip(before[name][:2], d.gauges(now)[:2], strict=True):
            assert np.array_equal(a, b, equal_nan=True), name
