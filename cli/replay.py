"""`kvcompass replay` and `kvcompass export`: offline rebuild, diff and key history; event export.

`replay` reads kv-events (an offset or time range, or a file written by `export`), rebuilds the
index with the same core as the pipeline, prints counts, optionally diffs it against a view file
directory (`--diff-view DIR`) and prints the history of prefix keys (`--key K`, repeatable).
`export` writes a range of kv-events to an Avro object container file. Both import the shell
only when they run. Must not: hold replay logic (``pipeline.replay``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any


def _range_args(a: argparse.ArgumentParser) -> None:
    a.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers")
    a.add_argument("--topic-prefix", default="", help="prefix of every topic name")
    a.add_argument("--start-offset", type=int, default=None, help="first offset per partition")
    a.add_argument("--end-offset", type=int, default=None, help="stop before this offset")
    a.add_argument("--start-ms", type=int, default=None, help="first broker timestamp (ms)")
    a.add_argument("--end-ms", type=int, default=None, help="stop at this timestamp (ms)")


def register(subparsers: Any) -> None:
    r = subparsers.add_parser(
        "replay",
        help="rebuild the index offline from kv-events; diff with views; trace a key",
        description="Rebuild the keyed index from kv-events (Kafka range or --from-file).",
    )
    _range_args(r)
    r.add_argument("--from-file", type=Path, default=None, help="Avro file from `export`")
    r.add_argument("--deployment", default="paper-testbed-14x3", help="name or .toml path")
    r.add_argument("--n-shards", type=int, default=4, help="shards N")
    r.add_argument("--diff-view", type=Path, default=None, help="view file directory to diff")
    r.add_argument("--key", type=int, action="append", default=[], help="trace this prefix key")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    r.set_defaults(func=run_replay)
    e = subparsers.add_parser(
        "export", help="write a range of kv-events to an Avro object container file"
    )
    _range_args(e)
    e.add_argument("--out", type=Path, required=True, help="output .avro file")
    e.set_defaults(func=run_export)


def _records(args: argparse.Namespace) -> Any:
    from pipeline.replay import read_kafka
    from wire.config import PipelineConfig

    env = dict(os.environ)
    if args.bootstrap:
        env["KAFKA_BOOTSTRAP_SERVERS"] = args.bootstrap
        env.pop("KVCOMPASS_BOOTSTRAP_SERVERS", None)
    return read_kafka(
        PipelineConfig.from_env(env),  # address and security settings (KVCOMPASS_SASL_...)
        f"{args.topic_prefix}kv-events",
        start_offset=args.start_offset,
        end_offset=args.end_offset,
        start_ms=args.start_ms,
        end_ms=args.end_ms,
    )


def run_replay(args: argparse.Namespace) -> int:
    from kvcompass.levels import Levels
    from pipeline.export import read_export
    from pipeline.replay import diff_view_dir, new_replay
    from wire.codec import AvroCodec
    from wire.deployments import load_deployment
    from wire.registry import InProcessRegistry

    dep = load_deployment(args.deployment)
    replay = new_replay(dep, args.n_shards, args.key)
    codec = AvroCodec(InProcessRegistry())
    source = read_export(args.from_file) if args.from_file else _records(args)
    for rec in source:
        replay.feed(rec, codec, f"{args.topic_prefix}kv-events")
    out: dict[str, Any] = {
        "events": replay.events,
        "invalid": replay.invalid,
        "key_ops": replay.key_ops,
        "entries": replay.index.entries(),
    }
    if args.diff_view is not None:
        d = diff_view_dir(replay, args.diff_view, Levels.from_deployment(dep).matrix)
        out["diff"] = {"checked": d.checked, "mismatched": d.mismatched,
                       "missing_views": d.missing_views, "examples": d.examples}  # fmt: skip
    if args.key:
        out["history"] = {
            str(k): {
                "holders": replay.holders(k),
                "events": [_touch(t) for t in touches],
            }
            for k, touches in replay.traced.items()
        }
    if args.json:
        print(json.dumps(out))
    else:
        for name, value in out.items():
            print(f"{name}: {value}")
    mismatched = int(out.get("diff", {}).get("mismatched", 0))
    return 1 if mismatched else 0


def _touch(t: Any) -> dict[str, Any]:
    return {name: getattr(t, name) for name in t.__slots__}


def run_export(args: argparse.Namespace) -> int:
    from pipeline.export import export_events
    from wire.codec import AvroCodec
    from wire.registry import InProcessRegistry

    n = export_events(_records(args), args.out, AvroCodec(InProcessRegistry()))
    print(f"exported {n} events to {args.out}")
    return 0
