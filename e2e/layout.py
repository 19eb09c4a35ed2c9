"""``Layout``: where every process of a ``LocalCluster`` listens (ports and base URLs).

Owns the port plan: ``base_port`` 0 picks free ports below the kernel's ephemeral range
(``e2e.process.free_ports``); otherwise edges ``base_port + i`` (region order), workers
``base_port + 10 + w``, broker ``+ 100`` and its controller ``+ 101``, SGLang gateways ``+ 110 + i``
and their Prometheus exporters ``+ 120 + i``. Must not start anything (``e2e.cluster``).
"""

from __future__ import annotations

from dataclasses import dataclass

from e2e.process import free_ports

HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Layout:
    edge_urls: dict[str, str]
    worker_urls: dict[int, str]
    gateway_urls: dict[str, str]
    """One SGLang gateway per region (the demo's local baseline)."""
    gateway_metrics_ports: dict[str, int]
    """Each gateway's Prometheus exporter (its default, 29000, would collide on one host)."""
    broker_ports: tuple[int, int]
    """(client, controller)."""

    @classmethod
    def plan(cls, regions: list[str], n_workers: int, base_port: int = 0) -> Layout:
        n_r, b = len(regions), base_port
        if b:
            if n_r > 10 or n_workers > 90:
                raise ValueError("base_port layout fits at most 10 regions and 90 workers")
            edge = [b + i for i in range(n_r)]
            worker = [b + 10 + w for w in range(n_workers)]
            broker = [b + 100, b + 101]
            gateway = [b + 110 + i for i in range(n_r)]
            metrics = [b + 120 + i for i in range(n_r)]
        else:
            ports = free_ports(3 * n_r + n_workers + 2)
            edge, rest = ports[:n_r], ports[n_r:]
            worker, rest = rest[:n_workers], rest[n_workers:]
            broker, rest = rest[:2], rest[2:]
            gateway, metrics = rest[:n_r], rest[n_r:]
        return cls(
            edge_urls={r: f"http://{HOST}:{p}" for r, p in zip(regions, edge, strict=True)},
            worker_urls={w: f"http://{HOST}:{p}" for w, p in enumerate(worker)},
            gateway_urls={r: f"http://{HOST}:{p}" for r, p in zip(regions, gateway, strict=True)},
            gateway_metrics_ports=dict(zip(regions, metrics, strict=True)),
            broker_ports=(broker[0], broker[1]),
        )
