"""``ClusterSpec``: what a ``LocalCluster`` starts (deployment, scales, pool sizes, ports).

Owns the launcher's settings and their validation; must not start anything (``e2e.cluster``)
or build command lines (``e2e.commands``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """What to start. Units in the names; validated on construction."""

    deployment: str = "paper-testbed-14x3"
    """Built-in name or deployment TOML path (paper-testbed-14x3: us 8, eu 2, asia 4 workers)."""
    time_scale: float = 1.0
    """Emulated workers' sleep scale; the edges' ``wan_delay_scale`` is set equal."""
    n_shards: int = 4
    n_maintenance: int = 2
    """Maintenance (Faust) processes, one app id: Kafka splits the shards between them."""
    base_port: int = 0
    """0: free ports; else edges base+i, workers base+10+w, broker base+100 (+101 controller)."""
    vram_tokens: int = 32_768
    """Per emulated worker; small enough that a demo load evicts and moves pages to DRAM."""
    dram_tokens: int = 131_072
    edge_policy: str = "kvcompass"
    bootstrap_servers: str | None = None
    """None: start a local broker (``pipeline.kafka_local``) in ``run_dir/broker``."""
    topic_prefix: str = ""
    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    load_period_ms: int = 200
    """Δ of the sidecars' load reporters (queue vectors)."""
    stream_interval: int = 1
    """Emulated workers' ``--stream-interval`` (tokens per streamed chunk after the first)."""
    start_timeout_s: float = 240.0

    def __post_init__(self) -> None:
        if not self.time_scale >= 0:
            raise ValueError(f"time_scale: expected >= 0, got {self.time_scale}")
        for name in ("n_shards", "n_maintenance", "vram_tokens", "load_period_ms",
                     "stream_interval"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected >= 1, got {getattr(self, name)}")
        if self.dram_tokens < 0:
            raise ValueError(f"dram_tokens: expected >= 0, got {self.dram_tokens}")
        if self.base_port and not 1024 <= self.base_port <= 65535 - 200:
            raise ValueError(f"base_port: expected 0 or 1024..65335, got {self.base_port}")
