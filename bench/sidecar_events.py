"""The sidecar's per-event work on SGLang KV events: msgpack decode to the normal form
(``workers.protocol.decode_payload``) and the block table's registrations
(``workers.block_table.BlockTable.apply``), per ``BlockStored`` of one prompt.

Usage::

    .venv/bin/python bench/sidecar_events.py            # table
    .venv/bin/python bench/sidecar_events.py --json     # machine-readable

Each event stores one fresh prompt of ``--blocks`` pages of 16 tokens (240 pages ≈ the Mixed
workload's mean prompt of 3.8K tokens) under the paper testbed's registration lengths; events
are decoded and applied in turn, median of ``--repeat`` rounds of ``--events`` events, in CPU time
of this process (``time.process_time``: a shared machine's other jobs do not count; wall time
moved 10x with the load here). Measured 2026-12-02, two runs each: before issue 19 (0424e81)
decode 0.56–0.71 ms and apply 1.45–2.06 ms per event; after, 0.37–0.40 ms and 1.02–1.14 ms
(1.4–1.8x).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from kvcompass.deployment import builtin_deployment
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.levels import Levels
from workers.block_table import BlockTable
from workers.protocol import Batch, Stored, decode_payload, encode_payload


def _lengths() -> list[int]:
    lv = Levels.from_deployment(builtin_deployment("paper-testbed-14x3"))
    return sorted({int(x) for x in np.asarray(lv.matrix).ravel() if x > 0})


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", type=int, default=240, help="pages of 16 tokens per event")
    ap.add_argument("--events", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    bs = 16
    decode_ms: list[float] = []
    apply_ms: list[float] = []
    table = BlockTable(PrefixHasher(KeyNamespace("bench")), _lengths())
    base = 0
    for _ in range(args.repeat + 1):  # the first round warms numba and the caches up
        payloads = []
        for _ in range(args.events):
            toks = tuple(int(t) for t in rng.integers(0, 128_000, args.blocks * bs))
            hashes = tuple(range(base, base + args.blocks))
            base += args.blocks
            payloads.append(encode_payload([Stored(hashes, None, toks, bs, "GPU")], None))
        t0 = time.process_time()
        batches: list[Batch] = [decode_payload(i, p) for i, p in enumerate(payloads)]
        t1 = time.process_time()
        for b in batches:
            table.apply(b.events)
        t2 = time.process_time()
        decode_ms.append((t1 - t0) * 1e3 / args.events)
        apply_ms.append((t2 - t1) * 1e3 / args.events)
        table.clear()
    out = {
        "blocks_per_event": args.blocks,
        "tokens_per_event": args.blocks * bs,
        "decode_ms_per_event": round(statistics.median(decode_ms[1:]), 3),
        "apply_ms_per_event": round(statistics.median(apply_ms[1:]), 3),
        "python": platform.python_version(),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"one BlockStored of {out['tokens_per_event']:,} tokens ({args.blocks} pages):")
        print(f"  decode (msgpack -> normal form): {out['decode_ms_per_event']:.3f} ms")
        print(f"  block table apply (registrations): {out['apply_ms_per_event']:.3f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
