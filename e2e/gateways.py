"""``Gateways``: SGLang's own gateway, one ``sglang-router`` per region in front of that region's
workers — the demo's local baseline — started and stopped inside a ``LocalCluster``.

Owns their life (command line: ``e2e.commands.gateway``; ports: ``e2e.layout``) and the check
that the package is here. A fresh start for every run that uses them: the gateway's radix tree
and load counts are then empty, as the workers' caches are after ``LocalCluster.flush_caches``
(which may run meanwhile: the gateway's start-up, a few seconds of worker probes, overlaps it).
Must not change what the gateway does: only its documented flags.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from e2e import commands, probes
from e2e.process import ClusterError

if TYPE_CHECKING:
    from e2e.cluster import LocalCluster


def gateway_missing() -> str:
    """Why SGLang's gateway cannot run here ('' when it can): its Python package is missing."""
    if importlib.util.find_spec("sglang_router") is None:
        return (
            "sglang-router is not installed (pip install 'sglang-router==0.3.2', the project's "
            "'conformance' extra, which make demo installs)"
        )
    return ""


class Gateways:
    """The cluster's gateways: ``start``, ``wait`` until they route, ``stop``."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.names = [f"gateway-{r}" for r in cluster.regions]

    def start(self) -> None:
        """Start one gateway per region (``cache_aware``, its shipped defaults); raises
        ``ClusterError`` when the package is missing (``gateway_missing``)."""
        missing = gateway_missing()
        if missing:
            raise ClusterError(missing)
        c = self.cluster
        for r, name in zip(c.regions, self.names, strict=True):
            port = int(c.gateway_urls[r].rsplit(":", 1)[1])
            urls = [c.worker_urls[w] for w in c.region_workers(r)]
            c.spawn(name, commands.gateway(urls, port, c.layout.gateway_metrics_ports[r]))
            c.expect_down(name, False)

    def wait(self, timeout_s: float = 120.0) -> None:
        """Until every gateway lists all of its region's workers as healthy (``GET /workers``)."""
        c = self.cluster
        want = {r: len(c.region_workers(r)) for r in c.regions}
        c.poll_until(
            lambda: all(probes.gateway_workers(c.gateway_urls[r]) >= n for r, n in want.items()),
            self.names, timeout_s,
        )  # fmt: skip

    def stop(self) -> None:
        """SIGTERM every gateway (SIGKILL after 10 s); not an error to find them stopped."""
        for name in self.names:
            self.cluster.expect_down(name, True)
        self.cluster.spawner.stop(self.names, timeout_s=10.0)
