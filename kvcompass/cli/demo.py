"""`kvcompass demo`: the project's main job as a newcomer meets it.

Today (foundation stage) it replays the Mooncake trace through the discovery index end to end —
prefix keys → registration at latency-derived lengths → Ludo patches → a keyless view — and
prints lookups, memory and timing, checking that the view answers exactly what the maintenance
side knows. Later stages grow it into the full multi-region system.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2].parent / "shared/data/mooncake/conversation_trace.jsonl"
)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
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
