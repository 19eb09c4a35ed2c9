"""`kvcompass pipeline worker|topics`: the Faust pipeline worker (rechunk + shard maintenance).

Parses flags into a ``WorkerSettings`` and starts the shell; imports Faust only when the command
runs. The worker never serves HTTP: the Faust web server is disabled and bound to 127.0.0.1.
Must not: hold pipeline logic.
"""

from __future__ import annotations

import argparse
import os
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "pipeline",
        help="run the Kafka pipeline worker (rechunk + maintenance agents)",
        description="Faust worker: kv-events -> index-ops -> index-patches (DESIGN §7). "
        "Broker from --bootstrap, else KAFKA_BOOTSTRAP_SERVERS, else 127.0.0.1:19092.",
    )
    actions = p.add_subparsers(dest="pipeline_action", metavar="ACTION", required=True)
    for name, help_text in (
        ("worker", "create missing topics, then run the agents until SIGTERM/SIGINT"),
        ("topics", "create missing topics and report drift, then exit"),
    ):
        a = actions.add_parser(name, help=help_text)
        a.add_argument("--bootstrap", default=None, help="Kafka bootstrap servers")
        a.add_argument("--topic-prefix", default=None, help="prefix of every topic name")
        a.add_argument("--n-shards", type=int, default=None, help="shards N (default 4)")
        a.add_argument("--deployment", default="paper-testbed-14x3", help="name or .toml path")
        if name == "worker":
            a.add_argument("--app-id", default=None, help="Faust app id / consumer group")
            a.add_argument("--take-max", type=int, default=4000, help="records per batch")
            a.add_argument("--take-within-ms", type=float, default=10.0, help="batch wait")
            a.add_argument("--initial-capacity", type=int, default=1 << 12)
            a.add_argument("--loglevel", default="info", help="Faust worker log level")
            a.add_argument("--metrics-port", type=int, default=None,
                           help="serve /metrics on 127.0.0.1:PORT (0: a free port)")  # fmt: skip
        a.set_defaults(func=run)


def _config(args: argparse.Namespace) -> Any:
    from pipeline.config import PipelineConfig

    base: dict[str, Any] = {}
    if args.topic_prefix is not None:
        base["topic_prefix"] = args.topic_prefix
    if args.n_shards is not None:
        base["n_shards"] = args.n_shards
    env = dict(os.environ)
    if args.bootstrap:
        env["KAFKA_BOOTSTRAP_SERVERS"] = args.bootstrap
        env.pop("KVCOMPASS_BOOTSTRAP_SERVERS", None)
    cfg = PipelineConfig.from_env(env, base)
    return cfg


def run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    from kvcompass.cli.deployments import load_deployment
    from pipeline.topics import ensure_topics

    cfg = _config(args)
    report = ensure_topics(AdminClient({"bootstrap.servers": cfg.bootstrap_servers}), cfg)
    for d in report.drift:
        print(f"drift: {d}")
    if args.pipeline_action == "topics":
        print(f"created {list(report.created)}; existing {list(report.existing)}")
        return 0

    import faust

    from pipeline.app import PipelineShell, WorkerSettings, build_app

    settings = WorkerSettings(
        cfg,
        load_deployment(args.deployment),
        app_id=args.app_id or f"{cfg.topic_prefix}kvcompass-pipeline",
        take_max=args.take_max,
        take_within_s=args.take_within_ms / 1000.0,
        initial_capacity=args.initial_capacity,
    )
    shell = PipelineShell(settings)
    app = build_app(settings, shell)
    if args.metrics_port is not None:
        from pipeline.metrics import serve_metrics

        port = serve_metrics(shell, args.metrics_port)
        print(f"pipeline metrics on http://127.0.0.1:{port}/metrics", flush=True)
    worker = faust.Worker(app, loglevel=args.loglevel, redirect_stdouts=False)
    worker.execute_from_commandline()
    return 0
