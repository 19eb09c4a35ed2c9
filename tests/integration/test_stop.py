"""Every process stops when told (issue 26 item 4), broker or no broker.

(a) A pipeline worker whose rechunk take is held (the broker refuses its dead letter) stops on
SIGTERM at once: the held step is abandoned, its take stays unacknowledged (before: Faust's
``wait_empty`` waited for it, 13 minutes until SIGKILL). Session broker.
(b) A small deployment (``e2e.LocalCluster``: maintenance, emulated worker + sidecar per worker,
an edge per region) on a broker of its own; the broker is stopped under load; then each process
kind gets SIGTERM and must exit before a generous deadline (its stop timeout, 30 s, plus slack),
saying in its log what it could not flush. Before: the sidecar and the maintenance unit did not
exit within 60 s. Since issue 35 item 7 every process with a broker sees at SIGTERM that it is
unreachable and takes the short stop (``wire.stopping``: under 5 s, each broker-bound wait 1 s;
the exit times are printed, and measured by ``bench/outage_logs.py``, not asserted).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from e2e.cluster import ClusterSpec, LocalCluster
from e2e.faults import BackgroundLoad
from tests.integration.small_deployment import small_deployment
from tests.integration.test_pipeline_hostile import _set_max_message_bytes
from tests.integration.test_pipeline_worker import WAIT_S, Feed, Worker, _wait
from wire.config import PipelineConfig
from wire.kafka_local import LocalBroker
from wire.topics import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EXIT_BY_S = 75.0
"""Generous: the 30 s stop timeout (an edge: its 10 s drain + 30 s) plus a loaded machine."""


def _exit_time(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> float:
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        proc.wait(EXIT_BY_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise AssertionError(f"still alive {EXIT_BY_S:.0f} s after SIGTERM") from None
    return time.monotonic() - t0


@pytest.mark.timeout(300)
def test_held_unit_stops_on_sigterm__take_abandoned_not_awaited(
    kafka_bootstrap: str, kafka_admin: AdminClient, topic_prefix: str, tmp_path: Path
) -> None:
    cfg = PipelineConfig(bootstrap_servers=kafka_bootstrap, n_shards=3, topic_prefix=topic_prefix)
    ensure_topics(kafka_admin, cfg)
    worker = Worker(cfg, tmp_path / "worker.log")
    feed = Feed(cfg, seed=5)
    _set_max_message_bytes(kafka_admin, cfg.topics.dead_letters, 300)
    try:
        worker.start()
        feed.raw(cfg.topics.kv_events, b"\x7b" + b"z" * 400, b"\x00\x00\x00\x00", 0)
        feed.send(50)
        log = worker.log
        _wait(lambda: "rechunk held (attempt" in log.read_text(errors="replace"), WAIT_S,
              "rechunk to hold")  # fmt: skip
        assert worker.proc is not None
        took = _exit_time(worker.proc)
        text = log.read_text(errors="replace")
        assert "abandoned at stop" in text, text[-3000:]
        assert worker.proc.returncode == 0, text[-3000:]
        print(f"held pipeline worker: exited {took:.1f} s after SIGTERM")
    finally:
        _set_max_message_bytes(kafka_admin, cfg.topics.dead_letters, 1_048_588)
        worker.stop()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def broker_gone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A started small cluster under a little load whose broker has then been stopped."""
    tmp = tmp_path_factory.mktemp("stop")
    broker = LocalBroker(_free_port(), controller_port=_free_port(), state_dir=tmp / "broker",
                         die_with_parent=True)  # fmt: skip
    broker.up(timeout_s=180)
    spec = ClusterSpec(deployment=small_deployment(tmp, 1), time_scale=0.05, n_maintenance=1,
                       bootstrap_servers=broker.bootstrap)  # fmt: skip
    cluster = LocalCluster(spec, tmp / "run")
    try:
        cluster.start()
        load = BackgroundLoad(cluster.edge_urls, clients=2, seed=3)
        load.start()
        load.phase("before")
        time.sleep(5)
        broker.down()  # the broker is gone for good, with records in flight
        time.sleep(8)
        load.pause(20)
        load.stop()
        yield cluster
    finally:
        cluster.stop()
        broker.down()


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("sidecar-0", ("records not delivered", "every record delivered")),
        ("maintenance-0", ("not done:", "did not stop within", "final checkpoints")),
        ("edge-us", ("serving on",)),  # no extra line needed: it exits cleanly
        ("worker-0", ("",)),
    ],
)
def test_process_stops_on_sigterm__broker_gone(
    broker_gone: LocalCluster, name: str, says: tuple[str, ...]
) -> None:
    child = broker_gone.spawner.children[name]
    assert child.popen is not None and child.alive(), child.log_tail()
    broker_gone.expect_down(name, True)
    size = child.log_path.stat().st_size
    took = _exit_time(child.popen)
    text = child.log_path.read_bytes().decode(errors="replace")
    tail = text[size:]
    assert any(s in text for s in says), tail[-3000:]
    assert child.popen.returncode in (0, 3), (child.popen.returncode, tail[-3000:])
    if name != "worker-0":  # the emulated worker has no broker
        assert "stopping with the broker unreachable" in tail, tail[-3000:]
    errors = sum(1 for line in tail.splitlines() if " ERROR " in line or "|FAIL|" in line)
    print(f"{name}: exited {took:.1f} s after SIGTERM, status {child.popen.returncode}, "
          f"{errors} ERROR lines while stopping")  # fmt: skip
