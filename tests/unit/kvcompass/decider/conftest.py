"""Small worlds for decider tests: hand-built deployments, an empty index, one decider per edge."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvcompass.decider import Decider, DeciderPaths
from kvcompass.deployment import Deployment, Region
from kvcompass.index import DiscoveryIndex
from kvcompass.index_view import IndexView
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.layout import TableLayout
from kvcompass.levels import Levels
from kvcompass.router import RouterConfig

HASHER = PrefixHasher(KeyNamespace(model_id="decider-test"))
BETA = 0.1
HOP = 0.5
CONFIRM_MS = 80.0


def one_region(workers: int = 2) -> Deployment:
    return Deployment(
        name="one",
        regions=(Region("a", workers, BETA),),
        wan_one_way_ms=((0.0,),),
        in_region_one_way_ms=HOP,
    )


def two_regions(one_way_ms: float = 50.0, workers: tuple[int, int] = (2, 2)) -> Deployment:
    return Deployment(
        name="two",
        regions=(Region("a", workers[0], BETA), Region("b", workers[1], BETA)),
        wan_one_way_ms=((0.0, one_way_ms), (one_way_ms, 0.0)),
        in_region_one_way_ms=HOP,
    )


def deciders(dep: Deployment, **config: Any) -> list[Decider]:
    """One decider per region over one shared (empty) index image."""
    levels = Levels.from_deployment(dep)
    layout = TableLayout.for_regions([r.n_workers for r in dep.regions])
    index = DiscoveryIndex(layout, n_shards=1, initial_capacity=256)
    one_way = np.array(dep.wan_matrix_ms, dtype=np.float64)
    np.fill_diagonal(one_way, HOP)
    out = []
    for o in range(dep.n_regions):
        view = IndexView(layout, levels.matrix, 1)
        view.apply_all(index.full_images())
        paths = DeciderPaths(one_way, np.full(dep.n_regions, CONFIRM_MS))
        rc = RouterConfig(**config)
        out.append(Decider.for_deployment(dep, levels, o, rc, HASHER, view, paths))
    return out


def prompt(n: int, seed: int = 1) -> NDArray[np.int32]:
    return np.random.default_rng(seed).integers(0, 50_000, size=n, dtype=np.int32)
