"""The forwarding-scheme port of the simulator: what a scheme sees, what it returns.

A scheme plays the edge of every region: for each request it picks the worker that serves it
(``route``), and it may listen to what workers and the network report back. The engine owns the
clock, the workers and the WAN; a scheme never mutates them, it only returns decisions
(``Route``) and schedules its own timers through the context. One file per scheme, registered by
name in ``sim.schemes`` (vidur's one-policy-per-file layout).

Honesty rules every scheme follows (they are what the comparison rests on):

* A scheme learns worker state only through the channels its design has: ``on_cache_events``
  (delivered at emission time; the scheme delays them over ``ctx.network`` to model its own
  propagation), ``on_response`` (the edge sees the response when it arrives back), and its own
  timers. Only schemes whose design is "exact global state" (Oracle, Central Directory) may read
  ``ctx.cluster`` live; they pay for it in ``Route.lookup_ms`` where their design says so.
* The engine adds the WAN round trip origin -> worker -> origin, queueing, reload and prefill to
  every request; a scheme adds only its discovery cost (``lookup_ms``: a directory round trip,
  DHT hops).
* The worker reuses exactly the prefix it truly holds, whatever the scheme claimed
  (``claimed_tokens`` only feeds the false-hit metric and the scheme's own belief).

Lifecycle: ``__init__(ctx)`` -> ``start()`` (schedule timers) -> ``route`` per request in arrival
order, interleaved with callbacks in virtual-time order -> ``finish()``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from kvcompass.deployment import Deployment
    from kvcompass.levels import Levels
    from sim.config import SimConfig
    from sim.cost import CostModel


@dataclass(frozen=True, slots=True)
class Route:
    """A scheme's decision for one request.

    ``worker``: global worker id that serves it. ``lookup_ms``: discovery latency paid at the
    edge before forwarding (0 for local lookups). ``claimed_tokens``/``claimed_tier``: the match
    the scheme believed the chosen worker holds (0 = no claim).
    ``extra``: free-form numbers a scheme wants in its debug output (never read by the engine).
    """

    worker: int
    lookup_ms: float = 0.0
    claimed_tokens: int = 0
    claimed_tier: int = 0
    extra: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Migration:
    """Make ``dest`` hold the first ``tokens`` tokens of request ``req``'s prompt, in DRAM.

    ``source``: a worker of ``dest``'s region holding the prefix, copied over the regional
    network; None: the prompt is shipped and ``dest`` recomputes it (queued like a prefill).
    """

    dest: int
    req: int
    tokens: int
    source: int | None = None


@dataclass(frozen=True, slots=True)
class Response:
    """What the edge of ``origin`` learns when the first token of request ``req`` comes back.

    ``queue_ms`` is the serving region's per-worker backlog (ms of queued prefill) at the moment
    the worker sent the response, indexed like ``region_workers`` (the piggybacked vector).
    """

    req: int
    origin: int
    worker: int
    claimed_tokens: int
    reused_tokens: int
    arrive_ms: float
    sent_ms: float
    region: int
    region_workers: NDArray[np.int64]
    queue_ms: NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class CacheEventBatch:
    """The cache events one worker emitted at ``at_ms`` (prefill completion or migration).

    Each array holds the index keys whose state changed, exactly what a real worker's sidecar
    would publish after rechunking at its region's registration lengths: ``stored`` (new, in
    VRAM, or in DRAM for a migration into host memory: see ``stored_tier``), ``to_dram`` /
    ``to_vram`` (tier moved), ``removed`` (evicted from both tiers). ``stored_nodes`` and
    ``removed_nodes`` carry the same change at the worker's cache-chunk granularity (prefix-unique
    chunk ids), for schemes that track whole prefixes (radix trees) rather than index keys.
    The key arrays are filled only for schemes with ``wants_index_keys``; ``kinds``/``owners``/
    ``depths`` always are (a scheme may derive keys itself, batched: ``Requests.keys_for_changes``).
    """

    worker: int
    at_ms: float
    stored: NDArray[np.uint64]
    stored_tier: int
    to_dram: NDArray[np.uint64]
    to_vram: NDArray[np.uint64]
    removed: NDArray[np.uint64]
    stored_nodes: NDArray[np.int64]
    removed_nodes: NDArray[np.int64]
    kinds: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """The raw change list, one entry per chunk, in order: 0 stored, 1 promoted to VRAM,
    2 demoted to DRAM, 3 removed (``sim.cluster.kernels`` codes)."""
    owners: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per change: the request whose prompt names the chunk (its keys are that request's)."""
    depths: NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per change: the chunk's depth (it covers tokens ``(depth*C, (depth+1)*C]``)."""


