"""The values the decider returns and keeps: plans, dispatch outputs, verdicts, paths.

Owns the data shapes of ``kvcompass.decider.Decider``'s API (decisions are data, STYLE 2):
``Plan`` (where a request goes), ``Sent`` (what a dispatch asks the shell to do), ``Verdict``
(the owning region's answer to a relay), ``DeciderPaths`` (the latencies an edge assumes) and
the per-forward record. Must not compute anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from kvcompass.decider.vector import InFlight, QueueVector, Shortlist
from kvcompass.discovery import Lookup
from kvcompass.router.decision import Decision
from kvcompass.router.hot_prefix import MigrationRequest


class Plan(NamedTuple):
    """Where one request goes: ``worker`` directly (``relay_region`` -1), or relayed to the edge
    of ``relay_region`` with ``shortlist`` (``worker`` is then the origin's favourite there)."""

    fid: int
    decision: Decision
    lookup: Lookup
    worker: int
    relay_region: int = -1
    shortlist: Shortlist | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    """What a dispatch asks the shell to do besides sending the request."""

    announce: InFlight | None
    """Tell every other edge about this forward (``on_peer_forward``), or None."""
    migrations: list[MigrationRequest] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The owning region's answer to a relayed request: a plan for one of its workers
    (accepted: dispatch it) or its current vector (refused: send it back)."""

    plan: Plan | None
    vector: QueueVector | None = None


@dataclass(slots=True)
class ForwardRecord:
    plan: Plan
    region: int
    arrive_ms: float
    work_ms: float
    booked: bool
    claimed: dict[int, int]
    relayed_for: int = -1
    """At the owning region: the origin region of an accepted relay (else -1)."""


@dataclass(frozen=True, slots=True)
class DeciderPaths:
    """The latencies one edge assumes: the static one-way matrix (diagonal: the in-region hop)
    and, per worker region r, how long a registration by a worker of r takes to reach this
    edge's view (WAN to the maintenance units + batch window + pipeline + WAN back)."""

    one_way_ms: NDArray[np.float64]
    confirm_ms: NDArray[np.float64]
