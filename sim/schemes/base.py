"""The forwarding-scheme port of the simulator: what a scheme sees, what it returns.

A scheme plays the edge of every region: for each request it picks the worker that serves it
(``route``), and it may listen to what workers and the network report back. The engine owns the
clock, the workers and the WAN; a scheme never mutates them, it only returns decisions
(``Route``) and schedules its own timers through the context. One file per scheme, registered by
name in ``sim.schemes`` (vidur's one-policy-per-file layout).

Information rules (sim/README "who knows what, when"; the comparison rests on them). The context
a scheme receives exposes only the channels a real deployment of its design would have:

* **Cache state**: ``on_cache_events`` is called when the worker emits (prefill finish); the
  scheme carries the events to wherever its design keeps them over ``ctx.network`` (one-way WAN
  at least) before any decision may use them.
* **Queues of the edge's own region**: ``ctx.loads``, the periodic load poll of a real edge
  (``edge/loads.py``: every ``loads_poll_period_ms``, answers one in-region round trip later),
  each reading the ``load_report`` estimate of SGLang's ``/v1/loads`` fields
  (``sim.engine.loads``), and what the scheme's own edges dispatched (a booking edge's).
* **Remote queues**: only what the scheme itself ships over ``ctx.network`` (vectors built from
  the poll readings of the sending region) or finds in ``Response.queue_ms`` (the serving
  region's last poll reading, piggybacked).
* **Exact live state** (``ctx.exact_cache``: every worker's true match; ``ctx.exact_queues``:
  every worker's true backlog) is given only to schemes that declare it and whose name ends in
  ``_ideal`` (references, never counted as wins); the paper's least-loaded ``oracle`` (the
  load-factor floor, §5.3) may declare ``exact_queues`` only. Everyone else gets ``None``, and
  the runner refuses a scheme that declares what its name does not allow
  (``check_information``).

The engine adds the WAN round trip origin -> worker -> origin, queueing, reload and prefill to
every request; a scheme adds only its discovery cost (``lookup_ms``: a directory round trip, DHT
hops). The worker reuses exactly the prefix it truly holds, whatever the scheme claimed
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

from kvcompass.errors import ConfigError

if TYPE_CHECKING:
    from kvcompass.deployment import Deployment
    from kvcompass.levels import Levels
    from kvcompass.router import RouterConfig
    from sim.config import SimConfig
    from sim.cost import CostModel


@dataclass(frozen=True, slots=True)
class Route:
    """A scheme's decision for one request.

    ``worker``: global worker id that serves it, or ``HELD`` (-1): the scheme keeps the request
    (a balancer's queue) and hands it over later with ``SchemeContext.dispatch``, so the wait is
    part of its TTFT. ``lookup_ms``: discovery latency paid at the
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

    ``queue_ms`` is the serving region's per-worker queue estimate (``load_report`` of the
    engines' ``/v1/loads``) as that region's edge last polled it (``LoadPoll.last``) when the
    response left, indexed like ``region_workers`` (the piggybacked vector; empty when lost, or
    before the first poll). A scheme whose edges build their own vectors (KVCompass) reads only
    whether it was lost.
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
    queue_taken_ms: float = -np.inf
    """When the piggybacked readings were taken (the poll's ``taken_ms``)."""


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
    """Every request of the run, with its prefix keys computed once before the replay.

    Static inputs a scheme may read for request ``i`` when it routes ``i`` (what the edge has
    once the prompt arrived: its tokens, hence its keys) or for requests already routed.
    """

    @property
    def n(self) -> int: ...
    @property
    def arrival_ms(self) -> NDArray[np.float64]: ...
    @property
    def origin(self) -> NDArray[np.int64]: ...
    @property
    def prompt_len(self) -> NDArray[np.int64]: ...
    @property
    def output_len(self) -> NDArray[np.int64]: ...
    @property
    def lengths(self) -> NDArray[np.int64]:
        """Every indexed length of the deployment (union of all levels), ascending."""
        ...

    @property
    def key_offsets(self) -> NDArray[np.int64]:
        """(n + 1,) request ``i``'s keys are ``keys[key_offsets[i]:key_offsets[i + 1]]``."""
        ...

    @property
    def keys(self) -> NDArray[np.uint64]:
        """Prefix keys of every request at every indexed length <= its prompt, concatenated."""
        ...

    def keys_of(self, i: int) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        """(lengths, keys) of request ``i`` at every indexed length <= its prompt, ascending."""
        ...

    def query_of(self, i: int, origin: int) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        """(lengths, keys) an edge in ``origin`` queries for request ``i`` (its query union)."""
        ...

    def nodes_of(self, i: int) -> NDArray[np.int64]:
        """Prefix-unique ids of request ``i``'s full cache chunks, in order."""
        ...

    def keys_for_changes(
        self, owners: NDArray[np.int64], depths: NDArray[np.int64], regions: NDArray[np.int64]
    ) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        """Keys inside many changed chunks, each at its worker region's registration lengths;
        returns (keys, item): ``item[j]`` is the change key ``j`` came from."""
        ...


class ClusterShape(Protocol):
    """The static shape of the pool (every scheme knows it at deployment time)."""

    @property
    def n_workers(self) -> int: ...
    @property
    def worker_region(self) -> NDArray[np.int64]: ...
    @property
    def chunk_tokens(self) -> int: ...


class ExactQueues(Protocol):
    """Every worker's exact live backlog: for ``*_ideal`` references and the paper's Oracle."""

    def backlog_ms(self, now_ms: float) -> NDArray[np.float64]:
        """Queued prefill work of every worker at ``now_ms`` (ms until its FIFO drains)."""
        ...


class ExactCache(Protocol):
    """Every worker's exact live cache: for ``*_ideal`` references only."""

    def match_all(self, req: int) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        """Tokens of request ``req``'s prompt every worker truly holds now, and their tier."""
        ...


@dataclass(frozen=True, slots=True)
class LoadReading:
    """One completed load poll of ``region``'s workers (what an edge's ``LocalLoads`` gets).

    ``queue_ms[i]`` is worker ``workers[i]``'s backlog when its answer was produced
    (``taken_ms``); the reading reaches the region's edge at ``at_ms``.
    """

    region: int
    workers: NDArray[np.int64]
    queue_ms: NDArray[np.float64]
    taken_ms: float
    at_ms: float


class LoadPoll(Protocol):
    """The periodic in-region load poll of every region's edge (mirrors ``edge/loads.py``)."""

    period_ms: float
    timeout_ms: float

    def subscribe(self, region: int, deliver: Callable[[LoadReading], None]) -> None:
        """Call ``deliver(reading)`` with every poll of ``region`` as it completes."""
        ...

    def last(self, region: int) -> LoadReading | None:
        """``region``'s latest completed poll (None before the first): what its edge, and its
        load reporter's vector, know of its workers now."""
        ...


class Network(Protocol):
    """The WAN as seen by control messages (index patches, queue vectors, DHT hops)."""

    def one_way_ms(self, src_region: int, dst_region: int) -> float:
        """Static one-way latency of the matrix (what a router may assume)."""
        ...

    def sample_ms(self, src_region: int, dst_region: int) -> float:
        """Actual latency of one message now (matrix with the run's jitter)."""
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
    """What the engine hands a scheme at construction (see the information rules above).

    Members are read-only for the scheme (properties), so any object with these attributes
    (the runner's context, the baseline tests' ``FakeContext``) implements it.
    """

    @property
    def deployment(self) -> Deployment: ...
    @property
    def levels(self) -> Levels: ...
    @property
    def cost(self) -> CostModel: ...
    @property
    def config(self) -> SimConfig: ...
    @property
    def router_config(self) -> RouterConfig | None:
        """The run's router tunables (None: the defaults)."""
        ...

    @property
    def requests(self) -> RequestTable: ...
    @property
    def cluster(self) -> ClusterShape: ...
    @property
    def network(self) -> Network: ...
    @property
    def loads(self) -> LoadPoll: ...
    @property
    def exact_queues(self) -> ExactQueues | None:
        """Exact live backlogs, or None (only ``*_ideal`` schemes and ``oracle`` get them)."""
        ...

    @property
    def exact_cache(self) -> ExactCache | None:
        """Exact live cache state, or None (only ``*_ideal`` schemes get it)."""
        ...

    @property
    def rng(self) -> np.random.Generator:
        """This scheme's own stream, spawned from the run's SeedSequence."""
        ...

    def schedule(self, at_ms: float, fn: Callable[[float], None], priority: int = 5) -> None:
        """Call ``fn(at_ms)`` at virtual time ``at_ms`` (ties: lower priority first, then FIFO)."""
        ...

    def dispatch(self, req: int, route: Route, at_ms: float, from_region: int) -> None:
        """Send a request the scheme held (``Route.worker`` was ``HELD``) to ``route.worker``.

        It leaves region ``from_region`` (where the balancer holding it sits) at ``at_ms`` and
        reaches the worker ``route.lookup_ms`` + one jittered one-way WAN later. Call at most
        once per held request, at ``at_ms`` = the current virtual time.
        """
        ...


HELD = -1
"""``Route.worker`` of a request the scheme keeps for now (``SchemeContext.dispatch`` later)."""


class InformationError(ConfigError):
    """A scheme declares knowledge that its name does not allow (see the information rules)."""


def check_information(cls: type[Scheme]) -> None:
    """Refuse ``cls`` if it declares exact state its name does not allow."""
    ideal = cls.name.endswith("_ideal")
    if cls.exact_cache and not ideal:
        raise InformationError(
            f"scheme {cls.name!r}: exact live cache state is for '*_ideal' references only"
        )
    if cls.exact_queues and not (ideal or cls.name == ORACLE_NAME):
        raise InformationError(
            f"scheme {cls.name!r}: exact live queues are for '*_ideal' references and "
            f"{ORACLE_NAME!r} (the load-factor floor) only"
        )


ORACLE_NAME = "oracle"
"""The paper's least-loaded Oracle (§5.3): the one non-ideal name allowed exact queues."""


class Scheme(ABC):
    """Base class of every forwarding scheme. Subclasses set ``name`` and implement ``route``."""

    name: ClassVar[str] = ""
    exact_queues: ClassVar[bool] = False
    """Reads ``ctx.exact_queues`` (allowed for ``*_ideal`` and ``oracle`` only)."""
    exact_cache: ClassVar[bool] = False
    """Reads ``ctx.exact_cache`` (allowed for ``*_ideal`` only)."""
    wants_cache_events: ClassVar[bool] = False
    """The engine builds ``CacheEventBatch`` es for it (they cost time to build)."""
    wants_index_keys: ClassVar[bool] = False
    """The batches carry index keys (``stored``/``removed``...), not only the raw change list."""
    wants_responses: ClassVar[bool] = False
    """``on_response`` is called (with the piggybacked vector)."""
    wants_served: ClassVar[bool] = False
    """``on_served`` is called (the first token at the serving region's edge)."""

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

    def on_served(self, resp: Response) -> None:
        """The first token of a request this scheme routed reached the edge of the serving
        region (one in-region hop after the prefill ended, before ``on_response`` at the origin;
        the same ``Response``). Called only for schemes with ``wants_served``."""
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
