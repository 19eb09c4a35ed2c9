"""The shard-count trap of issue 30, closed: ``kvcompass worker sidecar --n-shards 2`` started
first (as the quickstart does) creates ``index-ops`` / ``index-patches`` with 2 partitions, and
``kvcompass edge --n-shards 2`` on the same broker and prefix agrees with it and serves; an edge
left at the default is refused by name (partitions expected 4, got 2), not silently wrong."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from confluent_kafka.admin import AdminClient

from workers.emulated.costs import EmulatedCosts
from workers.emulated.worker import EmulatedConfig, EmulatedWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]
ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _kvcompass(*argv: str, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KVCOMPASS_")}
    env["PYTHONPATH"] = str(ROOT)
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "cli", *argv], cwd=ROOT, env=env,
                                stdout=out, stderr=subprocess.STDOUT)  # fmt: skip


def _partitions(admin: AdminClient, topic: str) -> int | None:
    meta = admin.list_topics(timeout=10).topics.get(topic)
    return None if meta is None or meta.error is not None else len(meta.partitions)


async def _health(port: int, proc: subprocess.Popen[bytes]) -> int:
    async with aiohttp.ClientSession() as s:
        for _ in range(600):
            if proc.poll() is not None:
                return -1
            try:
                async with s.get(f"http://127.0.0.1:{port}/health") as r:
                    if r.status == 200:
                        return 200
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    return 0


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_sidecar_first_with_2_then_edge_with_2__agree(
    kafka_bootstrap: str, kafka_admin: AdminClient, topic_prefix: str, tmp_path: Path
) -> None:
    kafka = ["--bootstrap-servers", kafka_bootstrap, "--topic-prefix", topic_prefix]
    costs = EmulatedCosts(time_scale=0.0)

    async def scenario() -> tuple[int | None, int, int | None, str]:
        cfg = EmulatedConfig(model="m", port=0, events_endpoint="tcp://127.0.0.1:*",
                             replay_endpoint=None, costs=costs)  # fmt: skip
        async with EmulatedWorker(cfg) as w:
            sidecar = _kvcompass("worker", "sidecar", "--worker-id", "0", "--model", "m",
                                 "--engine-url", w.url, *kafka, "--n-shards", "2",
                                 log=tmp_path / "sidecar.log")  # fmt: skip
            edges: list[subprocess.Popen[bytes]] = []
            try:
                patches = topic_prefix + "index-patches"
                for _ in range(600):
                    if _partitions(kafka_admin, patches) is not None or sidecar.poll() is not None:
                        break
                    await asyncio.sleep(0.1)
                made = _partitions(kafka_admin, patches)
                agree_port, default_port = _free_port(), _free_port()
                common = ["edge", "--region", "us", "--config", "paper-testbed-14x3", "--model",
                          "m", "--worker", f"0={w.url}", *kafka,
                          "--view-dir", str(tmp_path / "views")]  # fmt: skip
                edges.append(_kvcompass(*common, "--port", str(agree_port), "--n-shards", "2",
                                        log=tmp_path / "edge2.log"))  # fmt: skip
                agree = await _health(agree_port, edges[0])
                edges.append(_kvcompass(*common, "--port", str(default_port),
                                        "--view-dir", str(tmp_path / "views4"),
                                        log=tmp_path / "edge4.log"))  # fmt: skip
                code = await asyncio.to_thread(edges[1].wait, 120)
                refused = (tmp_path / "edge4.log").read_text(errors="replace")
                return made, agree, code, refused
            finally:
                for p in (*edges, sidecar):
                    _stop(p)

    made, agree, code, refused = asyncio.run(scenario())
    assert made == 2, (tmp_path / "sidecar.log").read_text(errors="replace")[-2000:]
    assert agree == 200, (tmp_path / "edge2.log").read_text(errors="replace")[-2000:]
    assert code not in (None, 0)
    assert "partitions" in refused and "n_shards" in refused, refused[-2000:]
