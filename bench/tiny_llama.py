"""Tiny-llama prefill on the CPU: a prompt with its prefix's KV pages cached vs the same cold.

Usage::

    .venv/bin/python bench/tiny_llama.py                   # table
    .venv/bin/python bench/tiny_llama.py --json            # machine-readable rows
    .venv/bin/python bench/tiny_llama.py --cases 2048:1792 --repeats 9 --threads 2

What it times is what the emulated engine's prefill does (``workers/emulated/engine.py``):
cold = one forward pass over the whole prompt, then slicing its KV into pages; warm = concatenating
the cached pages of the prefix, one forward pass over the uncached tail after them, then slicing
the tail's pages. The model is the worker's default ``--model tiny-llama`` (4 layers, dim 128,
8 heads, 2 KV heads, page size 16), torch float32 on the CPU with ``--threads`` intra-op threads
(the worker uses 1). Prompts are random byte tokens (seed 0); each case runs ``--repeats`` times
after one warm-up, alternating cold and warm; the table gives medians. ``max |Δ logits|`` is the
largest difference between the warm and the cold last-token logits (float32 rounding).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.emulated.tiny_llama import TinyLlama, TinyLlamaConfig

PAGE = 16
CASES = ((512, 448), (1024, 896), (2048, 1024), (2048, 1792))


def _case(m: TinyLlama, prompt: np.ndarray, cached: int, repeats: int) -> dict[str, object]:
    _, prefix_kv = m.forward(prompt[:cached])
    pages = m.pages(prefix_kv, PAGE, cached // PAGE)  # what the cache holds
    cold_ms: list[float] = []
    warm_ms: list[float] = []
    diff = 0.0
    for i in range(repeats + 1):
        t0 = time.perf_counter()
        cold, kv = m.forward(prompt)
        m.pages(kv, PAGE, len(prompt) // PAGE)
        t1 = time.perf_counter()
        before = m.forwarded_tokens
        warm, tail_kv = m.forward(prompt[cached:], m.concat(pages))
        m.pages(tail_kv, PAGE, (len(prompt) - cached) // PAGE)
        t2 = time.perf_counter()
        assert m.forwarded_tokens - before == len(prompt) - cached
        if i == 0:  # warm-up
            continue
        cold_ms.append((t1 - t0) * 1000)
        warm_ms.append((t2 - t1) * 1000)
        diff = max(diff, float((warm[-1] - cold[-1]).abs().max()))
    c, w = statistics.median(cold_ms), statistics.median(warm_ms)
    return {
        "prompt_tokens": len(prompt),
        "cached_tokens": cached,
        "computed_tokens_warm": len(prompt) - cached,
        "cold_ms": round(c, 1),
        "warm_ms": round(w, 1),
        "speedup": round(c / w, 2),
        "max_abs_logit_diff": diff,
        "repeats": repeats,
    }


def run(cases: list[tuple[int, int]], repeats: int, threads: int) -> list[dict[str, object]]:
    for n, cached in cases:
        if not 0 < cached < n or cached % PAGE:
            raise SystemExit(
                f"case {n}:{cached}: expected 0 < cached < prompt, cached % {PAGE} == 0"
            )
    if repeats < 1 or threads < 1:
        raise SystemExit("--repeats and --threads: expected >= 1")
    torch.set_num_threads(threads)
    m = TinyLlama(TinyLlamaConfig())
    rng = np.random.default_rng(0)
    return [_case(m, rng.integers(0, 256, n), cached, repeats) for n, cached in cases]


def _parse_case(text: str) -> tuple[int, int]:
    try:
        n, cached = text.split(":")
        return int(n), int(cached)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PROMPT:CACHED, got {text!r}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=_parse_case, nargs="+", default=list(CASES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--json", action="store_true", help="print JSON rows")
    args = parser.parse_args()
    rows = run(args.cases, args.repeats, args.threads)
    if args.json:
        meta = {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "threads": args.threads,
            "machine": platform.machine(),
        }
        print(json.dumps({"meta": meta, "rows": rows}, indent=2))
        return
    print(
        f"{'prompt':>6} {'cached':>6} {'cold ms':>8} {'warm ms':>8} {'speed-up':>8} {'max|Δ|':>8}"
    )
    for r in rows:
        print(
            f"{r['prompt_tokens']:>6} {r['cached_tokens']:>6} {r['cold_ms']:>8} "
            f"{r['warm_ms']:>8} {r['speedup']:>7}x {r['max_abs_logit_diff']:>8.1e}"
        )


if __name__ == "__main__":
    main()
