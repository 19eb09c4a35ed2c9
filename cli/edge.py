"""``kvcompass edge``: run the edge process of one region (``edge.main.run_edge``).

    kvcompass edge --region us --config edge.toml
    kvcompass edge --region us --config paper-testbed-14x3 --worker 0=http://127.0.0.1:30000 \\
        --bootstrap-servers 127.0.0.1:19092 --view-dir /var/lib/kvcompass/views

``--config`` is a TOML file with ``[edge]``/``[workers]``/``[peers]``/``[pipeline]`` tables (it
may also be a whole deployment file carrying those tables), or just a deployment (built-in name
or path). Flags override the file; they mirror ``EdgeConfig`` fields in kebab-case. The edge
module is imported only when the command runs. Kafka is used with a ``[pipeline]`` table or a
Kafka flag (``cli/pipeline_flags.py``: flag > ``KVCOMPASS_*`` env > the table > default).
The relay key (``edge.relay_key``, required with peers) comes from the file or, when the file
has none, from ``KVCOMPASS_RELAY_KEY`` (so it need not sit in a config file).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from cli import pipeline_flags
from kvcompass.errors import ConfigError

RELAY_KEY_ENV = "KVCOMPASS_RELAY_KEY"
"""The deployment's relay key (``edge.relay_key``) when the config file does not name it."""


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "edge",
        help="run the edge process of one region (HTTP front, views from Kafka, router)",
        description="Edge of one region: OpenAI-compatible + /generate front over the index view.",
    )
    p.add_argument("--region", required=True, help="region name in the deployment")
    p.add_argument("--config", default=None, help="edge TOML file, or a deployment name/path")
    p.add_argument("--deployment", default=None, help="built-in deployment name or TOML path")
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=None)
    p.add_argument("--model", default=None, help="served model id (key namespace)")
    p.add_argument("--tokenizer", default=None, help="builtin | hf:<local path>")
    p.add_argument("--view-dir", default=None, help="directory of the mmap'd view files")
    p.add_argument(
        "--view-mode",
        default=None,
        choices=("writer", "reader"),
        help="writer: consume index-patches into --view-dir; reader: serve its files",
    )
    p.add_argument("--wan-delay-scale", type=float, default=None)
    p.add_argument("--decision-sample-rate", type=float, default=None)
    pipeline_flags.add(p, "Kafka (or the file's [pipeline]; neither: no Kafka)")
    p.add_argument("--worker", action="append", default=[], metavar="ID=URL")
    p.add_argument("--peer", action="append", default=[], metavar="REGION=URL")
    p.set_defaults(func=run)


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ConfigError(f"--{what}: expected KEY=URL, got {item!r}")
        out[key] = value
    return out


def _edge_table(path: str | None) -> dict[str, Any]:
    """The ``[edge]`` table of the config file ({} if none or unreadable: ``load`` reports it)."""
    import tomllib

    if path is None:
        return {}
    try:
        table = tomllib.loads(Path(path).read_text(encoding="utf-8")).get("edge", {})
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return table if isinstance(table, dict) else {}


def options(args: argparse.Namespace) -> tuple[Any, Any]:
    """(EdgeConfig, Deployment) from the file and the flags."""
    import dataclasses
    import os
    import tomllib

    from edge.config import EdgeConfig
    from edge.main import load

    path: str | None = args.config
    overrides: dict[str, Any] = {
        "region": args.region, "host": args.host, "port": args.port, "model": args.model,
        "tokenizer": args.tokenizer, "view_dir": args.view_dir, "view_mode": args.view_mode,
        "wan_delay_scale": args.wan_delay_scale,
        "decision_sample_rate": args.decision_sample_rate,
    }  # fmt: skip
    if path is not None and not Path(path).is_file() and not path.endswith(".toml"):
        overrides["deployment"] = path  # a built-in deployment name
        path = None
    if args.deployment is not None:
        overrides["deployment"] = args.deployment
    env_key = os.environ.get(RELAY_KEY_ENV) or None
    if env_key is not None and "relay_key" not in _edge_table(path):
        overrides["relay_key"] = env_key  # the file's key first, else the environment's
    cfg, dep = load(path, overrides)
    raw = tomllib.loads(Path(path).read_text(encoding="utf-8")) if path else {}
    workers = {**{str(k): v for k, v in raw.get("workers", {}).items()},
               **_pairs(args.worker, "worker")}  # fmt: skip
    peers = {**raw.get("peers", {}), **_pairs(args.peer, "peer")}
    pipe = dict(raw.get("pipeline", {}))
    # Kafka is on with a [pipeline] table or a Kafka flag; then env fills in (one precedence)
    on = bool(pipe) or bool(pipeline_flags.given(args))
    cfg = dataclasses.replace(
        cfg,
        workers=tuple(sorted((int(k), v) for k, v in workers.items())),
        peers=tuple(sorted(peers.items())),
        pipeline=pipeline_flags.config(args, pipe) if on else None,
    )
    EdgeConfig.__post_init__(cfg)
    return cfg, dep


def run(args: argparse.Namespace) -> int:
    import asyncio

    from edge.main import run_edge

    cfg, dep = options(args)
    asyncio.run(run_edge(cfg, dep))
    return 0
