"""`kvcompass pipeline worker|topics|acls`: the Faust pipeline worker (rechunk + shard
maintenance), its topics, and the roles' ACLs on a secured broker (``wire.acls``).

Parses flags into a ``WorkerSettings`` and starts the shell; imports Faust only when the command
runs. The worker never serves HTTP: the Faust web server is disabled and bound to 127.0.0.1.
Must not: hold pipeline logic.
"""

from __future__ import annotations

import argparse
from typing import Any

from cli import pipeline_flags


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "pipeline",
        help="run the Kafka pipeline worker (rechunk + maintenance agents)",
        description="Faust worker: kv-events -> index-ops -> index-patches (architecture §7). "
        "Kafka flags as every command takes them (flag > KVCOMPASS_* env > default).",
    )
    actions = p.add_subparsers(dest="pipeline_action", metavar="ACTION", required=True)
    for name, help_text in (
        ("worker", "create missing topics, then run the agents until SIGTERM/SIGINT"),
        ("topics", "create missing topics and report drift, then exit"),
        (
            "acls",
            "grant each role (sidecar, maintenance, edge, admin) its ACLs on this "
            "deployment's topics (admin credentials; idempotent), then exit",
        ),
    ):
        a = actions.add_parser(name, help=help_text)
        pipeline_flags.add(a)
        a.add_argument("--deployment", default="paper-testbed-14x3", help="name or .toml path")
        if name == "worker":
            a.add_argument("--app-id", default=None, help="Faust app id / consumer group")
            a.add_argument("--take-max", type=int, default=4000, help="records per batch")
            a.add_argument("--take-within-ms", type=float, default=10.0, help="batch wait")
            a.add_argument("--initial-capacity", type=int, default=1 << 12)
            a.add_argument("--loglevel", default="info", help="Faust worker log level")
            a.add_argument("--stop-timeout-s", type=float, default=30.0,
                           help="after SIGTERM, exit within this long (final checkpoints "
                           "included) whatever hangs; status 3 if cut short")  # fmt: skip
            a.add_argument("--metrics-port", type=int, default=None,
                           help="serve /metrics on 127.0.0.1:PORT (0: a free port)")  # fmt: skip
        a.set_defaults(func=run)


def _config(args: argparse.Namespace) -> Any:
    return pipeline_flags.config(args)


def run(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient

    from wire.deployments import load_deployment
    from wire.kafka_clients import librdkafka_conf
    from wire.topics import adopt_retention, ensure_topics

    cfg = _config(args)
    if args.pipeline_action == "acls":
        return _acls(cfg)
    if cfg.checkpointing_note:  # a short index-ops retention implied the checkpoint period
        print(f"implied: {cfg.checkpointing_note}", flush=True)
    report = ensure_topics(AdminClient(librdkafka_conf(cfg)), cfg)
    for d in report.drift:
        print(f"drift: {d}")
    cfg, adopted = adopt_retention(cfg, report.drift)  # or a one-line ConfigError, exit 2
    if adopted:
        print(f"adopted: {adopted}", flush=True)
    if args.pipeline_action == "topics":
        print(f"created {list(report.created)}; existing {list(report.existing)}")
        return 0

    from pipeline.agents import build_app, run_worker
    from pipeline.shell import PipelineShell, WorkerSettings

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
    run_worker(app, args.loglevel, shell, args.stop_timeout_s)
    return 0


def _acls(cfg: Any) -> int:
    from confluent_kafka.admin import AdminClient

    from wire.acls import AclError, ensure_acls, grants, user
    from wire.kafka_clients import librdkafka_conf
    from wire.logs import one_line

    for g in grants(cfg):
        print(f"User:{user(g.role)} {g.operation} {g.resource} {g.name} ({g.pattern})")
    try:
        print(f"{ensure_acls(AdminClient(librdkafka_conf(cfg)), cfg)} bindings in place")
    except AclError as exc:
        print(one_line(exc))
        return 1
    return 0
