"""The index demo's engine: a trace replayed through keys, index, patches, views and routers.

Each request's edge (its origin region) looks its prompt up in the keyless view and the
joint-score router picks the worker; the worker then registers the prompt at its region's
registration lengths, and the patches go to the view. Worker queues follow a plain backlog model
(each forward adds its predicted service time; the router sees exact queues) — the simulator
(`kvcompass sim`) models caches, eviction, staleness and the WAN in full. Every number printed is
measured here, nothing is assumed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvcompass.deployment import Deployment
from kvcompass.index import DiscoveryIndex
from kvcompass.index_view import IndexView
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from kvcompass.router import Router
from kvcompass.types import Tier

CHUNK = 512  # requests hashed per numba call


def _pct(a: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(a), q)) if a else float("nan")


@dataclass
class IndexDemo:
    deployment: Deployment
    levels: Levels
    layout: TableLayout
    index: DiscoveryIndex
    view: IndexView
    hasher: PrefixHasher
    routers: list[Router]
    seed: int

    @classmethod
    def build(cls, deployment: str, *, n_shards: int, seed: int) -> IndexDemo:
        from kvcompass.cli.deployments import load_deployment

        dep = load_deployment(deployment)
        levels = Levels.from_deployment(dep)
        layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
        index = DiscoveryIndex(
            layout, n_shards=n_shards, fp_bits=8, initial_capacity=256, seed=seed
        )
        view = IndexView(layout, levels.matrix, n_shards)
        view.apply_all(index.full_images())
        hasher = PrefixHasher(KeyNamespace(model_id="meta-llama/Llama-3.1-8B-Instruct"))
        routers = [Router.from_deployment(dep, levels, o) for o in range(dep.n_regions)]
        return cls(dep, levels, layout, index, view, hasher, routers, seed)

    def replay(self, trace: Path, *, limit: int | None) -> dict[str, Any]:
        import time

        from sim.workloads.mooncake import read_mooncake

        dep = self.deployment
        rng = np.random.default_rng(self.seed)
        weights = np.array([r.n_workers for r in dep.regions], dtype=np.float64)
        wl = read_mooncake(
            trace, block_size=512, region_weights=weights / weights.sum(),
            n_regions=dep.n_regions, rng=rng, limit=limit,
        )  # fmt: skip
        all_lengths = np.unique(self.levels.matrix)
        reg_lengths = [self.levels.registration_lengths(r) for r in range(dep.n_regions)]
        workers_of = [np.flatnonzero(dep.worker_region == r) for r in range(dep.n_regions)]
        backlog_end = np.zeros(dep.n_workers)
        t_hash = t_reg = t_apply = t_route = 0.0
        n_keys = n_ops = n_images = wire = 0
        lookup_us: list[float] = []
        served_by_holder = served_remote = reused = prompt_tokens = 0
        sample: list[tuple[int, int]] = []
        for start in range(0, len(wl), CHUNK):
            stop = min(start + CHUNK, len(wl))
            toks, offs = wl.tokens_batch(start, stop)
            t0 = time.perf_counter()
            keys, koffs = self.hasher.keys_at_batch(toks, offs, all_lengths)
            t_hash += time.perf_counter() - t0
            n_keys += keys.size
            for i in range(start, stop):
                k = keys[koffs[i - start] : koffs[i - start + 1]]
                lens = all_lengths[: k.size]
                o = int(wl.origin_region[i])
                now = float(wl.arrival_ms[i])
                router = self.routers[o]
                queue = np.maximum(backlog_end - now, 0.0)
                router.set_local_queues(queue[workers_of[o]], now)
                for r in range(dep.n_regions):
                    if r != o:
                        router.on_broadcast(r, workers_of[r], queue[workers_of[r]], now)
                t0 = time.perf_counter()
                m = self.view.match_keys(o, lens, k)
                t1 = time.perf_counter()
                d = router.choose(int(wl.prompt_len[i]), m.matched_tokens, m.tiers, now)
                t_route += time.perf_counter() - t1
                lookup_us.append((t1 - t0) * 1e6)
                worker = d.worker
                backlog_end[worker] = max(backlog_end[worker], now) + d.predicted_service_ms
                served_by_holder += d.claimed_tokens > 0
                served_remote += int(dep.worker_region[worker]) != o
                reused += d.claimed_tokens
                prompt_tokens += int(wl.prompt_len[i])
                region = int(dep.worker_region[worker])
                reg = k[np.isin(lens, reg_lengths[region])]
                t0 = time.perf_counter()
                patches = self.index.register(worker, reg, Tier.VRAM)
                t_reg += time.perf_counter() - t0
                n_ops += reg.size
                t0 = time.perf_counter()
                self.view.apply_all(patches)
                t_apply += time.perf_counter() - t0
                n_images += sum(len(p.batch) for p in patches)
                wire += sum(p.batch.wire_bytes() for p in patches)
                if reg.size and len(sample) < 50_000:
                    sample.append((worker, int(reg[-1])))
        mismatches = self._verify(sample)
        entries = self.index.entries()
        vbytes = self.view.view_bytes()
        return {
            "deployment": dep.name,
            "requests": len(wl),
            "keys_hashed": n_keys,
            "hash_ns_per_key": 1e9 * t_hash / max(n_keys, 1),
            "index_ops": n_ops,
            "register_ns_per_op": 1e9 * t_reg / max(n_ops, 1),
            "patch_images": n_images,
            "patch_wire_bytes": wire,
            "apply_ns_per_image": 1e9 * t_apply / max(n_images, 1),
            "lookup_p50_us": _pct(lookup_us, 50),
            "lookup_p99_us": _pct(lookup_us, 99),
            "score_us_mean": 1e6 * t_route / max(len(wl), 1),
            "entries": entries,
            "view_bytes": vbytes,
            "view_bits_per_entry": 8 * vbytes / max(entries, 1),
            "entries_per_slot": entries / max(self._slots(), 1),
            "served_by_holder": served_by_holder,
            "served_cross_region": served_remote,
            "reused_token_share": reused / max(prompt_tokens, 1),
            "view_checked_keys": len(sample),
            "view_mismatches": mismatches,
            "levels_us_to_eu": self.levels.for_pair(0, 1).tolist() if dep.n_regions > 1 else [],
            "levels_in_region": self.levels.for_pair(0, 0).tolist(),
        }

    def _slots(self) -> int:
        return sum(4 * t.params.n_buckets for s in self.index.shards for t in s.tables)

    def _verify(self, sample: list[tuple[int, int]]) -> int:
        """Keys the view must still name: compare view answers with the maintenance truth."""
        bad = 0
        for worker, key in sample:
            table = int(self.layout.worker_table[worker])
            truth = self.index.shards[key % self.index.n_shards].tables[table]
            expect = int(truth.get(np.array([key], dtype=np.uint64))[0])
            if self.view.lookup_value(table, key) != expect:
                bad += 1
        return bad

    @staticmethod
    def print_report(report: dict[str, Any]) -> None:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"KVCompass index demo — Mooncake trace on {report['deployment']}")
        table.add_column("figure")
        table.add_column("value", justify="right")
        for k, v in report.items():
            if k == "deployment":
                continue
            table.add_row(
                k, (f"{v:.3f}" if abs(v) < 10 else f"{v:,.1f}") if isinstance(v, float) else str(v)
            )
        Console().print(table)
