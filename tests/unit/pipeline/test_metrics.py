"""The pipeline worker's /metrics: the shell's counters, parsed back with prometheus_client."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from pipeline.metrics import serve_metrics
from tests.unit.pipeline.test_shell import _shell


def test_metrics_expose_rebuilds_holds_and_dead_letters__scrape() -> None:
    shell, _ = _shell()
    shell.rebuilds = 2
    shell.checkpoints.written = 3
    shell.last_recovery_s = 1.5
    shell.hold.failures["maintain[1]"] = 3
    shell.hold.held["maintain[1]"] = "RecoveryRefused: shard 1"
    shell.dead.counts["UNDECODABLE"] = 4
    port = serve_metrics(shell, 0)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert samples[("kvc_pipeline_rebuilds_total", ())] == 2
    assert samples[("kvc_pipeline_checkpoints_total", ())] == 3
    assert samples[("kvc_pipeline_last_recovery_seconds", ())] == 1.5
    assert samples[("kvc_pipeline_hold_failures_total", (("step", "maintain[1]"),))] == 3
    assert samples[("kvc_pipeline_held", (("step", "maintain[1]"),))] == 1
    assert samples[("kvc_pipeline_dead_letters_total", (("reason", "UNDECODABLE"),))] == 4
