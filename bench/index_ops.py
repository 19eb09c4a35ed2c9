"""Ludo index operations, single thread: the analogues of the paper's Tables 2, 3 and 5.

Usage::

    .venv/bin/python bench/index_ops.py                      # 10^6 entries, tables
    .venv/bin/python bench/index_ops.py --json               # one JSON object
    .venv/bin/python bench/index_ops.py --entries 10000000   # 10^7 (also adds 10^7 to Table 3)
    .venv/bin/python bench/index_ops.py --memory-sizes       # Table 3 at 10^6 and 10^7 only

Three kinds of figures, never mixed up:

* **batched** (``*_batch_ns``/``*_amortised_ns``): one public call (``LudoTable.update``,
  ``LudoView.lookup``/``apply``) over many operations, CPU time of the thread / operations (the
  machine is shared; CPU time leaves out time other processes hold the core). For ``update`` this
  includes building the deduplicated ``PatchBatch``.
* **kernel per-op** (``*_p50_ns``/``*_p99_ns``): one operation per kernel call from inside an njit
  loop, timed with the CPU cycle counter (``llvm.readcyclecounter``, calibrated against
  ``perf_counter``), calling ``ops.apply_ops`` with the table's arrays read out once. The cost of
  an empty call is reported as ``kernel_call_overhead_p50_ns``; there is no prefetching across
  operations here, unlike the batched path.
* **Python single call** (``lookup_single_*``): ``LudoView.lookup_one`` from Python, call overhead
  included.

Table 3 (bits per entry) is computed from the exact array sizes ``LudoParams`` gives a table of
that capacity at 95% occupancy (the view layout is fixed by the parameters, so inserting 10^7
keys adds nothing); the run's own table is measured from its arrays as a cross-check.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from kvcompass.ludo import LudoParams, LudoTable, LudoView
from kvcompass.ludo import ops as ludo_ops
from kvcompass.ludo.kernels import lookup_key

LEVELS = (0.85, 0.90, 0.95)
_clock = time.thread_time
"""Batched figures use this thread's CPU time: the machine is shared, and wall time would also
count the time other processes hold the core."""
LOADS = (0.20, 0.40, 0.60, 0.80, 0.95)


_cg: Any = cgutils  # numba's codegen helpers are untyped


def _cycles_impl(typingctx: Any) -> Any:
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        fnty = _cg.ir.FunctionType(_cg.ir.IntType(64), [])
        fn = _cg.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return types.int64(), codegen


_cycles: Any = intrinsic(_cycles_impl)
"""``_cycles()``: the CPU cycle counter (njit only)."""


def _now_cycles_impl() -> int:
    return int(_cycles())


_now_cycles: Any = njit(_now_cycles_impl)


def _ns_per_cycle() -> float:
    """Cycle-counter period, from a 0.3 s busy wait against ``perf_counter``."""
    _now_cycles()
    t0, c0 = time.perf_counter(), int(_now_cycles())
    while time.perf_counter() - t0 < 0.3:
        pass
    t1, c1 = time.perf_counter(), int(_now_cycles())
    return (t1 - t0) * 1e9 / (c1 - c0)


@njit
def _time_updates(mem: Any, keys: Any, clears: Any, sets: Any, out: Any) -> None:
    """Cycles of one ``update_batch`` call per op (``out[i]``); an empty call when ``keys`` is 0.

    ``mem`` is the table's one state buffer (``TableState.mem``): exactly what a per-op caller
    passes, so the figure includes the kernel entry.
    """
    for i in range(out.shape[0]):
        stop = i + 1 if keys.shape[0] else i
        t0 = _cycles()
        ludo_ops.update_batch(mem, keys, clears, sets, i, stop)
        out[i] = _cycles() - t0


@njit
def _time_lookups(p: Any, seeds: Any, values: Any, fps: Any, loc: Any, keys: Any, out: Any) -> Any:
    s = np.uint64(0)
    for i in range(keys.shape[0]):
        t0 = _cycles()
        s += lookup_key(p, seeds, values, fps, loc, keys[i])
        out[i] = _cycles() - t0
    return s


@njit
def _chase(nxt: Any, steps: int) -> int:
    i = 0
    for _ in range(steps):
        i = nxt[i]
    return i


def miss_latency_ns(n_words: int = 1 << 23, steps: int = 1 << 21) -> float:
    """ns per dependent load over a 64 MB random cycle: the price of one serial cache miss.

    Best of 3, thread CPU time. Every insert's chain of such misses (BFS levels, locator-walk
    steps) times this figure is the floor the insert profile is read against.
    """
    rng = np.random.default_rng(7)
    order = rng.permutation(n_words)
    nxt = np.empty(n_words, np.int64)
    nxt[order] = np.roll(order, -1)
    _chase(nxt, 1000)
    best = np.inf
    for _ in range(3):
        t0 = _clock()
        _chase(nxt, steps)
        best = min(best, (_clock() - t0) * 1e9 / steps)
    return float(best)


def _pct(cycles: np.ndarray, ns_per_cycle: float) -> tuple[float, float]:
    ns = cycles.astype(np.float64) * ns_per_cycle
    return float(np.percentile(ns, 50)), float(np.percentile(ns, 99))


def _keys(rng: np.random.Generator, n: int, low: int = 0, high: int = 1 << 62) -> np.ndarray:
    out = np.unique(rng.integers(low, high, int(n * 1.02) + 16, dtype=np.uint64))
    rng.shuffle(out)
    return out[:n]


def _update(t: LudoTable, keys: np.ndarray, clear: int, set_: int) -> float:
    n = keys.shape[0]
    t0 = _clock()
    t.update(keys, np.full(n, clear, np.uint64), np.full(n, set_, np.uint64))
    return float((_clock() - t0) * 1e9 / max(n, 1))


def _per_op(t: LudoTable, keys: np.ndarray, clear: int, set_: int, npc: float) -> tuple[float, ...]:
    n = keys.shape[0]
    out = np.zeros(n, np.int64)
    _time_updates(t._st.mem, keys, np.full(n, clear, np.uint64), np.full(n, set_, np.uint64), out)
    t.update(keys[:0], keys[:0], keys[:0])  # flush the dirty lists into a (discarded) batch
    return _pct(out, npc)


def table2(entries: int, npc: float) -> dict[str, Any]:
    rng = np.random.default_rng(20261201)
    t = LudoTable(entries, value_bits=32, fp_bits=8, seed=1)
    slots = t.params.n_slots
    keys = _keys(rng, int(0.95 * slots) + 40_000)  # the tail feeds the patch-apply batches
    res: dict[str, Any] = {}
    k_batch = max(1000, slots // 100)
    k_single = min(5000, max(200, slots // 500))
    empty = np.zeros(0, np.uint64)
    idle = np.zeros(20_000, np.int64)
    _time_updates(t._st.mem, empty, empty, empty, idle)
    res["kernel_call_overhead_p50_ns"] = _pct(idle, npc)[0]
    done = 0
    for level in LEVELS:
        target = min(int(level * slots), int(0.95 * slots)) - 1
        start = target - k_batch - k_single
        _update(t, keys[done:start], 0, 1)
        before = t.stats()
        res[f"insert_amortised_ns_at_{round(level * 100)}"] = _update(
            t, keys[start : start + k_batch], 0, 1
        )
        after = t.stats()
        for name in after:  # what one insert of this batch did, on average (the profile)
            res[f"per_insert_at_{round(level * 100)}_{name}"] = (
                after[name] - before[name]
            ) / k_batch
        p50, p99 = _per_op(t, keys[start + k_batch : target], 0, 1, npc)
        res[f"insert_p50_ns_at_{round(level * 100)}"] = p50
        res[f"insert_p99_ns_at_{round(level * 100)}"] = p99
        done = target
    res["view_bits_per_entry_measured"] = 8 * t.view_arrays().nbytes / len(t)
    res["epoch_after_fill"] = t.epoch
    res["occupancy"] = t.occupancy
    res.update({f"fill_{k}": v for k, v in t.stats().items()})
    live = keys[:done]
    view = LudoView.empty(t.params)
    image = t.full_image()
    t0 = _clock()
    view.apply(image)
    res["apply_full_image_ns_per_bucket"] = (_clock() - t0) * 1e9 / len(image)
    q = live[rng.integers(0, live.shape[0], 2_000_000)]
    view.lookup(q[:10])
    best = min(_timed(lambda: view.lookup(q)) for _ in range(3))
    res["lookup_batch_ns_per_key"] = best * 1e9 / q.shape[0]
    res["lookup_batch_correct"] = bool(np.array_equal(view.lookup(q[:100_000]), t.get(q[:100_000])))
    one = [int(k) for k in q[:200_000]]
    lat = np.empty(len(one), np.int64)
    view.lookup_one(one[0])
    for i, k in enumerate(one):
        t0n = time.perf_counter_ns()
        view.lookup_one(k)
        lat[i] = time.perf_counter_ns() - t0n
    res["lookup_single_p50_ns"] = float(np.percentile(lat, 50))
    res["lookup_single_p99_ns"] = float(np.percentile(lat, 99))
    a = view.arrays
    cyc = np.zeros(200_000, np.int64)
    _time_lookups(view.params.to_array(), a.seeds, a.values, a.fps, a.locator, q[:200_000], cyc)
    res["lookup_kernel_p50_ns"], res["lookup_kernel_p99_ns"] = _pct(cyc, npc)
    upd = live[rng.integers(0, live.shape[0], 200_000)]
    res["update_amortised_ns"] = _update(t, upd, 0b1100, 0b1000)
    res["update_p50_ns"], res["update_p99_ns"] = _per_op(t, upd[:20_000], 0b1100, 0b0100, npc)
    gone = live[: min(200_000, live.shape[0] // 4)]
    res["remove_amortised_ns"] = _update(t, gone[20_000:], (1 << 32) - 1, 0)
    res["remove_p50_ns"], res["remove_p99_ns"] = _per_op(t, gone[:20_000], (1 << 32) - 1, 0, npc)
    res.update(_patch_apply(t, view, keys[done:], live[gone.shape[0] :], rng))
    return res


def _timed(fn: Any) -> float:
    t0 = _clock()
    fn()
    return _clock() - t0


def _patch_apply(
    t: LudoTable, view: LudoView, fresh: np.ndarray, live: np.ndarray, rng: np.random.Generator
) -> dict[str, float]:
    """Mixed batches of 500 ops (1/3 inserts, updates, removes) as the pipeline would send."""
    batches = []
    f = 0
    spent = 0.0
    for _ in range(200):
        ins = fresh[f : f + 167]
        f += 167
        ups = live[rng.integers(0, live.shape[0], 167)]
        rms = live[rng.integers(0, live.shape[0], 166)]
        k = np.concatenate([ins, ups, rms])
        c = np.concatenate([np.zeros(167), np.full(167, 0b11), np.full(166, 2**32 - 1)])
        s = np.concatenate([np.ones(167), np.full(167, 0b10), np.zeros(166)])
        cu, su = c.astype(np.uint64), s.astype(np.uint64)
        t0 = _clock()
        batches.append(t.update(k, cu, su))
        spent += _clock() - t0
    same_epoch = [b for b in batches if b.params.epoch == view.params.epoch]
    images = sum(len(b) for b in same_epoch)
    buckets = sum(int(b.bucket_ids.shape[0]) for b in same_epoch)
    t0 = _clock()
    for b in same_epoch:
        view.apply(b)
    dt = _clock() - t0
    return {
        "mixed_update_ops_per_s": 200 * 500 / spent,
        "apply_ns_per_image": dt * 1e9 / max(images, 1),
        "apply_ns_per_batch": dt * 1e9 / max(len(same_epoch), 1),
        "images_per_batch_of_500_ops": images / max(len(same_epoch), 1),
        "bucket_images_per_batch_of_500_ops": buckets / max(len(same_epoch), 1),
        "wire_bytes_per_batch_of_500_ops": sum(b.wire_bytes() for b in same_epoch)
        / max(len(same_epoch), 1),
    }


def view_bits(capacity: int, value_bits: int, fp_bits: int) -> float:
    """View bits per entry of a table of ``capacity`` at 95% occupancy, from array sizes."""
    p = LudoParams.for_capacity(
        capacity, value_bits=value_bits, fp_bits=fp_bits, rng=np.random.default_rng(0)
    )
    return 8 * p.view_bytes / int(0.95 * p.n_slots)


def table3(entries: int, memory_sizes: bool) -> dict[str, Any]:
    sizes = [10**6] + ([10**7] if memory_sizes or entries >= 10**7 else [])
    res: dict[str, Any] = {}
    for cap in sizes:
        for vb in (32, 64):
            for fb in (0, 8, 16):
                res[f"view_bits_per_entry_{cap}_v{vb}_fp{fb}"] = view_bits(cap, vb, fb)
    res["view_bits_per_entry_fp0"] = view_bits(entries, 32, 0)
    res["view_bits_per_entry_fp8"] = view_bits(entries, 32, 8)
    return res


def table5(capacity: int) -> dict[str, Any]:
    rng = np.random.default_rng(5)
    res: dict[str, Any] = {}
    never = _keys(rng, 1_000_000, 1 << 62, 1 << 63)
    for fb in (0, 8):
        t = LudoTable(capacity, fp_bits=fb, seed=2)
        keys = _keys(rng, int(0.95 * t.params.n_slots) - 1)
        done = 0
        for load in LOADS:
            n = min(int(load * t.params.n_slots), keys.shape[0])
            _update(t, keys[done:n], 0, 1)
            done = n
            view = LudoView.empty(t.params)
            view.apply(t.full_image())
            rate = float((view.lookup(never) != 0).mean())
            res[f"false_holder_rate_fp{fb}_load{round(load * 100)}"] = rate
    return res


def machine() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "nproc": os.cpu_count(),
        "python": platform.python_version(),
        "numba": numba.__version__,
        "numpy": np.__version__,
    }


def _print_tables(res: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    con = Console(width=120)
    t2 = Table(title=f"Table 2 analogue: operations at {res['entries']:,} entries (ns)")
    for col in (
        "operation",
        "batched (amortised)",
        "kernel P50",
        "kernel P99",
        "C++ ref at 95% (LUDO.md) / paper",
    ):
        t2.add_column(col, justify="right")
    for lvl in (85, 90, 95):
        t2.add_row(
            f"insert at {lvl}%",
            f"{res[f'insert_amortised_ns_at_{lvl}']:.0f}",
            f"{res[f'insert_p50_ns_at_{lvl}']:.0f}",
            f"{res[f'insert_p99_ns_at_{lvl}']:.0f}",
            "7,680-8,464 at 95% / 1,200-1,400",
        )
    t2.add_row(
        "lookup (view)",
        f"{res['lookup_batch_ns_per_key']:.1f}",
        f"{res['lookup_kernel_p50_ns']:.0f}",
        f"{res['lookup_kernel_p99_ns']:.0f}",
        "63-87 / 310",
    )
    t2.add_row(
        "update",
        f"{res['update_amortised_ns']:.0f}",
        f"{res['update_p50_ns']:.0f}",
        f"{res['update_p99_ns']:.0f}",
        "176-197 / 170",
    )
    t2.add_row(
        "remove",
        f"{res['remove_amortised_ns']:.0f}",
        f"{res['remove_p50_ns']:.0f}",
        f"{res['remove_p99_ns']:.0f}",
        "2,389-2,740 / 800-900",
    )
    t2.add_row("apply, per image (mixed batches)", f"{res['apply_ns_per_image']:.0f}", "", "", "")
    t2.add_row(
        "update() 500 mixed ops/call", f"{1e9 / res['mixed_update_ops_per_s']:.0f}", "", "", ""
    )
    t2.add_row(
        "apply, per bucket (full image)", f"{res['apply_full_image_ns_per_bucket']:.0f}", "", "", ""
    )
    con.print(t2)
    con.print(
        f"lookup_one from Python: P50 {res['lookup_single_p50_ns']:.0f} ns, "
        f"P99 {res['lookup_single_p99_ns']:.0f} ns; kernel call overhead (in the P50/P99 "
        f"columns) {res['kernel_call_overhead_p50_ns']:.0f} ns"
    )
    t3 = Table(title="Table 3 analogue: view bits per entry at 95% occupancy")
    for col in ("entries", "value bits", "fp 0", "fp 8", "fp 16"):
        t3.add_column(col, justify="right")
    for cap in (10**6, 10**7):
        for vb in (32, 64):
            if f"view_bits_per_entry_{cap}_v{vb}_fp0" in res:
                row = [f"{res[f'view_bits_per_entry_{cap}_v{vb}_fp{fb}']:.2f}" for fb in (0, 8, 16)]
                t3.add_row(f"{cap:,}", str(vb), *row)
    con.print(t3)
    t5 = Table(title="Table 5 analogue: false-holder rate of never-inserted keys")
    t5.add_column("load", justify="right")
    for fb in (0, 8):
        t5.add_column(f"fp {fb}", justify="right")
    for load in LOADS:
        pct = round(load * 100)
        t5.add_row(
            f"{pct}%", *(f"{res[f'false_holder_rate_fp{fb}_load{pct}']:.4%}" for fb in (0, 8))
        )
    con.print(t5)
    prof = Table(title="Insert profile: per insert of each timed batch (serial misses dominate)")
    prof.add_column("counter")
    for lvl in (85, 90, 95):
        prof.add_column(f"at {lvl}%", justify="right")
    names = sorted({k.split("_", 4)[4] for k in res if k.startswith("per_insert_at_")})
    for name in names:
        prof.add_row(name, *(f"{res[f'per_insert_at_{lvl}_{name}']:.3f}" for lvl in (85, 90, 95)))
    con.print(prof)
    con.print(
        f"one dependent cache miss (64 MB pointer chase): {res['dependent_miss_ns']:.0f} ns; "
        f"load average at start {res['load_average_at_start']:.1f}"
    )
    con.print(res["machine"])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=1_000_000)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--memory-sizes", action="store_true", help="Table 3 at 10^6 and 10^7")
    args = ap.parse_args(argv)
    npc = _ns_per_cycle()
    res: dict[str, Any] = {"entries": args.entries, "ns_per_cycle": npc, "machine": machine()}
    res["dependent_miss_ns"] = miss_latency_ns()
    res["load_average_at_start"] = os.getloadavg()[0]
    res.update(table2(args.entries, npc))
    res.update(table3(args.entries, args.memory_sizes))
    res.update(table5(min(args.entries, 1_000_000)))
    if args.json:
        print(json.dumps(res))
    else:
        _print_tables(res)


if __name__ == "__main__":
    main()
