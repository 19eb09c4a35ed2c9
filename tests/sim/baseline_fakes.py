"""A scheme context for the baseline tests (not a test module).

``FakeContext`` implements ``sim.schemes.base.SchemeContext`` with the simulator's real event
loop, WAN model and load poll; only the request table (hand-built prompts) and the workers'
cache and queue state (set by each test) are fakes, so each test drives a scheme's channels
explicitly and in the engine's own event order.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from kvcompass.deployment import Deployment, Region
from kvcompass.levels import Levels
from kvcompass.mix import splitmix64
from kvcompass.router import RouterConfig
from sim.config import SimConfig
from sim.cost import CostModel
from sim.engine.loads import RegionLoadPoll
from sim.engine.loop import EventLoop
from sim.network import WanNetwork
from sim.schemes.base import CacheEventBatch, ExactCache, ExactQueues, Response, Route, Scheme

CHUNK = 64
_NO = np.zeros(0, dtype=np.uint64)
_NO_NODES = np.zeros(0, dtype=np.int64)


# -- fakes ------------------------------------------------------------------------------------


class FakeRequests:
    """Prompts given as chunk labels; chunk ids are prefix-unique (a chain of splitmix64)."""

    def __init__(self, levels: Levels) -> None:
        self.lengths = np.unique(levels.matrix).astype(np.int64)
        self._nodes: list[NDArray[np.int64]] = []
        self._origin: list[int] = []
        self._arrival: list[float] = []
        self._output: list[int] = []

    def add(self, labels: list[int], origin: int, arrival_ms: float = 0.0, output: int = 1) -> int:
        ids, h = [], 17
        for lab in labels:
            h = splitmix64(h, lab + 1) >> 1
            ids.append(h)
        self._nodes.append(np.array(ids, dtype=np.int64))
        self._origin.append(origin)
        self._arrival.append(arrival_ms)
        self._output.append(output)
        return len(self._nodes) - 1

    @property
    def n(self) -> int:
        return len(self._nodes)

    @property
    def origin(self) -> NDArray[np.int64]:
        return np.array(self._origin, dtype=np.int64)

    @property
    def arrival_ms(self) -> NDArray[np.float64]:
        return np.array(self._arrival, dtype=np.float64)

    @property
    def output_len(self) -> NDArray[np.int64]:
        return np.array(self._output, dtype=np.int64)

    @property
    def prompt_len(self) -> NDArray[np.int64]:
        return np.array([len(x) * CHUNK for x in self._nodes], dtype=np.int64)

    def nodes_of(self, i: int) -> NDArray[np.int64]:
        return self._nodes[i]

    def keys_of(self, i: int) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        nodes = self._nodes[i]
        lens = self.lengths[self.lengths <= len(nodes) * CHUNK]
        keys = [splitmix64(int(nodes[-(-int(n) // CHUNK) - 1]), int(n)) >> 1 for n in lens]
        return lens, np.array(keys, dtype=np.uint64)

    def query_of(self, i: int, origin: int) -> tuple[NDArray[np.int64], NDArray[np.uint64]]:
        return self.keys_of(i)  # every region queries every indexed length here

    @property
    def key_offsets(self) -> NDArray[np.int64]:
        counts = [self.keys_of(i)[0].size for i in range(self.n)]
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    @property
    def keys(self) -> NDArray[np.uint64]:
        parts = [self.keys_of(i)[1] for i in range(self.n)]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)

    def keys_for_changes(
        self, owners: NDArray[np.int64], depths: NDArray[np.int64], regions: NDArray[np.int64]
    ) -> tuple[NDArray[np.uint64], NDArray[np.int64]]:
        """Keys at every indexed length inside each changed chunk (no per-region lengths here)."""
        keys: list[int] = []
        item: list[int] = []
        for j, (owner, depth) in enumerate(zip(owners.tolist(), depths.tolist(), strict=True)):
            lens, ks = self.keys_of(owner)
            inside = (lens > depth * CHUNK) & (lens <= (depth + 1) * CHUNK)
            keys += ks[inside].tolist()
            item += [j] * int(inside.sum())
        return np.array(keys, dtype=np.uint64), np.array(item, dtype=np.int64)


class FakeCluster:
    """Holdings and backlogs set by the test (what a strong directory would read)."""

    def __init__(self, dep: Deployment, requests: FakeRequests, beta: NDArray[np.float64]) -> None:
        self.n_workers = dep.n_workers
        self.beta = beta
        self.worker_region = dep.worker_region
        self.chunk_tokens = CHUNK
        self.backlog = np.zeros(dep.n_workers)
        self.held: list[set[int]] = [set() for _ in range(dep.n_workers)]
        self.requests = requests

    def backlog_ms(self, now_ms: float) -> NDArray[np.float64]:
        return self.backlog.copy()

    def report(self, worker: int, t: float) -> dict[str, float]:
        """A ``/v1/loads`` entry whose estimate (at the region's β) is ``backlog[worker]``."""
        beta = float(self.beta[worker])
        return {"num_waiting_uncached_tokens": float(self.backlog[worker]) / beta}

    def match_all(self, req: int) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        nodes = self.requests.nodes_of(req).tolist()
        out = np.zeros(self.n_workers, dtype=np.int64)
        for w, held in enumerate(self.held):
            k = 0
            while k < len(nodes) and nodes[k] in held:
                k += 1
            out[w] = k * CHUNK
        return out, (out > 0).astype(np.uint8)


class FakeContext:
    """A ``SchemeContext`` over hand-built prompts, on the real event loop, WAN and load poll.

    Only the request table and the cache/queue state are hand-set (``FakeCluster``); exact state
    is handed to the scheme only when the test says so (``exact=True``: the ``*_ideal`` rows).
    """

    def __init__(self, dep: Deployment, *, exact: bool = False) -> None:
        self.deployment = dep
        self.levels = Levels.from_deployment(dep)
        self.config = SimConfig()
        self.router_config: RouterConfig | None = None
        self.cost = CostModel.build(dep, self.config)
        self.requests = FakeRequests(self.levels)
        self.cluster = FakeCluster(dep, self.requests, self.cost.prefill_ms_per_token)
        self.loop = EventLoop()
        self.network = WanNetwork(
            self.cost.wan_one_way_ms, self.config, self.loop, np.random.default_rng(3)
        )
        workers_of = [dep.workers_of(r) for r in range(dep.n_regions)]
        self.loads = RegionLoadPoll(
            self.cluster,
            self.cost.prefill_ms_per_token,
            workers_of,
            float(dep.in_region_one_way_ms),
            self.config.loads_poll_period_ms,
            self.loop,
            float("inf"),
        )
        self.exact_queues: ExactQueues | None = self.cluster if exact else None
        self.exact_cache: ExactCache | None = self.cluster if exact else None
        self.rng = np.random.default_rng(7)
        self.dispatched: list[tuple[int, Route, float, int]] = []

    def schedule(self, at_ms: float, fn: Callable[[float], None], priority: int = 5) -> None:
        self.loop.schedule(at_ms, _call, fn, priority)

    def dispatch(self, req: int, route: Route, at_ms: float, from_region: int) -> None:
        """Record what a scheme sent on (the tests read ``dispatched``)."""
        self.dispatched.append((req, route, at_ms, from_region))


def _call(at_ms: float, fn: Callable[[float], None]) -> None:
    fn(at_ms)


def three_regions(wan: float = 100.0, workers: tuple[int, int, int] = (4, 2, 2)) -> Deployment:
    """Regions a, b, c; a-b and a-c are ``wan`` ms one-way, b-c twice that."""
    return Deployment(
        name="test-3",
        regions=tuple(Region(n, k, 0.1) for n, k in zip("abc", workers, strict=True)),
        wan_one_way_ms=((0.0, wan, wan), (wan, 0.0, 2 * wan), (wan, 2 * wan, 0.0)),
        in_region_one_way_ms=0.5,
    )


def store(scheme: Scheme, ctx: FakeContext, worker: int, req: int, at_ms: float) -> None:
    """Worker ``worker`` caches request ``req``'s whole prompt and publishes it."""
    nodes = ctx.requests.nodes_of(req)
    ctx.cluster.held[worker].update(nodes.tolist())
    batch = CacheEventBatch(worker, at_ms, _NO, 1, _NO, _NO, _NO, nodes, _NO_NODES)
    scheme.on_cache_events(batch)


def respond(scheme: Scheme, ctx: FakeContext, req: int, worker: int, at_ms: float) -> None:
    region = int(ctx.cluster.worker_region[worker])
    scheme.on_response(
        Response(
            req,
            int(ctx.requests.origin[req]),
            worker,
            0,
            0,
            at_ms,
            at_ms,
            region,
            np.zeros(0, dtype=np.int64),
            np.zeros(0),
        )
    )
