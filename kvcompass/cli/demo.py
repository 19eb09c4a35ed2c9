"""`kvcompass demo` (the three-region end-to-end comparison) and `kvcompass index-demo`.

``demo`` is the project's main job as a user first meets it (``make demo``): it starts a local
Kafka broker, the Faust maintenance units, 14 emulated SGLang workers with their sidecars and
three edges (US, EU, Asia, the paper's testbed), replays a Mixed workload and the Mooncake trace
at a few rates under every routing policy the edge supports, and prints the comparison
(``e2e.demo``). ``index-demo`` is the offline one: the Mooncake trace through keys → index →
patches → view in one process, checking the view against the maintenance truth.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from kvcompass.cli.data import MOONCAKE_TRACE as DEFAULT_TRACE


def register(subparsers: Any) -> None:
    _register_e2e(subparsers)
    p = subparsers.add_parser(
        "index-demo",
        help="replay the Mooncake trace through keys -> index -> patches -> view and print figures",
    )
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake-format JSONL trace")
    p.add_argument("--deployment", default="paper-testbed-14x3", help="built-in name or TOML path")
    p.add_argument("--shards", type=int, default=4, help="index shards (maintenance units)")
    p.add_argument("--limit", type=int, default=None, help="replay only the first N requests")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from kvcompass.cli.index_demo import IndexDemo  # heavy imports only when the command runs

    if not args.trace.exists():
        print(f"error: trace not found: {args.trace} (pass --trace PATH)")
        return 2
    started = time.perf_counter()
    demo = IndexDemo.build(args.deployment, n_shards=args.shards, seed=args.seed)
    report = demo.replay(args.trace, limit=args.limit)
    report["wall_s"] = round(time.perf_counter() - started, 2)
    demo.print_report(report)
    if args.json is not None:
        import json

        args.json.write_text(json.dumps(report, indent=2))
    return 0 if report["view_mismatches"] == 0 else 1


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"expected positive rates, got {text!r}")
    return values


def _register_e2e(subparsers: Any) -> None:
    from edge.policies import POLICIES

    p = subparsers.add_parser(
        "demo",
        help="three-region deployment on this machine: compare routing policies on real requests",
    )
    p.add_argument("--out", type=Path, default=Path("demo-out"), help="results, plots, logs")
    p.add_argument("--deployment", default="paper-testbed-14x3", help="built-in name or TOML")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policies")
    p.add_argument("--rates", type=_floats, default=(8.0, 16.0), help="Mixed rates, req/s")
    p.add_argument("--trace-rates", type=_floats, default=(3.0,), help="Mooncake rates, req/s")
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="Mooncake JSONL trace")
    p.add_argument("--no-trace", action="store_true", help="skip the Mooncake runs")
    p.add_argument("--duration-s", type=float, default=15.0, help="model seconds per run")
    p.add_argument("--time-scale", type=float, default=1.0, help="wall seconds per model second")
    p.add_argument("--max-output-tokens", type=int, default=128)
    p.add_argument("--stream-interval", type=int, default=16, help="tokens per streamed chunk")
    # RTX 5090 (32 GB) with Llama-3.1-8B BF16: ~12 GB of KV at 128 KiB/token ≈ 96K tokens;
    # HiCache's default host pool is 2x the device pool.
    p.add_argument("--vram-tokens", type=int, default=98_304, help="KV capacity per worker")
    p.add_argument("--dram-tokens", type=int, default=196_608, help="host KV capacity per worker")
    p.add_argument("--n-shards", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.set_defaults(func=run_e2e)


def run_e2e(args: argparse.Namespace) -> int:
    from rich.console import Console

    from e2e import report
    from e2e.cluster import ClusterSpec, LocalCluster
    from e2e.demo import DemoPlan, run_demo
    from edge.policies import POLICIES

    console = Console(width=max(Console().width, 132))  # the comparison table needs ~130 columns
    policies = tuple(x.strip() for x in args.policies.split(",") if x.strip())
    unknown = [x for x in policies if x not in POLICIES]
    if unknown or not policies:
        console.print(f"error: --policies: expected names from {list(POLICIES)}, got {unknown}")
        return 2
    trace = None if args.no_trace else args.trace
    if trace is not None and not trace.exists():
        console.print(f"[yellow]trace not found: {trace}; skipping the Mooncake runs[/]")
        trace = None
    out: Path = args.out
    plan = DemoPlan(
        deployment=args.deployment, policies=policies, mixed_rates=args.rates,
        trace_rates=args.trace_rates, trace=trace, duration_s=args.duration_s,
        time_scale=args.time_scale, max_output_tokens=args.max_output_tokens, seed=args.seed,
        out_dir=out,
    )  # fmt: skip
    spec = ClusterSpec(deployment=args.deployment, time_scale=args.time_scale,
                       n_shards=args.n_shards, stream_interval=args.stream_interval,
                       vram_tokens=args.vram_tokens, dram_tokens=args.dram_tokens)  # fmt: skip
    note = (
        f"time scale {args.time_scale:g}: emulated workers and the edges' WAN delay run at "
        f"{args.time_scale:g} wall s per model s; every latency and rate is in model time"
    )
    console.rule("KVCompass end-to-end demo")
    console.print(note)
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    try:
        rows, checks = run_demo(
            plan, lambda: LocalCluster(spec, out / "run", on_status=console.print), console, rows
        )
    except Exception:
        if rows:  # keep what finished
            report.write_json(out / "demo.partial.json", {"error": "see the traceback"}, rows)
            console.print(f"[red]demo failed; {len(rows)} finished runs in "
                          f"{out / 'demo.partial.json'}[/]")  # fmt: skip
        raise
    title = f"{args.deployment}: every policy on the same requests ({note})"
    report.print_table(console, rows, title)
    meta = {"deployment": args.deployment, "time_scale": args.time_scale,
            "duration_s": args.duration_s, "max_output_tokens": args.max_output_tokens,
            "seed": args.seed, "checks": checks,
            "wall_s": round(time.perf_counter() - started, 1)}  # fmt: skip
    report.write_json(out / "demo.json", meta, rows)
    plots = report.plot(rows, out, note=note)
    console.print(f"checks: {checks}")
    console.print(f"wrote {out / 'demo.json'} and {', '.join(str(p) for p in plots)} "
                  f"in {meta['wall_s']} s")  # fmt: skip
    failed = any(r.get("completed", 0) == 0 for r in rows)
    return 1 if failed else 0
