"""What each process of a ``LocalCluster`` is started with: its ``kvcompass`` command line, and
the edge's TOML file.

Owns only the mapping from a ``ClusterSpec`` and the cluster's layout (ports, URLs, paths) to the
CLI's existing flags and ``EdgeConfig``'s TOML keys (``edge/config.py``). Pure: no I/O, no
processes (``e2e.cluster`` writes and starts them).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcompass.deployment import Deployment

if TYPE_CHECKING:
    from e2e.spec import ClusterSpec as Spec


def kvcompass(*args: str, **flags: Any) -> list[str]:
    """``python -m cli <args> --flag value ...`` (underscores become dashes)."""
    argv = [sys.executable, "-m", "cli", *args]
    for name, value in flags.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def maintenance(spec: Spec, bootstrap: str) -> list[str]:
    return kvcompass("pipeline", "worker", bootstrap=bootstrap, topic_prefix=spec.topic_prefix,
                     n_shards=spec.n_shards, deployment=spec.deployment,
                     loglevel="info")  # fmt: skip


def worker(spec: Spec, dep: Deployment, w: int, port: int) -> list[str]:
    """An emulated worker with SGLang's flags: the deployment's block size and its region's
    prefill rate; ZMQ on free ports (advertised in ``/server_info`` for the sidecar)."""
    beta = dep.regions[int(dep.worker_region[w])].prefill_ms_per_token
    events = {"publisher": "zmq", "endpoint": "tcp://127.0.0.1:*",
              "replay_endpoint": "tcp://127.0.0.1:*", "topic": "kv-events"}  # fmt: skip
    return [*kvcompass("worker", "emulate", host="127.0.0.1", port=port, model_path=spec.model,
                       page_size=dep.block_size_tokens, vram_tokens=spec.vram_tokens,
                       dram_tokens=spec.dram_tokens,
                       kv_events_config=json.dumps(events, separators=(",", ":")),
                       prefill_ms_per_token=beta, time_scale=spec.time_scale,
                       stream_interval=spec.stream_interval),
            "--enable-cache-report"]  # fmt: skip


def sidecar(spec: Spec, w: int, engine_url: str, bootstrap: str) -> list[str]:
    return kvcompass("-v", "worker", "sidecar", worker_id=w, deployment=spec.deployment,
                     model=spec.model, engine_url=engine_url, bootstrap_servers=bootstrap,
                     topic_prefix=spec.topic_prefix,
                     load_period_ms=spec.load_period_ms)  # fmt: skip


GATEWAY_MODULE = "sglang_router.launch_router"
"""SGLang's own gateway (PyPI ``sglang-router``, the ``conformance`` extra), as documented."""


def gateway(worker_urls: Sequence[str], port: int, metrics_port: int) -> list[str]:
    """One region's SGLang gateway in ``cache_aware`` mode in front of that region's workers.

    Its own defaults, as its authors ship them (``--cache-threshold 0.3``,
    ``--balance-abs-threshold 64``, ``--balance-rel-threshold 1.5``): the gateway's approximate
    radix tree over the request text (for ``input_ids``, the ids joined by spaces) and its own
    count of in-flight requests per worker are all it knows; no index, no queue vectors.
    ``metrics_port``: its Prometheus exporter (default 29000: one per gateway on a host)."""
    return [sys.executable, "-m", GATEWAY_MODULE, "--host", "127.0.0.1", "--port", str(port),
            "--policy", "cache_aware", "--log-level", "warn",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
            "--worker-urls", *worker_urls]  # fmt: skip


def edge(region: str, config: Path) -> list[str]:
    return kvcompass("-v", "edge", region=region, config=config)


def _s(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string for these values


def edge_toml(spec: Spec, region: str, port: int, view_dir: Path, workers: Mapping[int, str],
              peers: Mapping[str, str], bootstrap: str, relay_key: str) -> str:  # fmt: skip
    """The edge's config: every worker, the other regions' edges as peers (cross-region forwards
    relay through them, signed with the run's ``relay_key``: ``edge.relay_auth``), views in
    ``view_dir``, WAN delay scale = the workers' time scale, the spec's scheme, and
    ``admin = true`` (the launcher switches schemes live)."""
    lines = ["[edge]", f"region = {_s(region)}", f"deployment = {_s(spec.deployment)}",
             'host = "127.0.0.1"', f"port = {port}", f"model = {_s(spec.model)}",
             f"view_dir = {_s(str(view_dir))}",
             f"wan_delay_scale = {float(spec.time_scale)!r}",
             f"scheme = {_s(spec.edge_scheme)}", "admin = true",
             f"relay_key = {_s(relay_key)}"]  # fmt: skip
    lines += ["[workers]", *(f'"{w}" = {_s(u)}' for w, u in workers.items())]
    lines += ["[peers]", *(f"{r} = {_s(u)}" for r, u in peers.items() if r != region)]
    lines += ["[pipeline]", f"bootstrap_servers = {_s(bootstrap)}",
              f"topic_prefix = {_s(spec.topic_prefix)}", f"n_shards = {spec.n_shards}",
              ""]  # fmt: skip
    return "\n".join(lines)
