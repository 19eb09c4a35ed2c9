"""Real SGLang launcher: the ``python -m sglang.launch_server`` command line the sidecar needs.

Owns the flags that must agree with the sidecar's ``SidecarConfig``: ``--kv-events-config``
(zmq publisher, PUB and replay ROUTER endpoints, topic), ``--page-size`` (the event block size),
``--enable-metrics``, ``--enable-cache-report`` (``cached_tokens`` in OpenAI usage), optional
``--enable-hierarchical-cache`` (the DRAM tier, HiCache) and ``--dp-size``. Refuses user
arguments that contradict them. Must not: import sglang (it exists only where a GPU does; the
``sglang`` extra installs it) or start the sidecar (``cli.worker`` does both).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from urllib.parse import urlparse

from kvcompass.errors import ConfigError
from workers.config import SidecarConfig

OWNED_FLAGS = (
    "--kv-events-config",
    "--page-size",
    "--host",
    "--port",
    "--dp-size",
    "--dp",
)


def _port(endpoint: str, what: str) -> int:
    if not endpoint.startswith("tcp://") or ":" not in endpoint[6:]:
        raise ConfigError(f"{what}: expected tcp://host:port for a real SGLang, got {endpoint!r}")
    return int(endpoint.rpartition(":")[2])


def kv_events_config(cfg: SidecarConfig) -> dict[str, str]:
    """The ``--kv-events-config`` JSON: SGLang binds ``tcp://*:port`` on every interface."""
    out = {
        "publisher": "zmq",
        "endpoint": f"tcp://*:{_port(cfg.events_endpoint, 'events_endpoint')}",
        "topic": cfg.events_topic,
    }
    if cfg.replay_endpoint is not None:
        out["replay_endpoint"] = f"tcp://*:{_port(cfg.replay_endpoint, 'replay_endpoint')}"
    return out


def build_command(
    cfg: SidecarConfig,
    sglang_args: Sequence[str],
    *,
    hierarchical_cache: bool = True,
    python: str = sys.executable,
) -> list[str]:
    """argv of the SGLang server consistent with ``cfg``; ``sglang_args`` add the rest (model,
    tensor parallelism, memory fraction...). Raises ``ConfigError`` on a contradicting flag."""
    for arg in sglang_args:
        flag = arg.split("=", 1)[0]
        if flag in OWNED_FLAGS:
            raise ConfigError(
                f"sglang args: {flag} is set from the sidecar config (page_size_tokens, "
                f"events/replay endpoints, engine_url, dp_size); expected it absent, got {arg!r}"
            )
    url = urlparse(cfg.engine_url)
    host, port = url.hostname or "127.0.0.1", url.port or 30000
    cmd = [python, "-m", "sglang.launch_server"]
    if not any(a.split("=", 1)[0] in ("--model-path", "--model") for a in sglang_args):
        cmd += ["--model-path", cfg.model]
    cmd += [
        "--host", host,
        "--port", str(port),
        "--page-size", str(cfg.page_size_tokens),
        "--kv-events-config", json.dumps(kv_events_config(cfg), separators=(",", ":")),
        "--enable-metrics",
        "--enable-cache-report",
    ]  # fmt: skip
    if cfg.dp_size > 1:
        cmd += ["--dp-size", str(cfg.dp_size)]
    if hierarchical_cache and "--enable-hierarchical-cache" not in sglang_args:
        cmd.append("--enable-hierarchical-cache")
    return cmd + list(sglang_args)
