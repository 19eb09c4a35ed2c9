"""The latencies an edge's decider assumes, derived from a deployment (architecture §6).

Owns ``edge_paths``: the one-way matrix an edge prices forwards with (the deployment's WAN
matrix, its diagonal the in-region hop) and, per worker region r, how long a registration by a
worker of r takes to reach this edge's view: r → the maintenance units' region (the sidecar
publishes there), the pipeline inside that cluster (batch window, Kafka hops), and the patch
back to this edge's region. The simulator's index path prices the same three legs from its own
network (``sim/schemes/_index_path.IndexPath.confirm_ms``). Must not read a clock or config
files.
"""

from __future__ import annotations

import numpy as np

from kvcompass.decider.plans import DeciderPaths
from kvcompass.deployment import Deployment
from kvcompass.errors import InvalidInputError

INDEX_PIPELINE_MS = 60.0
"""Event → view inside the maintenance cluster, WAN legs aside: the simulator's default
(``SimConfig.index_batch_ms`` 10 + ``index_base_delay_ms`` 50), which bench/README's pipeline
figures bracket (event → view P50 42–61 ms at 1K events/s on the dev VM)."""

REGISTRATION_SLACK_MS = 25.0
"""From a prefill's end to its registration's Kafka timestamp: the engine's KV event (SGLang
publishes per scheduler step), the sidecar's bridge and its producer's ``linger.ms``
(``wire.producer.LINGER_MS``, 5 ms), with room for the clock difference of two NTP-synced hosts.
A watermark past ``done + this`` means the registration would be in the view by now."""

HOLD_CAP_FLOOR_MS = 30_000.0
"""The longest a pending holder covers a view that stops advancing (a stalled pipeline): past it
the edge routes on the view alone again; ``/health`` has reported the stall well before
(``wire.follower_watch``). Raised to 10 observed lag P99s when those are longer."""


def edge_paths(
    deployment: Deployment,
    origin: int,
    maintenance_region: int = 0,
    pipeline_ms: float = INDEX_PIPELINE_MS,
) -> DeciderPaths:
    """The ``DeciderPaths`` of the edge of region ``origin`` when the maintenance units run in
    ``maintenance_region`` (default: the deployment's first region, the home region)."""
    n = deployment.n_regions
    if not 0 <= origin < n or not 0 <= maintenance_region < n:
        raise InvalidInputError(
            f"expected regions in 0..{n - 1}, got origin {origin}, maintenance {maintenance_region}"
        )
    if not (np.isfinite(pipeline_ms) and pipeline_ms >= 0):
        raise InvalidInputError(f"pipeline_ms: expected finite >= 0, got {pipeline_ms}")
    one_way = np.array(deployment.wan_matrix_ms, dtype=np.float64, copy=True)
    np.fill_diagonal(one_way, float(deployment.in_region_one_way_ms))
    mu = maintenance_region
    confirm = one_way[:, mu] + pipeline_ms + one_way[mu, origin]
    return DeciderPaths(one_way, np.ascontiguousarray(confirm))
