"""The foundation demo's engine: a trace replayed through keys, index, patches and a view.

A stand-in for the router decides which worker serves each request (the in-region worker with
the longest indexed match, else the next worker of the region in turn) — enough to make the index
see realistic registrations; the joint-score router replaces it once it lands. Every number the
demo prints is measured here, nothing is assumed.
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
    seed: int

    @classmethod
    def build(cls, deployment: str, *, n_shards: int, seed: int) -> IndexDemo:
        from kvcompass.cli.deployments import load_deployment

        dep = load_deployment(deployment)
        levels = Levels.from_deployment(dep)
        layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
        index = DiscoveryIndex(layout, n_shards=n_shards, fp_bits=8, seed=seed)
        view = IndexView(layout, levels.matrix, n_shards)
        view.apply_all(index.full_images())
        hasher = PrefixHasher(KeyNamespace(model_id="meta-llama/Llama-3.1-8B-Instruct"))
        return cls(dep, levels, layout, index, view, hasher, seed)

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
        turn = [0] * dep.n_regions
        t_hash = t_reg = t_apply = 0.0
        n_keys = n_ops = n_images = wire = 0
        lookup_us: list[float] = []
        served_by_holder = cross_region_visible = 0
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
                t0 = time.perf_counter()
                m = self.view.match_keys(o, lens, k)
                lookup_us.append((time.perf_counter() - t0) * 1e6)
                local = workers_of[o]
                if (m.matched_tokens[dep.worker_region != o] > 0).any():
                    cross_region_visible += 1
                best = local[np.argmax(m.matched_tokens[local])]
                if m.matched_tokens[best] > 0:
                    worker = int(best)
                    served_by_holder += 1
                else:
                    worker = int(local[turn[o] % local.size])
                    turn[o] += 1
                reg = k[np.isin(lens, reg_lengths[o])]
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
            "entries": entries,
            "view_bytes": vbytes,
            "view_bits_per_entry": 8 * vbytes / max(entries, 1),
            "served_by_holder": served_by_holder,
            "requests_seeing_remote_holders": cross_region_visible,
            "view_checked_keys": len(sample),
            "view_mismatches": mismatches,
            "levels_us_to_eu": self.levels.for_pair(0, 1).tolist() if dep.n_regions > 1 else [],
            "levels_in_region": self.levels.for_pair(0, 0).tolist(),
        }

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
            table.add_row(k, f"{v:,.1f}" if isinstance(v, float) else str(v))
        Console().print(table)
