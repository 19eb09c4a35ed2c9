"""What bench/pipeline.py sends and reads: KV events of the sidecar's shape, CPU of processes,
the workers' metrics. (A module of its own so the bench stays under the house's 500 lines.)"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from kvcompass.deployment import builtin_deployment
from kvcompass.lag import quantile_from_cumulative
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from wire.codec import AvroCodec, int32_key
from wire.registry import InProcessRegistry

DEP_NAME = "paper-testbed-14x3"


def event(w: int, region: int, keys: np.ndarray, lengths: list[int], seq: int) -> dict[str, Any]:
    """A KvEvent of the sidecar's shape (``workers.bridge.RankBridge._record``: keys only)."""
    return {"worker_id": w, "region_id": region, "model": "bench", "sharing_group": None,
            "op": "STORED", "tier": "VRAM", "token_count": lengths[-1] if lengths else 0,
            "token_ids": None, "block_hashes": [], "parent_block_hash": None,
            "block_size_tokens": 16, "registration_lengths": lengths,
            "registration_keys": [int(k) for k in keys], "engine_seq": seq,
            "timestamp_ms": 0, "cache_state": "KNOWN"}  # fmt: skip


def make_events(n_events: int, seed: int) -> list[tuple[bytes, bytes, int, np.ndarray]]:
    """Mixed-sized prompts (``sim.workloads.mixed``), each stored fresh by a random worker: its
    keys at every registration length of the worker's region that fits (an upper bound on the
    keys per event: a prompt whose prefix was cached registers only the new lengths)."""
    from sim.workloads.mixed import make_mixed

    dep = builtin_deployment(DEP_NAME)
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    region = np.asarray(dep.worker_region)
    levels = Levels.from_deployment(dep)
    codec = AvroCodec(InProcessRegistry())
    rng = np.random.default_rng(seed)
    prompts = make_mixed(n_events, 100.0, len(dep.regions), None, rng).prompt_len
    out = []
    for i in range(n_events):
        w = int(rng.integers(0, layout.n_workers))
        lengths = levels.registration_lengths(int(region[w]))
        lengths = lengths[lengths <= int(prompts[i])]
        keys = rng.integers(1, 2**62, lengths.size, dtype=np.int64)
        ev = event(w, int(region[w]), keys, lengths.tolist(), i)
        out.append((codec.encode("KvEvent", ev), int32_key(w), w, keys.astype(np.uint64)))
    return out


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def broker_pid() -> int | None:
    """The local Kafka broker's JVM (the busiest ``kafka.Kafka`` java process), if any."""
    best = None
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if b"java" in cmd and b"kafka.Kafka" in cmd:
            pid = int(d.name)
            if best is None or cpu_s(pid) > cpu_s(best):
                best = pid
    return best


def scrape_hops(urls: list[str]) -> dict[str, dict[str, float]]:
    """P50/P99 of every hop histogram (``kvc_pipeline_hop_ms``) summed over the workers."""
    buckets: dict[str, dict[float, float]] = {}
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as r:
            text = r.read().decode()
        for fam in text_string_to_metric_families(text):
            if fam.name != "kvc_pipeline_hop_ms":
                continue
            for sm in fam.samples:
                if sm.name.endswith("_bucket"):
                    le = float(sm.labels["le"])
                    hop = buckets.setdefault(sm.labels["hop"], {})
                    hop[le] = hop.get(le, 0.0) + sm.value
    return {hop: {"p50_ms": quantile_from_cumulative(list(b.items()), 0.5),
                  "p99_ms": quantile_from_cumulative(list(b.items()), 0.99)}
            for hop, b in buckets.items()}  # fmt: skip


def key_ops(urls: list[str]) -> float:
    total = 0.0
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as r:
            for fam in text_string_to_metric_families(r.read().decode()):
                if fam.name == "kvc_pipeline_key_ops":
                    total += sum(sm.value for sm in fam.samples if sm.name.endswith("_total"))
    return total
