"""Pipeline benchmark: key-ops/s through one maintenance process, and event -> view latency.

Against ``KAFKA_BOOTSTRAP_SERVERS``, or a ``wire.kafka_local.LocalBroker`` started here (and
stopped at the end) when it is unset. Each run uses fresh topics (unique prefix) and one real
``kvcompass pipeline worker`` subprocess (rechunk + maintenance agents in one process).

1. Throughput: ``--op-records`` IndexOpBatch records (64 runs of ``--keys-per-run`` fresh keys
   each, as one rechunk take of 64 events would give a shard; records spread over the shards,
   SET to VRAM) are written to ``index-ops`` BEFORE the worker starts; the worker then
   drains the backlog. key-ops/s = key-ops / (last patch's timestamp - first patch's timestamp),
   read back from ``index-patches`` (producer timestamps of the worker).
2. Latency: KvEvents (``--event-keys`` registration keys each, STORED, fresh keys) are produced
   to ``kv-events`` at ``--rate`` events/s for ``--seconds``; a ``PatchFollower`` in this process
   consumes ``index-patches``; every ``--probe-every``-th event is timed from its send to the
   first poll after which the view shows its worker's field set for every key of the event.

``--json`` prints one object with ``ops_per_s``, ``visible_p50_ms``, ``visible_p99_ms`` (and
more). The figures go to ``bench/README.md`` section "Pipeline".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path and its name would shadow the
# ``pipeline`` package; drop the folder (nothing else lives there that we import).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [str(_HERE.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402

from bench.pipeline_load import (  # noqa: E402
    DEP_NAME,
    broker_pid,
    cpu_s,
    event,
    key_ops,
    make_events,
    scrape_hops,
)
from kvcompass.deployment import builtin_deployment  # noqa: E402
from kvcompass.lag import BOUNDS_MS, LagHistogram  # noqa: E402
from kvcompass.layout import TableLayout  # noqa: E402
from kvcompass.levels import Levels  # noqa: E402
from kvcompass.rechunk import EventRef, OpBatch, OpKind  # noqa: E402
from kvcompass.types import Tier  # noqa: E402
from pipeline.shell import HOPS  # noqa: E402
from wire.codec import AvroCodec, int32_key  # noqa: E402
from wire.config import PipelineConfig  # noqa: E402
from wire.index_ops import encode_op_batch  # noqa: E402
from wire.kafka_clients import librdkafka_conf  # noqa: E402
from wire.patch_follower import PatchFollower, follow  # noqa: E402
from wire.patches import decode_value  # noqa: E402
from wire.producer import LINGER_MS  # noqa: E402
from wire.registry import InProcessRegistry  # noqa: E402
from wire.topics import ensure_topics  # noqa: E402

SIDECAR_PRODUCER = {"enable.idempotence": True, "linger.ms": LINGER_MS}
"""The sidecar's producer (``wire.producer.KafkaProducer``)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_worker(cfg: PipelineConfig, log: Path, extra: list[str]) -> subprocess.Popen[bytes]:
    args = ["pipeline", "worker", "--bootstrap", cfg.bootstrap_servers, "--topic-prefix",
            cfg.topic_prefix, "--n-shards", str(cfg.n_shards), "--deployment", DEP_NAME,
            "--loglevel", "warning", *extra]  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli", *args], stdout=log.open("wb"), stderr=subprocess.STDOUT
    )
    return proc