class RequestTable(Protocol):
    """Every request of the run, with its prefix keys computed once before the replay."""

    n: int
    arrival_ms: NDArray[np.float64]
    origin: NDArray[np.int64]
    prompt_len: NDArray[np.int64]
    output_len: NDArray[np.int64]
    lengths: NDArray[np.int64]
    """Every indexed length of the deployment (union of all levels), ascending."""

    def keys_of(self, i: int) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        """(lengths, keys) of request ``i`` at every indexed length <= its prompt, ascending."""
        ...

    def nodes_of(self, i: int) -> NDArray[np.int64]:
        """Prefix-unique ids of request ``i``'s full cache chunks, in order."""
        ...


class ClusterView(Protocol):
    """Read-only live state of the simulated workers (exact; see the honesty rules above)."""

    n_workers: int
    worker_region: NDArray[np.int64]
    chunk_tokens: int

    def backlog_ms(self, now_ms: float) -> NDArray[np.float64]:
        """Queued prefill work of every worker at ``now_ms`` (ms until its FIFO drains)."""
        ...

    def match_all(self, req: int) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        """Tokens of request ``req``'s prompt every worker truly holds now, and their tier."""
        ...


class Network(Protocol):
    """The WAN as seen by control messages (index patches, queue vectors, DHT hops)."""

    def one_way_ms(self, src_region: int, dst_region: int) -> float:
        """Static one-way latency of the matrix (what a router may assume)."""
        ...

    def send(
        self,
        channel: str,
        src_region: int,
        dst_region: int,
        now_ms: float,
        deliver: Callable[[float, Any], None],
        payload: Any,
        extra_delay_ms: float = 0.0,
    ) -> bool:
        """Deliver ``payload`` to ``deliver(at_ms, payload)`` after the channel's delay, jitter and
        loss (configured per channel in ``SimConfig``). Returns False when the message is lost."""
        ...


class SchemeContext(Protocol):
    """What the engine hands a scheme at construction."""

    deployment: Deployment
    levels: Levels
    cost: CostModel
    config: SimConfig
    requests: RequestTable
    cluster: ClusterView
    network: Network
    rng: np.random.Generator
    """This scheme's own stream, spawned from the run's SeedSequence."""

    def schedule(self, at_ms: float, fn: Callable[[float], None], priority: int = 5) -> None:
        """Call ``fn(at_ms)`` at virtual time ``at_ms`` (ties: lower priority first, then FIFO)."""
        ...


class Scheme(ABC):
    """Base class of every forwarding scheme. Subclasses set ``name`` and implement ``route``."""

    name: ClassVar[str] = ""

    def __init__(self, ctx: SchemeContext) -> None:
        self.ctx = ctx

    def start(self) -> None:
        """Schedule periodic timers (broadcasts, refreshes). Called once before the replay."""
        return None  # default: the scheme does not listen

    @abstractmethod
    def route(self, req: int, now_ms: float) -> Route:
        """Choose the worker for request ``req`` arriving at its origin's edge at ``now_ms``."""

    def on_cache_events(self, batch: CacheEventBatch) -> None:
        """A worker changed its cache (called at emission time; delay it yourself if needed)."""
        return None  # default: the scheme does not listen

    def on_response(self, resp: Response) -> None:
        """The response of a request this scheme routed reached its edge."""
        return None  # default: the scheme does not listen

    def migrations(self) -> list[Migration]:
        """Drain the replicas the scheme wants made (paper §3.4 Insert).

        Called by the engine after each ``route``; the engine executes them (copy from ``source``
        within a region, recompute at ``dest`` otherwise; into ``dest``'s DRAM) and reports the
        resulting cache events like any other.
        """
        return []

    def on_migration_done(self, mig: Migration, at_ms: float) -> None:
        """A replica asked for by ``migrations`` is in place (its cache events follow)."""
        return None  # default: the scheme does not track its migrations

    def finish(self) -> dict[str, float]:
        """Scheme-specific counters for the results (e.g. update bytes)."""
        return {}
