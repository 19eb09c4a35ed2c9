"""Fakes of the simulator ports for the baseline tests (not a test module).

The fake context implements the ports of ``sim.schemes.base`` (request table, cluster view,
network, timers) over hand-built prompts, so each test drives a scheme's channels explicitly.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvcompass.deployment import Deployment, Region
from kvcompass.levels import Levels
from kvcompass.mix import mix64
from sim.config import SimConfig
from sim.cost import CostModel
from sim.schemes.base import CacheEventBatch, Response, Scheme

CHUNK = 64
_NO = np.zeros(0, dtype=np.uint64)
_NO_NODES = np.zeros(0, dtype=np.int64)


# -- fakes ------------------------------------------------------------------------------------


class FakeRequests:
    """Prompts given as chunk labels; chunk ids are prefix-unique (a chain of mix64)."""

    def __init__(self, levels: Levels) -> None:
        self.lengths = np.unique(levels.matrix).astype(np.int64)
        self._nodes: list[NDArray[np.int64]] = []
        self._origin: list[int] = []
        self._arrival: list[float] = []
        self._output: list[int] = []

    def add(self, labels: list[int], origin: int, arrival_ms: float = 0.0, output: int = 1) -> int:
        ids, h = [], 17
        for lab in labels:
            h = mix64(h, lab + 1) >> 1
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
        keys = [mix64(int(nodes[-(-int(n) // CHUNK) - 1]), int(n)) >> 1 for n in lens]
        return lens, np.array(keys, dtype=np.uint64)


class FakeCluster:
    """Holdings and backlogs set by the test (what a strong directory would read)."""

    def __init__(self, dep: Deployment, requests: FakeRequests) -> None:
        self.n_workers = dep.n_workers
        self.worker_region = dep.worker_region
        self.chunk_tokens = CHUNK
        self.backlog = np.zeros(dep.n_workers)
        self.held: list[set[int]] = [set() for _ in range(dep.n_workers)]
        self.requests = requests

    def backlog_ms(self, now_ms: float) -> NDArray[np.float64]:
        return self.backlog.copy()

    def match_all(self, req: int) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        nodes = self.requests.nodes_of(req).tolist()
        out = np.zeros(self.n_workers, dtype=np.int64)
        for w, held in enumerate(self.held):
            k = 0
            while k < len(nodes) and nodes[k] in held:
                k += 1
            out[w] = k * CHUNK
        return out, (out > 0).astype(np.uint8)


class FakeLoop:
    def __init__(self) -> None:
        self.heap: list[tuple[float, int, Callable[[float], None]]] = []
        self.seq = 0
        self.now = 0.0

    def push(self, at: float, fn: Callable[[float], None]) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (at, self.seq, fn))

    def run_until(self, t: float) -> None:
        while self.heap and self.heap[0][0] <= t:
            at, _, fn = heapq.heappop(self.heap)
            self.now = at
            fn(at)
        self.now = max(self.now, t)


class FakeNetwork:
    """Static latencies (diagonal = in-region hop), no jitter, no loss."""

    def __init__(self, cost: CostModel, loop: FakeLoop) -> None:
        self.m = cost.wan_one_way_ms
        self.loop = loop
        self.sent = 0

    def one_way_ms(self, src_region: int, dst_region: int) -> float:
        return float(self.m[src_region, dst_region])

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
        self.sent += 1
        at = now_ms + self.one_way_ms(src_region, dst_region) + extra_delay_ms
        self.loop.push(at, lambda t: deliver(t, payload))
        return True


class FakeContext:
    def __init__(self, dep: Deployment) -> None:
        self.deployment = dep
        self.levels = Levels.from_deployment(dep)
        self.config = SimConfig()
        self.cost = CostModel.build(dep, self.config)
        self.requests = FakeRequests(self.levels)
        self.cluster = FakeCluster(dep, self.requests)
        self.loop = FakeLoop()
        self.network = FakeNetwork(self.cost, self.loop)
        self.rng = np.random.default_rng(7)

    def schedule(self, at_ms: float, fn: Callable[[float], None], priority: int = 5) -> None:
        self.loop.push(at_ms, fn)


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
