"""`kvcompass kafka up|down|status`: the local single-node Kafka broker (wire.kafka_local).

Parses flags and calls the launcher; imports it only when the command runs, so the rest of the
CLI does not load confluent-kafka. Must not: hold launcher logic.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "kafka",
        help="start, stop or inspect a local single-node Kafka broker (KRaft, no Docker)",
        description="A real Apache Kafka broker on 127.0.0.1; jars come from Maven Central once "
        "and are cached under ${KVCOMPASS_CACHE:-~/.cache/kvcompass}/kafka/<version>/lib.",
    )
    actions = p.add_subparsers(dest="kafka_action", metavar="ACTION", required=True)
    for name, help_text in (
        ("up", "start the broker (if not running) and print its bootstrap address"),
        ("down", "stop the broker (SIGTERM, then SIGKILL)"),
        ("status", "print the broker's state as JSON"),
    ):
        a = actions.add_parser(name, help=help_text)
        a.add_argument("--port", type=int, default=19092, help="client port (default 19092)")
        a.add_argument(
            "--controller-port", type=int, default=None, help="KRaft controller port (port + 1)"
        )
        a.add_argument(
            "--state-dir",
            type=Path,
            default=None,
            help="data, log and pid directory (default ${KVCOMPASS_STATE:-~/.cache/kvcompass}/"
            "broker-<port>)",
        )
        a.add_argument("--kafka-version", default=None, help="Kafka version (default: pinned)")
        a.add_argument(
            "--secure",
            action="store_true",
            help="the broker with one SASL_SSL (SCRAM-SHA-512) client listener, one user and "
            "ACLs per role, the controller on mutual TLS, a local CA (made with openssl), state "
            "in broker-<port>-secure; `up` prints where each role's client settings are (source "
            "them: KVCOMPASS_SECURITY_PROTOCOL, KVCOMPASS_SASL_*, ...)",
        )
        if name == "up":
            a.add_argument("--timeout-s", type=float, default=90.0, help="readiness timeout")
            a.add_argument("--heap-mb", type=int, default=512, help="broker JVM heap (-Xmx)")
        a.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from wire.kafka_local import DEFAULT_VERSION, BrokerError, LocalBroker

    broker = LocalBroker(
        args.port,
        controller_port=args.controller_port,
        state_dir=args.state_dir,
        version=args.kafka_version or DEFAULT_VERSION,
        heap_mb=getattr(args, "heap_mb", 512),
        secure=args.secure,
    )
    try:
        if args.kafka_action == "up":
            print(broker.up(timeout_s=args.timeout_s))
            if args.secure:  # one SCRAM user per role (wire.acls): a process sources its own
                print(f"client settings per role: source {broker.state_dir / 'tls'}/<role>.env "
                      "(sidecar, maintenance, edge, admin)")  # fmt: skip
        elif args.kafka_action == "down":
            stopped = broker.down()
            print("stopped" if stopped else "not running")
        else:
            print(json.dumps(broker.status(), indent=2))
    except BrokerError as exc:
        print(f"error: {exc}")
        return 1
    return 0
