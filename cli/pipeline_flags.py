"""The Kafka flags of every command that makes or uses the pipeline's topics, taken one way.

``kvcompass worker sidecar|bridge|load|migrate|sglang``, ``edge``, ``pipeline worker|topics``,
``demo`` and ``demo-faults`` take ``--bootstrap-servers``, ``--topic-prefix`` and ``--n-shards``
from here; ``config`` resolves them with the environment and a config file's ``[pipeline]`` table
in the one precedence ``wire.config.PipelineConfig.resolve`` documents (flag > ``KVCOMPASS_*``
env > file > default). A sidecar started first with ``--n-shards 2`` creates ``index-ops`` and
``index-patches`` with 2 partitions, and an edge or pipeline given 2 the same way agrees with it.
Must not: hold defaults (``PipelineConfig`` does; a flag not given is None) or import anything
heavier than ``argparse`` when the parser is built (``tests/unit/cli/test_main.py``).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

FIELDS = ("bootstrap_servers", "topic_prefix", "n_shards")


def add(p: argparse.ArgumentParser, bootstrap_help: str = "Kafka bootstrap servers") -> None:
    p.add_argument("--bootstrap-servers", "--bootstrap", dest="bootstrap_servers", default=None,
                   help=f"{bootstrap_help} (else KAFKA_BOOTSTRAP_SERVERS / "
                   "KVCOMPASS_BOOTSTRAP_SERVERS, else the local broker's)")  # fmt: skip
    p.add_argument("--topic-prefix", default=None,
                   help="prefix of every topic name (else KVCOMPASS_TOPIC_PREFIX)")  # fmt: skip
    p.add_argument("--n-shards", type=int, default=None,
                   help="shards N = partitions of index-ops and index-patches, the same for "
                   "every process of a deployment (else KVCOMPASS_N_SHARDS, else "
                   "PipelineConfig's default; wire/README)")  # fmt: skip


def given(args: argparse.Namespace) -> dict[str, Any]:
    """The Kafka flags the user gave (not None)."""
    return {k: getattr(args, k) for k in FIELDS if getattr(args, k, None) is not None}


def config(
    args: argparse.Namespace,
    file: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Any:
    """``PipelineConfig`` of the flags, the environment (``os.environ``) and ``file``."""
    from wire.config import PipelineConfig

    return PipelineConfig.resolve(file, os.environ if env is None else env, given(args))


def add_n_shards(p: argparse.ArgumentParser) -> None:
    """``--n-shards`` alone (the demos: they start their own broker and topics)."""
    p.add_argument("--n-shards", type=int, default=None,
                   help="shards N (else KVCOMPASS_N_SHARDS, else PipelineConfig's)")  # fmt: skip


def n_shards(args: argparse.Namespace) -> int:
    """The resolved shard count of a command that passes N on to the processes it starts."""
    from wire.config import PipelineConfig

    return PipelineConfig.resolve(None, os.environ, {"n_shards": args.n_shards}).n_shards
