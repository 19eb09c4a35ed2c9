"""``SidecarConfig``: the one frozen configuration of a worker sidecar (architecture §8).

Owns where the engine is (HTTP base URL, KV-event PUB and replay ROUTER endpoints, topic, page
size, DP size), who the worker is in the deployment (worker id, key namespace), and the sidecar's
periods and bounds. Kafka addresses and topic names are ``wire.config.PipelineConfig``'s.
Validated in ``__post_init__``, which never does I/O.

DP ranks: an engine started with data-parallel attention size D runs D independent caches; rank r
publishes on the base ports + r and is worker ``worker_id + r`` of the deployment (consecutive ids).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlparse

from kvcompass.config_mapping import kwargs_from_mapping
from kvcompass.errors import ConfigError


def offset_endpoint(endpoint: str, rank: int) -> str:
    """``tcp://host:port`` with the port moved by ``rank`` (how engines place DP ranks)."""
    if rank == 0:
        return endpoint
    if endpoint.startswith("tcp://") and ":" in endpoint[6:]:
        base, _, port = endpoint.rpartition(":")
        return f"{base}:{int(port) + rank}"
    if endpoint.startswith(("inproc://", "ipc://")):
        return f"{endpoint}_dp{rank}"
    raise ConfigError(f"endpoint: expected tcp://host:port, ipc:// or inproc://, got {endpoint!r}")


@dataclass(frozen=True, slots=True)
class SidecarConfig:
    """Everything a sidecar needs besides Kafka; units in field names."""

    worker_id: int
    deployment: str = "paper-testbed-14x3"
    """Built-in deployment name or TOML path (wire.deployments.load_deployment)."""
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    model_config: str = ""
    sharing_group: str | None = None
    engine_url: str = "http://127.0.0.1:30000"
    events_endpoint: str = "tcp://127.0.0.1:5557"
    replay_endpoint: str | None = "tcp://127.0.0.1:5558"
    events_topic: str = "kv-events"
    page_size_tokens: int = 16
    dp_size: int = 1
    load_period_ms: int = 200
    replay_timeout_ms: int = 2_000
    migration_dedupe_entries: int = 10_000
    migration_timeout_ms: int = 120_000
    peers: tuple[tuple[int, str], ...] = ()
    """(worker id, engine URL) of same-region workers a migration may copy KV pages from."""
    region_workers: tuple[tuple[int, str], ...] = ()
    """(worker id, engine URL) the load reporter polls; empty = this worker only."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            positive = f.name.endswith(("_ms", "_tokens", "_entries")) or f.name == "dp_size"
            if positive and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"{f.name}: expected an int >= 1, got {value!r}")
        if not isinstance(self.worker_id, int) or self.worker_id < 0:
            raise ConfigError(f"worker_id: expected an int >= 0, got {self.worker_id!r}")
        for what, pairs in (("peers", self.peers), ("region_workers", self.region_workers)):
            for pair in pairs:
                ok = len(pair) == 2 and isinstance(pair[0], int) and pair[0] >= 0
                if not ok or not urlparse(str(pair[1])).netloc:
                    raise ConfigError(f"{what}: expected (worker id, http URL) pairs, got {pair!r}")
        if not self.model:
            raise ConfigError("model: expected a non-empty model id, got ''")
        url = urlparse(self.engine_url)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise ConfigError(f"engine_url: expected http(s)://host:port, got {self.engine_url!r}")
        for ep in (self.events_endpoint, self.replay_endpoint):
            if ep is not None and not ep.startswith(("tcp://", "ipc://", "inproc://")):
                raise ConfigError(f"endpoint: expected tcp://, ipc:// or inproc://, got {ep!r}")
            if ep is not None:
                offset_endpoint(ep, self.dp_size - 1)

    def reported_workers(self) -> list[tuple[int, str]]:
        return list(self.region_workers) or [(self.worker_id, self.engine_url)]

    def events_endpoints(self) -> list[str]:
        """PUB endpoint of every DP rank."""
        return [offset_endpoint(self.events_endpoint, r) for r in range(self.dp_size)]

    def replay_endpoints(self) -> list[str | None]:
        if self.replay_endpoint is None:
            return [None] * self.dp_size
        return [offset_endpoint(self.replay_endpoint, r) for r in range(self.dp_size)]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> SidecarConfig:
        """From a parsed file section or CLI flags; kebab-case accepted; unknown keys refused."""
        return cls(**kwargs_from_mapping(cls, values, "sidecar config"))
