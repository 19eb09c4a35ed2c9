"""The process-level launcher and its fault scenarios, short versions (``e2e.cluster``,
``e2e.faults``).

A small 3-region deployment (us 2, eu 1, asia 1 workers) runs as real ``kvcompass`` processes:
maintenance units, emulated workers + sidecars, one edge per region. Under a background load,
maintenance crash / edge restart / queue-vector drop / a 1 MB poison record / index-ops lost /
a sidecar SIGKILLed mid-stream (shared session broker) and a broker restart (a broker of its
own, started by the cluster in ``tmp_path``) each keep requests served, and afterwards every
edge's view equals the truth rebuilt from ``kv-events``, every accepted event is in
``index-ops``, and every engine's published batches imply what ``kv-events`` says its worker
holds (``e2e.engine_check``). No process outlives the cluster, also when start-up fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from e2e.cluster import ClusterError, ClusterSpec, LocalCluster
from e2e.faults import BackgroundLoad, ScenarioResult, run_scenarios
from tests.integration.small_deployment import small_deployment as _deployment

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


def _gone(pids: list[int]) -> bool:
    """Every pid is gone (or a zombie of someone else's: never ours, we reaped them)."""
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in ("Z", "X"):
            return False
    return True


def _assert_checked(res: ScenarioResult, n_workers: int) -> None:
    assert res.error is None, res.error
    assert res.load.served > 0, res.load
    assert res.views is not None and res.events is not None
    for region, (checked, mismatched, _) in res.views.per_edge.items():
        assert checked > 0, (region, res.views)
        assert mismatched == 0, (region, res.views.examples)
    assert res.events.with_ops > 0
    assert res.events.lost == 0, str(res.events)
    assert res.events.logged_key_ops == res.events.expected_key_ops, str(res.events)
    # the engine side: every worker's published batches imply what kv-events says it holds
    assert res.engines is not None and res.engines.ok, res.engines
    assert not res.engines.incomplete and len(res.engines.per_worker) == n_workers, res.engines
    assert all(e == k > 0 for e, k, _ in res.engines.per_worker.values()), res.engines


def test_faults__shared_broker__served_views_equal_truth_nothing_lost(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    spec = ClusterSpec(
        deployment=_deployment(tmp_path, 2),
        time_scale=0.05,
        n_maintenance=2,
        bootstrap_servers=kafka_bootstrap,
        topic_prefix=topic_prefix,
    )
    cluster = LocalCluster(spec, tmp_path / "run")
    with cluster:
        assert cluster.startup_s is not None
        load = BackgroundLoad(cluster.edge_urls, clients=3, seed=1)
        results = run_scenarios(
            cluster,
            [
                "maintenance-crash",
                "edge-restart",
                "queue-vectors-drop",
                "poison-record",
                "index-ops-lost",
                "sidecar-crash",
            ],
            hold_s=3.0,
            settle_s=2.0,
            load=load,
        )
        for res in results:
            _assert_checked(res, cluster.n_workers)
        restart = results[1]
        restarted = cluster.regions[1]
        others = [t.served for r, t in restart.load.per_edge.items() if r != restarted]
        assert others and all(n > 0 for n in others), restart.load  # the other edges served
        assert restart.load.failed == 0, restart.load.errors  # refused while down, never 5xx
        poison = results[3]
        assert poison.events is not None and poison.events.dead_letters >= 1  # and nothing lost
        lost = results[4]  # every shard's index-ops tail deleted: rebuilt from kv-events
        healed = sum(cluster.spawner.children[f"maintenance-{i}"].log_path.read_text(
            errors="replace").count("self-healed") for i in range(2))  # fmt: skip
        assert healed >= 1, "no shard rebuilt itself from kv-events"
        print(f"index-ops-lost: {lost.fault}; {healed} shard rebuilds; views {lost.views}; "
              f"events {lost.events}")  # fmt: skip

        crash = results[5]  # SIGKILLed mid-stream: the restart replayed the engine's buffer
        assert "every batch again from the engine's replay buffer" in crash.fault, crash.fault
        print(f"sidecar-crash: {crash.fault}; {crash.engines.line() if crash.engines else ''}")

        cluster.flush_caches()
        after = cluster.check_views()
        assert after.entries == 0 and after.ok, str(after)
        pids = [c.pid for c in cluster.spawner.children.values() if c.pid is not None]
        assert len(pids) == 2 + 4 + 4 + 3  # maintenance, workers, sidecars, edges
    assert _gone(pids)


def test_broker_restart__own_broker__served_and_nothing_lost(tmp_path: Path) -> None:
    spec = ClusterSpec(deployment=_deployment(tmp_path, 1), time_scale=0.05, n_maintenance=1)
    cluster = LocalCluster(spec, tmp_path / "run")
    with cluster:
        assert cluster.broker is not None
        (res,) = run_scenarios(
            cluster,
            ["broker-restart"],
            hold_s=0.0,
            settle_s=3.0,
            load=BackgroundLoad(cluster.edge_urls, clients=3, seed=2),
        )
        _assert_checked(res, cluster.n_workers)
        pids = [c.pid for c in cluster.spawner.children.values() if c.pid is not None]
        broker_pid = cluster.broker.running_pid()
    assert _gone([*pids, broker_pid])


def test_start_failure__names_the_process_and_its_log__no_orphans(
    tmp_path: Path, kafka_bootstrap: str, topic_prefix: str
) -> None:
    cluster = LocalCluster(
        ClusterSpec(
            deployment=_deployment(tmp_path, 1),
            time_scale=0.05,
            n_maintenance=1,
            bootstrap_servers=kafka_bootstrap,
            topic_prefix=topic_prefix,
            edge_scheme="no-such-scheme",
            start_timeout_s=60.0,
        ),
        tmp_path / "run",
    )
    with pytest.raises(ClusterError) as err:
        cluster.start()
    text = str(err.value)
    assert "edge-" in text and "exited with code" in text and str(cluster.logs) in text
    assert "no-such-scheme" in text  # the tail of the edge's log says why
    pids = [c.pid for c in cluster.spawner.children.values() if c.pid is not None]
    assert pids and _gone(pids)
    assert os.path.isdir(cluster.logs)
