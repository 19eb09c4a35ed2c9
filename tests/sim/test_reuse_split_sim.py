"""The simulator's KVCompass reports the routing-visibility split under the edge's names."""

from __future__ import annotations

from kvcompass.reuse_split import REUSE_KINDS
from sim.schemes.kvcompass import KVCompass
from tests.sim.test_decider_replay import _run


def test_a_run_reports_every_kind__consistent_with_each_other() -> None:
    run = _run()
    run.run()
    scheme = run.scheme
    assert isinstance(scheme, KVCompass)
    stats = scheme.finish()
    got = {k: stats[f"reuse_{k}_tokens"] for k in REUSE_KINDS}
    assert got["reusable"] > 0 and got["delivered"] > 0
    assert got["captured"] <= got["reusable"]
    assert 0 <= got["forgone_wan"] <= got["reusable"] - got["captured"]
    assert got["delivered"] >= got["captured"] - got["lost_stale"]
