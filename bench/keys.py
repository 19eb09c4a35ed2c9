"""Prefix-key throughput: numba one-pass kernel vs mmh3 hasher objects vs re-hashing each prefix.

Usage::

    .venv/bin/python bench/keys.py            # table
    .venv/bin/python bench/keys.py --json     # machine-readable

Cases: one 4096-token prompt at 6, 12 and 18 cut points (multiples of 16 tokens, like real
levels), and a batch of 10k prompts (lengths 256..4096) at the 18 cut points that fit each one.
Times are the median of repeated runs after a warm-up (numba compiled and cached).
"""

from __future__ import annotations

import argparse
import functools
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # for tests.naive

from kvcompass.keys import KeyNamespace, PrefixHasher
from tests.naive import keys_at_bytes, keys_at_mmh3_hasher


def _median_s(fn: Callable[[], object], repeat: int) -> float:
    """Median of ``repeat`` timings after one warm-up; the machine is shared, so medians."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _cuts(n: int, max_len: int) -> np.ndarray:
    return np.unique(np.linspace(256, max_len, n).astype(np.int64) // 16 * 16)


def run(repeat: int, n_prompts: int) -> list[dict[str, object]]:
    rng = np.random.default_rng(20261201)
    ns = KeyNamespace("meta-llama/Llama-3.1-8B-Instruct", "bf16;tp=1")
    hasher = PrefixHasher(ns)
    rows: list[dict[str, object]] = []
    prompt = rng.integers(0, 128_256, size=4096, dtype=np.int32)
    for n_cuts in (6, 12, 18):
        cuts = _cuts(n_cuts, 4096)
        cases: dict[str, Callable[[], object]] = {
            "numba keys_at": functools.partial(hasher.keys_at, prompt, cuts),
            "mmh3 hasher objects": functools.partial(keys_at_mmh3_hasher, ns, prompt, cuts),
            "mmh3.hash128 per prefix": functools.partial(keys_at_bytes, ns, prompt, cuts),
        }
        for name, fn in cases.items():
            s = _median_s(fn, repeat)
            rows.append(
                {
                    "case": f"1 prompt x4096, {len(cuts)} cuts",
                    "method": name,
                    "us_per_prompt": s * 1e6,
                }
            )
    sizes = rng.integers(256, 4097, size=n_prompts)
    offsets = np.zeros(n_prompts + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    flat = rng.integers(0, 128_256, size=int(offsets[-1]), dtype=np.int32)
    cuts = _cuts(18, 4096)

    def hasher_loop() -> None:
        for i in range(n_prompts):
            p = flat[offsets[i] : offsets[i + 1]]
            keys_at_mmh3_hasher(ns, p, cuts[cuts <= p.shape[0]])

    batch_repeat = max(1, repeat // 20)
    for name, fn in (
        ("numba keys_at_batch", lambda: hasher.keys_at_batch(flat, offsets, cuts)),
        ("mmh3 hasher objects (loop)", hasher_loop),
    ):
        s = _median_s(fn, batch_repeat)
        rows.append(
            {
                "case": f"batch {n_prompts} prompts (256..4096 tok), 18 cuts",
                "method": name,
                "us_per_prompt": s * 1e6 / n_prompts,
                "prompts_per_s": n_prompts / s,
                "gb_per_s": flat.nbytes / s / 1e9,
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--prompts", type=int, default=10_000)
    args = parser.parse_args()
    rows = run(args.repeat, args.prompts)
    machine = (
        f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}"
    )
    if args.json:
        print(json.dumps({"machine": machine, "rows": rows}, indent=2))
        return
    print(f"machine: {machine}")
    print(f"{'case':<48} {'method':<28} {'us/prompt':>10} {'prompts/s':>11}")
    for r in rows:
        pps = r.get("prompts_per_s", 1e6 / float(r["us_per_prompt"]))  # type: ignore[arg-type]
        print(f"{r['case']:<48} {r['method']:<28} {r['us_per_prompt']:>10.2f} {pps:>11.0f}")


if __name__ == "__main__":
    main()
