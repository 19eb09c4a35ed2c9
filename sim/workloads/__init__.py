"""Request workloads for the simulator: synthetic generators, trace readers, and their registry.

Owns the names the simulator and CLI use to pick a workload: ``WORKLOADS`` maps a name to a
generator ``make_<name>(n_requests, rate_per_s, n_regions, region_weights, rng) -> Workload``
(Poisson arrivals at ``rate_per_s``), and ``load_trace`` reads a trace file by format name. Must
not hold random state: every generator takes its ``numpy.random.Generator``.
See ``sim/workloads/README.md`` for every number and assumption.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from sim.workloads.burst import BurstParams, make_burst
from sim.workloads.chat import LMSYS, WILDCHAT, ChatParams, make_chat, make_lmsys, make_wildchat
from sim.workloads.mixed import MixedParams, make_mixed
from sim.workloads.mooncake import TraceFormatError, read_mooncake
from sim.workloads.regions import INTERNET_USERS_M, assign_regions, population_weights
from sim.workloads.stats import SharingStats, sharing_stats
from sim.workloads.workload import Kind, Workload

Generator = Callable[[int, float, int, NDArray[np.float64] | None, np.random.Generator], Workload]
"""Signature every registered generator accepts (keyword extras are generator-specific)."""

WORKLOADS: MappingProxyType[str, Generator] = MappingProxyType(
    {"mixed": make_mixed, "wildchat": make_wildchat, "lmsys": make_lmsys, "burst": make_burst}
)
"""Synthetic workloads by name."""

TRACE_FORMATS: MappingProxyType[str, Callable[..., Workload]] = MappingProxyType(
    {"mooncake": read_mooncake}
)
"""Trace readers by format name; each takes ``(path, **keyword options)``."""


def load_trace(path: str | Path, fmt: str = "mooncake", **kw: Any) -> Workload:
    """Read a trace file with the reader registered for ``fmt`` (keyword options passed on)."""
    reader = TRACE_FORMATS.get(fmt)
    if reader is None:
        raise InvalidInputError(f"fmt: expected one of {sorted(TRACE_FORMATS)}, got {fmt!r}")
    return reader(path, **kw)


__all__ = [
    "INTERNET_USERS_M",
    "LMSYS",
    "TRACE_FORMATS",
    "WILDCHAT",
    "WORKLOADS",
    "BurstParams",
    "ChatParams",
    "Kind",
    "MixedParams",
    "SharingStats",
    "TraceFormatError",
    "Workload",
    "assign_regions",
    "load_trace",
    "make_burst",
    "make_chat",
    "make_lmsys",
    "make_mixed",
    "make_wildchat",
    "population_weights",
    "read_mooncake",
    "sharing_stats",
]
