"""Pipeline soak: steady load for minutes; memory, lag and event -> view P99 over time, as a PNG.

One ``kvcompass pipeline worker`` subprocess on fresh topics (local broker of
``KAFKA_BOOTSTRAP_SERVERS``, else one started here); this process produces sidecar-shaped events
(``Workload``: fresh Mixed-sized prompts, each worker evicting its oldest past
``--cache-prompts``, so the index's live set is bounded) at ``--rate`` for ``--minutes``
and follows ``index-patches`` with a view (the edge's follower). Every ``--every`` seconds it
samples: resident memory of the worker, of this process (the sidecar's producer and the edge's
view) and of the broker; the rechunk group's lag on ``kv-events`` and the maintenance group's on
``index-ops`` (records); the event -> view P99 of the interval (the view's own histogram). Flat is
the pass; growth is a bug. Writes ``--out``.png and .json::

    .venv/bin/python bench/pipeline_soak.py --minutes 5 --rate 1000 --out bench/figures/soak
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from bench.pipeline_load import DEP_NAME, broker_pid, event  # noqa: E402
from kvcompass.deployment import builtin_deployment  # noqa: E402
from kvcompass.lag import LagHistogram  # noqa: E402
from kvcompass.layout import TableLayout  # noqa: E402
from kvcompass.levels import Levels  # noqa: E402
from pipeline.rechunk_consumer import rechunk_group  # noqa: E402
from wire.codec import int32_key  # noqa: E402
from wire.config import PipelineConfig  # noqa: E402
from wire.kafka_clients import librdkafka_conf  # noqa: E402
from wire.patch_follower import follow  # noqa: E402
from wire.producer import LINGER_MS  # noqa: E402
from wire.topics import ensure_topics  # noqa: E402


class Workload:
    """Sidecar-shaped events forever, with bounded caches: every worker stores fresh Mixed-sized
    prompts (``bench.pipeline_load``'s shape) and, once it holds ``cache_prompts`` of them,
    evicts its oldest with each store (a ``REMOVED`` of that prompt's keys), so the index's live
    set stays bounded and flat memory is the expectation. ``engine_seq`` grows per worker."""

    def __init__(self, cache_prompts: int, seed: int) -> None:
        from collections import deque

        from sim.workloads.mixed import make_mixed
        from wire.codec import AvroCodec
        from wire.registry import InProcessRegistry

        dep = builtin_deployment(DEP_NAME)
        self.region = np.asarray(dep.worker_region)
        self.levels = Levels.from_deployment(dep)
        self.n_workers = int(self.region.size)
        self.rng = np.random.default_rng(seed)
        self.prompts = make_mixed(50_000, 100.0, len(dep.regions), None, self.rng).prompt_len
        self.codec = AvroCodec(InProcessRegistry())
        self.cap = cache_prompts
        self.held: list[Any] = [deque() for _ in range(self.n_workers)]
        self.seq = [0] * self.n_workers
        self.i = 0
        self._pending: list[tuple[bytes, bytes]] = []

    def next(self) -> tuple[bytes, bytes]:
        if self._pending:
            return self._pending.pop()
        w = int(self.rng.integers(0, self.n_workers))
        lengths = self.levels.registration_lengths(int(self.region[w]))
        lengths = lengths[lengths <= int(self.prompts[self.i % self.prompts.size])]
        self.i += 1
        keys = self.rng.integers(1, 2**62, lengths.size, dtype=np.int64)
        out = [self._record(w, keys, lengths.tolist(), "STORED", "VRAM")]
        self.held[w].append((keys, lengths.tolist()))
        if len(self.held[w]) > self.cap:
            old_keys, old_lengths = self.held[w].popleft()
            out.append(self._record(w, old_keys, old_lengths, "REMOVED", "NONE"))
        first, *rest = out
        self._pending.extend(reversed(rest))
        return first

    def _record(
        self, w: int, keys: Any, lengths: list[int], op: str, tier: str
    ) -> tuple[bytes, bytes]:
        self.seq[w] += 1
        ev = event(w, int(self.region[w]), keys, lengths, self.seq[w])
        ev.update(op=op, tier=tier)
        return self.codec.encode("KvEvent", ev), int32_key(w)


def rss_mb(pid: int | None) -> float:
    if pid is None:
        return float("nan")
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def group_lag(cfg: PipelineConfig, group: str, topic: str, n: int) -> int:
    c = Consumer(librdkafka_conf(cfg, {"group.id": group, "enable.auto.commit": False}))
    try:
        tps = [TopicPartition(topic, p) for p in range(n)]
        done = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        lag = 0
        for p in range(n):
            _, high = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            lag += max(0, int(high) - max(0, done.get(p, 0)))
        return lag
    finally:
        c.close()


def plot(samples: list[dict[str, Any]], out: Path, title: str) -> None:
    t = [s["t_s"] / 60.0 for s in samples]
    fig, ax = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    series = (("worker_rss_mb", "maintenance worker"), ("broker_rss_mb", "broker JVM"),
              ("bench_rss_mb", "sidecar producer + edge view"))  # fmt: skip
    for key, label in series:
        ax[0].plot(t, [s[key] for s in samples], label=label)
    ax[0].set_ylabel("RSS (MB)")
    ax[0].legend()
    ax[1].plot(t, [s["kv_events_lag"] for s in samples], label="kv-events (rechunk)")
    ax[1].plot(t, [s["index_ops_lag"] for s in samples], label="index-ops (maintenance)")
    ax[1].set_ylabel("consumer lag (records)")
    ax[1].legend()
    ax[2].plot(t, [s["view_p99_ms"] for s in samples], label="event -> view P99")
    ax[2].plot(t, [s["view_p50_ms"] for s in samples], label="event -> view P50")
    ax[2].set_ylabel("ms")
    ax[2].set_xlabel("minutes")
    ax[2].legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=100)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--every", type=float, default=10.0)
    ap.add_argument("--cache-prompts", type=int, default=500,
                    help="prompts a worker holds; a store past it evicts the oldest")  # fmt: skip
    ap.add_argument("--out", type=Path, default=Path("bench/figures/pipeline_soak"))
    args = ap.parse_args()
    if args.minutes > 10:
        ap.error("--minutes: at most 10 (a bounded soak)")
    tmp = Path(tempfile.mkdtemp(prefix="kvc-soak-"))
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = None
    if not bootstrap:
        from bench.pipeline import _free_port
        from wire.kafka_local import LocalBroker

        broker = LocalBroker(_free_port(), controller_port=_free_port(), state_dir=tmp / "broker",
                             die_with_parent=True)  # fmt: skip
        bootstrap = broker.up(timeout_s=120)
    cfg = PipelineConfig(bootstrap_servers=bootstrap, n_shards=4,
                         topic_prefix=f"soak-{os.getpid()}-{int(time.time())}.")  # fmt: skip
    ensure_topics(AdminClient(librdkafka_conf(bootstrap)), cfg)
    log = tmp / "worker.log"
    worker = subprocess.Popen(
        [sys.executable, "-m", "cli", "pipeline", "worker", "--bootstrap", bootstrap,
         "--topic-prefix", cfg.topic_prefix, "--n-shards", "4", "--deployment", DEP_NAME,
         "--loglevel", "warning"], stdout=log.open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    dep = builtin_deployment(DEP_NAME)
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    sync = follow(cfg, layout, Levels.from_deployment(dep).matrix, None)
    prod = Producer(librdkafka_conf(cfg, {"enable.idempotence": True, "linger.ms": LINGER_MS}))
    source = Workload(args.cache_prompts, seed=11)
    app = f"{cfg.topic_prefix}kvcompass-pipeline"
    samples: list[dict[str, Any]] = []
    bpid = broker_pid()
    try:
        start = time.perf_counter()
        next_sample = start + args.every
        sent = 0
        while time.perf_counter() - start < args.minutes * 60:
            due = int((time.perf_counter() - start) * args.rate)
            while sent < due:
                value, key = source.next()
                prod.produce(cfg.topics.kv_events, value, key)
                sent += 1
            prod.poll(0)
            sync.poll(50_000, 0.002)
            if time.perf_counter() >= next_sample:
                lag = sync.applier.event_to_view
                sync.applier.event_to_view = LagHistogram()  # per interval
                samples.append({
                    "t_s": time.perf_counter() - start, "events": sent,
                    "worker_rss_mb": rss_mb(worker.pid), "bench_rss_mb": rss_mb(os.getpid()),
                    "broker_rss_mb": rss_mb(bpid),
                    "kv_events_lag": group_lag(cfg, rechunk_group(app), cfg.topics.kv_events,
                                               cfg.kv_events_partitions),
                    "index_ops_lag": group_lag(cfg, app, cfg.topics.index_ops, cfg.n_shards),
                    "view_p50_ms": lag.quantile(0.5), "view_p99_ms": lag.quantile(0.99),
                    "load_avg_1m": os.getloadavg()[0],
                })  # fmt: skip
                print(json.dumps(samples[-1]), flush=True)
                next_sample += args.every
    finally:
        worker.terminate()
        worker.wait(60)
        sync.close()
        if broker is not None:
            broker.down()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"rate": args.rate, "samples": samples, "date": time.strftime("%Y-%m-%d")}
    args.out.with_suffix(".json").write_text(json.dumps(record))
    p99 = np.array([s["view_p99_ms"] for s in samples])
    title = (f"pipeline soak: {args.rate:,.0f} events/s, {args.minutes:g} min, 1 maintenance "
             f"process (view P99 median {np.nanmedian(p99):,.0f} ms)")  # fmt: skip
    plot(samples, args.out, title)
    print(f"wrote {args.out.with_suffix('.png')} and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