def backlog(cfg: PipelineConfig, n_records: int, keys_per: int, seed: int) -> int:
    """Write op batches to index-ops; return the key-ops written."""
    dep = builtin_deployment(DEP_NAME)
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    codec = AvroCodec(InProcessRegistry())
    rng = np.random.default_rng(seed)
    prod = Producer(librdkafka_conf(cfg, {"linger.ms": 5,
                     "queue.buffering.max.messages": 2_000_000}))  # fmt: skip
    n = cfg.n_shards
    total = 0
    per = 64  # runs per record, like one rechunk take of 64 events for this shard
    for i in range(0, n_records):
        shard = i % n
        runs = []
        for j in range(per):
            worker = int(rng.integers(0, layout.n_workers))
            table, field_ = layout.field_of(worker)
            keys = rng.integers(1, 2**62 // n, keys_per, dtype=np.int64).astype(np.uint64)
            keys = keys * np.uint64(n) + np.uint64(shard)
            runs.append(OpBatch(shard, table, field_, OpKind.SET, Tier.VRAM, keys,
                                EventRef(worker, i * per + j, "bench", 0, i, 0)))  # fmt: skip
            total += keys_per
        value = codec.encode("IndexOpBatch", encode_op_batch(shard, runs))
        prod.produce(cfg.topics.index_ops, value, int32_key(shard), shard)
        prod.poll(0)
    prod.flush(60)
    return total


def drained_span_s(cfg: PipelineConfig, timeout_s: float) -> tuple[float, int]:
    """Seconds between the first and last patch, once every index-ops record is reflected."""
    sid = InProcessRegistry().writer_id("IndexPatch")
    admin_c = Consumer(librdkafka_conf(cfg, {"group.id": "bench"}))
    ends = {}
    for s in range(cfg.n_shards):
        _, high = admin_c.get_watermark_offsets(TopicPartition(cfg.topics.index_ops, s), 10)
        ends[s] = high - 1
    # read only once the worker is done, so this process does not compete with it for CPU
    last_total, still_since = -1, time.monotonic()
    while time.monotonic() - still_since < 2.0:
        time.sleep(0.25)
        total = sum(
            admin_c.get_watermark_offsets(TopicPartition(cfg.topics.index_patches, s), 10)[1]
            for s in range(cfg.n_shards)
        )
        if total != last_total or total == 0:
            last_total, still_since = total, time.monotonic()
    admin_c.close()
    c = Consumer(librdkafka_conf(cfg, {"group.id": "bench-p",
                  "enable.auto.commit": False}))  # fmt: skip
    c.assign([TopicPartition(cfg.topics.index_patches, s, OFFSET_BEGINNING)
              for s in range(cfg.n_shards)])  # fmt: skip
    first: int | None = None
    last, records = 0, 0
    done: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while len(done) < cfg.n_shards and time.monotonic() < deadline:
        for m in c.consume(20_000, 0.2):
            value = m.value()
            if m.error() is not None or value is None:
                continue
            d = decode_value(sid, value)
            records += 1
            first = d.timestamp_ms if first is None else min(first, d.timestamp_ms)
            last = max(last, d.timestamp_ms)
            if d.source_offset >= ends[d.record.shard]:
                done.add(d.record.shard)
    c.close()
    if len(done) < cfg.n_shards or first is None:
        raise TimeoutError(f"backlog not drained in {timeout_s} s (shards done: {done})")
    return max(last - first, 1) / 1000.0, records


def _warm_up(cfg: PipelineConfig, sync: PatchFollower, prod: Any, codec: AvroCodec,
             region: np.ndarray) -> None:  # fmt: skip
    """Events on every shard until all are visible: the first batch of each maintenance actor
    rebuilds its unit (reads two partitions) and must not count as steady-state latency."""
    keys = np.arange(1, 4 * cfg.n_shards + 1, dtype=np.int64) * 7919
    for w in range(cfg.kv_events_partitions):  # every kv-events partition (workers w -> w % P)
        ev = event(w, int(region[w]), keys + w, list(range(16, 16 * keys.size + 1, 16)), -1 - w)
        prod.produce(cfg.topics.kv_events, codec.encode("KvEvent", ev), int32_key(w))
    prod.flush(30)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        sync.poll(50_000, 0.05)
        if all(sync.view.lookup_value(0, int(k)) & 3 == 1 for k in keys):
            return
    raise TimeoutError("warm-up events never became visible")


def throughput(cfg: PipelineConfig, n_events: int, seed: int, urls: list[str],
               workers: list[subprocess.Popen[bytes]]) -> dict[str, Any]:  # fmt: skip
    """A backlog of ``n_events`` written to kv-events as fast as this process can (warmed
    workers already running), then drained: events/s from the first record produced to the
    last key-op applied, and the CPU each process spent per event meanwhile."""
    dep = builtin_deployment(DEP_NAME)
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    codec = AvroCodec(InProcessRegistry())
    sync = follow(cfg, layout, Levels.from_deployment(dep).matrix, None)
    prod = Producer(librdkafka_conf(cfg, {**SIDECAR_PRODUCER, "linger.ms": 20,
                                          "queue.buffering.max.messages": 2_000_000}))  # fmt: skip
    _warm_up(cfg, sync, prod, codec, np.asarray(dep.worker_region))
    sync.close()  # the view is not measured here: this process only writes the backlog
    events = make_events(n_events, seed)
    want = key_ops(urls) + sum(int(e[3].size) for e in events)
    broker = broker_pid()
    cpu0 = [sum(cpu_s(w.pid) for w in workers), cpu_s(broker) if broker else float("nan")]
    load0 = os.getloadavg()[0]
    topic = cfg.topics.kv_events
    first = time.perf_counter()  # the drain counts from the first record produced
    for value, key, _, _ in events:
        while True:
            try:
                prod.produce(topic, value, key)
                break
            except BufferError:
                prod.poll(0.01)
        prod.poll(0)
    prod.flush(120)
    deadline = time.monotonic() + 600
    done = key_ops(urls)
    while done < want and time.monotonic() < deadline:
        time.sleep(0.1)
        done = key_ops(urls)
    span = time.perf_counter() - first
    if done < want:
        raise TimeoutError(f"backlog not drained: {done} of {want} key-ops")
    cpu = [sum(cpu_s(w.pid) for w in workers) - cpu0[0],
           (cpu_s(broker) - cpu0[1]) if broker else float("nan")]  # fmt: skip
    return {"backlog_events": n_events, "drain_s": span,
            "drained_events_per_s": n_events / max(span, 1e-9),
            "drain_cpu_us_per_event": {"workers": cpu[0] / n_events * 1e6,
                                       "broker": cpu[1] / n_events * 1e6},
            "drain_load_avg_1m": [load0, os.getloadavg()[0]]}  # fmt: skip


def latency(cfg: PipelineConfig, rate: float, seconds: float, probe_every: int, seed: int,
            workers: list[subprocess.Popen[bytes]]) -> dict[str, Any]:  # fmt: skip
    dep = builtin_deployment(DEP_NAME)
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    region = np.asarray(dep.worker_region)
    codec = AvroCodec(InProcessRegistry())
    n_events = int(rate * seconds)
    events = make_events(n_events, seed)
    sync = follow(cfg, layout, Levels.from_deployment(dep).matrix, None)
    sync.catch_up(60)
    # the sidecar's producer settings (workers.sinks): what each event waits before the wire
    prod = Producer(librdkafka_conf(cfg, SIDECAR_PRODUCER))
    _warm_up(cfg, sync, prod, codec, region)
    sync.applier.event_to_view = LagHistogram()  # count the measured events only
    sync.applier.patch_to_view = LagHistogram()
    pending: list[tuple[float, int, int, np.ndarray]] = []
    lat_ms: list[float] = []
    broker = broker_pid()
    cpu0 = {"worker": sum(cpu_s(w.pid) for w in workers), "bench": time.process_time(),
            "broker": cpu_s(broker) if broker else float("nan")}  # fmt: skip
    load0 = os.getloadavg()[0]
    start = time.perf_counter()
    sent = 0
    topic = cfg.topics.kv_events
    while sent < n_events or pending:
        now = time.perf_counter()
        due = min(n_events, int((now - start) * rate) + 1)
        while sent < due:
            value, key, w, keys = events[sent]
            prod.produce(topic, value, key)
            if sent % probe_every == 0:
                table, field_ = layout.field_of(w)
                pending.append((time.perf_counter(), table, field_, keys))
            sent += 1
        prod.poll(0)
        sync.poll(50_000, 0.001)
        seen = time.perf_counter()
        still = []
        for t0, table, field_, keys in pending:
            if all((sync.view.lookup_value(table, int(k)) >> (2 * field_)) & 3 == 1 for k in keys):
                lat_ms.append((seen - t0) * 1000.0)
            elif seen - t0 > 30:
                lat_ms.append(float("inf"))
            else:
                still.append((t0, table, field_, keys))
        pending = still
        if sent >= n_events and time.perf_counter() - start > seconds + 60:
            break
    took = time.perf_counter() - start
    cpu = {"worker": sum(cpu_s(w.pid) for w in workers) - cpu0["worker"],
           "bench": time.process_time() - cpu0["bench"],
           "broker": (cpu_s(broker) - cpu0["broker"]) if broker else float("nan")}  # fmt: skip
    view_lag = sync.applier.event_to_view
    fetch = sync.applier.patch_to_view
    sync.close()
    arr = np.array(lat_ms)
    return {
        "offered_events_per_s": rate,
        "achieved_events_per_s": n_events / max(took, 1e-9),
        "keys_per_event": float(np.mean([e[3].size for e in events])),
        "bytes_per_event": float(np.mean([len(e[0]) for e in events])),
        "probes": int(arr.size),
        "lost_probes": int(np.isinf(arr).sum()),
        "visible_p50_ms": float(np.percentile(arr, 50, method="nearest")),
        "visible_p99_ms": float(np.percentile(arr, 99, method="nearest")),
        "visible_max_ms": float(arr.max()),
        "view_lag_p50_ms": view_lag.quantile(0.5),
        "view_lag_p99_ms": view_lag.quantile(0.99),
        "fetch_apply_p50_ms": fetch.quantile(0.5),
        "fetch_apply_p99_ms": fetch.quantile(0.99),
        "cpu_us_per_event": {k: v / max(n_events, 1) * 1e6 for k, v in cpu.items()},
        "load_avg_1m": [load0, os.getloadavg()[0]],
        "view_lag_histogram": view_lag,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--n-shards", type=int, default=4)
    ap.add_argument("--kv-partitions", type=int, default=4, help="kv-events partitions")
    ap.add_argument("--processes", type=int, default=1, help="maintenance processes (one group)")
    ap.add_argument("--op-records", type=int, default=2_000, help="records of 64 runs each")
    ap.add_argument("--keys-per-run", type=int, default=4)
    ap.add_argument("--skip-backlog", action="store_true", help="no index-ops backlog phase")
    ap.add_argument("--backlog-events", type=int, default=0,
                    help="kv-events backlog drained by warmed workers (0: skip)")  # fmt: skip
    ap.add_argument("--rate", type=float, default=10_000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--probe-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--lag-out", type=Path, default=None,
                    help="write the view's event->view lag histogram (JSON) here")  # fmt: skip
    args = ap.parse_args()

    broker = None
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    tmp = Path(tempfile.mkdtemp(prefix="kvc-bench-pipeline-"))
    if not bootstrap:
        from wire.kafka_local import LocalBroker

        broker = LocalBroker(_free_port(), controller_port=_free_port(), state_dir=tmp / "broker",
                             die_with_parent=True)  # fmt: skip
        bootstrap = broker.up(timeout_s=120)

    def fresh(tag: str) -> PipelineConfig:
        prefix = f"bench-{tag}-{os.getpid()}-{int(time.time())}."
        c = PipelineConfig(
            bootstrap_servers=bootstrap,
            n_shards=args.n_shards,
            topic_prefix=prefix,
            kv_events_partitions=args.kv_partitions,
        )
        ensure_topics(AdminClient(librdkafka_conf(bootstrap)), c)
        return c

    def ready(log: Path) -> str:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            text = log.read_bytes()
            m = re.search(rb"pipeline metrics on (\S+)", text)
            if m:  # the warm-up then waits until every shard answers
                return m.group(1).decode()
            time.sleep(0.2)
        raise TimeoutError(f"worker not ready: {log}")

    procs: list[subprocess.Popen[bytes]] = []
    out: dict[str, Any] = {"n_shards": args.n_shards, "processes": args.processes}
    try:
        if not args.skip_backlog:  # phase 1: a backlog drained by a worker started after it
            cfg = fresh("ops")
            key_ops = backlog(cfg, args.op_records, args.keys_per_run, args.seed)
            procs.append(start_worker(cfg, tmp / "worker-ops.log",
                                      ["--initial-capacity", "65536"]))  # fmt: skip
            span_s, patch_records = drained_span_s(cfg, 600)
            procs[-1].terminate()
            procs[-1].wait(30)
            out.update(key_ops=key_ops, op_records=args.op_records, drain_s=span_s,
                       ops_per_s=key_ops / span_s, patch_records=patch_records,
                       patch_records_per_s=patch_records / span_s)  # fmt: skip
        if args.backlog_events:  # phase 2: a kv-events backlog through warmed workers
            cfg = fresh("thr")
            workers = [start_worker(cfg, tmp / f"worker-thr-{i}.log", ["--metrics-port", "0"])
                       for i in range(args.processes)]  # fmt: skip
            procs.extend(workers)
            urls = [ready(tmp / f"worker-thr-{i}.log") for i in range(args.processes)]
            out.update(throughput(cfg, args.backlog_events, args.seed + 2, urls, workers))
            for w in workers:
                w.terminate()
                w.wait(30)
        if not args.rate:
            return _report(out, args.json)
        # phase 3: fresh workers (one consumer group) and topics, events at a fixed rate
        cfg = fresh("lat")
        workers = [start_worker(cfg, tmp / f"worker-lat-{i}.log", ["--metrics-port", "0"])
                   for i in range(args.processes)]  # fmt: skip
        procs.extend(workers)
        urls = [ready(tmp / f"worker-lat-{i}.log") for i in range(args.processes)]
        lat = latency(cfg, args.rate, args.seconds, args.probe_every, args.seed + 1, workers)
        lag = lat.pop("view_lag_histogram")
        if args.lag_out is not None:
            args.lag_out.write_text(json.dumps({
                "what": "event->view lag (ms) of bench/pipeline.py's view", "bounds_ms":
                BOUNDS_MS.tolist(), "counts": lag.counts.tolist(), "rate": args.rate,
                "processes": args.processes, "date": time.strftime("%Y-%m-%d"),
            }) + "\n")  # fmt: skip
        out.update(lat)
        out["hops"] = scrape_hops(urls)
        out["hops"]["fetch_apply"] = {"p50_ms": lat["fetch_apply_p50_ms"],
                                      "p99_ms": lat["fetch_apply_p99_ms"]}  # fmt: skip
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
        if broker is not None:
            broker.down()
    return _report(out, args.json)


def _report(out: dict[str, Any], as_json: bool) -> int:
    if as_json:
        print(json.dumps(out))
        return 0
    for k, v in out.items():
        if isinstance(v, dict):
            continue
        print(f"{k:>24}: {v:,.1f}" if isinstance(v, float) else f"{k:>24}: {v}")
    for what in ("drain_cpu_us_per_event", "cpu_us_per_event"):
        if what in out:
            print(f"\n{what}: " + ", ".join(f"{k} {v:,.1f}" for k, v in out[what].items()))
    if "hops" not in out:
        return 0
    print("\nhop                     P50 ms     P99 ms")
    for hop in (*HOPS, "fetch_apply"):
        h = out["hops"].get(hop, {"p50_ms": float("nan"), "p99_ms": float("nan")})
        print(f"{hop:<20} {h['p50_ms']:>9.1f}  {h['p99_ms']:>9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
