"""Deployment descriptions as data: regions, their workers and prefill rates, the WAN matrix.

Owns the ``Deployment`` value object, its validation, its dict/TOML form and the built-in
deployments shipped as package data (``kvcompass/data/deployments/*.toml``, read with
``importlib.resources`` as read-only resources). Must not open arbitrary files, read the
environment or measure anything: reading a user's file is the shells' job
(``wire.deployments.load_deployment``), which then calls ``Deployment.from_toml_text``.

TOML form (every key but ``name``, ``regions`` and ``wan_one_way_ms`` optional)::

    name = "paper-testbed-14x3"
    block_size_tokens = 16          # B: indexed lengths are multiples of it
    n_levels = 6                    # L: levels per (edge region, holder region) pair
    same_region_min_tokens = 128    # first in-region level
    in_region_one_way_ms = 0.5      # edge -> worker inside a region (not a WAN hop)
    source = "where every number comes from"
    wan_one_way_ms = [[0, 160, 126], [160, 0, 149], [126, 149, 0]]   # region order below
    [[regions]]
    name = "us"
    n_workers = 8
    prefill_ms_per_token = 0.085    # beta_r
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import ConfigError


def _positive_int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what}: expected an integer >= 1, got {value!r}")
    return value


def _finite(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{what}: expected a finite number, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class Region:
    """One region: ``n_workers`` GPU workers, each prefilling at ``prefill_ms_per_token`` (β)."""

    name: str
    n_workers: int
    prefill_ms_per_token: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"region name: expected a non-empty str, got {self.name!r}")
        _positive_int(self.n_workers, f"region {self.name!r} n_workers")
        beta = _finite(self.prefill_ms_per_token, f"region {self.name!r} prefill_ms_per_token")
        if beta <= 0:
            raise ConfigError(
                f"region {self.name!r} prefill_ms_per_token: expected > 0, got {beta}"
            )
        object.__setattr__(self, "prefill_ms_per_token", beta)


@dataclass(frozen=True, slots=True)
class Deployment:
    """Regions in a fixed order, the symmetric one-way WAN matrix between them, index shape.

    Workers are numbered region by region in this order (``WorkerId`` 0..W-1). Lists given for
    ``regions``/``wan_one_way_ms`` are normalised to tuples. Raises ``ConfigError``.
    """

    name: str
    regions: tuple[Region, ...]
    wan_one_way_ms: tuple[tuple[float, ...], ...]
    block_size_tokens: int = 16
    n_levels: int = 6
    same_region_min_tokens: int = 128
    source: str = ""
    in_region_one_way_ms: float = 0.0
    _worker_start: tuple[int, ...] = field(init=False, repr=False, compare=False, default=())

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"deployment name: expected a non-empty str, got {self.name!r}")
        if not isinstance(self.source, str):
            raise ConfigError(f"source: expected str, got {type(self.source).__name__}")
        regions = tuple(self.regions)
        if not regions or not all(isinstance(r, Region) for r in regions):
            raise ConfigError(f"regions: expected a non-empty sequence of Region, got {regions!r}")
        names = [r.name for r in regions]
        if len(set(names)) != len(names):
            raise ConfigError(f"regions: expected unique names, got {names}")
        n = len(regions)
        try:
            rows = tuple(
                tuple(_finite(v, "wan_one_way_ms entry") for v in row)
                for row in self.wan_one_way_ms
            )
        except TypeError as exc:
            raise ConfigError(
                f"wan_one_way_ms: expected a list of lists of numbers: {exc}"
            ) from exc
        if len(rows) != n or any(len(row) != n for row in rows):
            raise ConfigError(
                f"wan_one_way_ms: expected a {n}x{n} matrix (one row per region), "
                f"got row lengths {[len(row) for row in rows]}"
            )
        for i in range(n):
            if rows[i][i] != 0.0:
                raise ConfigError(
                    f"wan_one_way_ms[{i}][{i}]: expected 0 (in-region latency goes in "
                    f"in_region_one_way_ms), got {rows[i][i]}"
                )
            for j in range(n):
                if rows[i][j] < 0 or rows[i][j] != rows[j][i]:
                    raise ConfigError(
                        f"wan_one_way_ms[{i}][{j}]: expected a non-negative symmetric entry, "
                        f"got {rows[i][j]} vs [{j}][{i}] = {rows[j][i]}"
                    )
        _positive_int(self.block_size_tokens, "block_size_tokens")
        _positive_int(self.n_levels, "n_levels")
        _positive_int(self.same_region_min_tokens, "same_region_min_tokens")
        in_region = _finite(self.in_region_one_way_ms, "in_region_one_way_ms")
        if in_region < 0:
            raise ConfigError(f"in_region_one_way_ms: expected >= 0, got {in_region}")
        starts = [0]
        for r in regions:
            starts.append(starts[-1] + r.n_workers)
        object.__setattr__(self, "regions", regions)
        object.__setattr__(self, "wan_one_way_ms", rows)
        object.__setattr__(self, "in_region_one_way_ms", in_region)
        object.__setattr__(self, "_worker_start", tuple(starts))

    # -- shape ------------------------------------------------------------------------------

    @property
    def n_regions(self) -> int:
        return len(self.regions)

    @property
    def n_workers(self) -> int:
        return self._worker_start[-1]

    @property
    def worker_offsets(self) -> NDArray[np.int64]:
        """CSR bounds: region r owns workers ``worker_offsets[r]:worker_offsets[r+1]``."""
        return np.array(self._worker_start, dtype=np.int64)

    @property
    def worker_region(self) -> NDArray[np.int64]:
        """Region index of every worker, shape (W,)."""
        counts = [r.n_workers for r in self.regions]
        return np.repeat(np.arange(self.n_regions, dtype=np.int64), counts)

    @property
    def prefill_ms_per_token(self) -> NDArray[np.float64]:
        """β of every region, shape (R,)."""
        return np.array([r.prefill_ms_per_token for r in self.regions], dtype=np.float64)

    @property
    def wan_matrix_ms(self) -> NDArray[np.float64]:
        """One-way WAN latency between regions, shape (R, R), zero diagonal."""
        return np.array(self.wan_one_way_ms, dtype=np.float64)

    def region_index(self, name: str) -> int:
        """Index of the region called ``name``; ``ConfigError`` listing the names otherwise."""
        for i, r in enumerate(self.regions):
            if r.name == name:
                return i
        raise ConfigError(f"region: expected one of {[r.name for r in self.regions]}, got {name!r}")

    def _region(self, region: int | str) -> int:
        if isinstance(region, str):
            return self.region_index(region)
        if isinstance(region, bool) or not 0 <= int(region) < self.n_regions:
            raise ConfigError(f"region: expected an index in [0, {self.n_regions}), got {region!r}")
        return int(region)

    def workers_of(self, region: int | str) -> NDArray[np.int64]:
        """Worker ids of one region (by index or name), ascending."""
        r = self._region(region)
        return np.arange(self._worker_start[r], self._worker_start[r + 1], dtype=np.int64)

    def rtt_ms(self, o: int | str, r: int | str) -> float:
        """WAN round trip between two regions: 2 × one-way (0 within a region)."""
        return 2.0 * self.wan_one_way_ms[self._region(o)][self._region(r)]

    # -- dict / TOML ------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Plain dict in the TOML layout (``from_dict(to_dict())`` round-trips)."""
        return {
            "name": self.name,
            "block_size_tokens": self.block_size_tokens,
            "n_levels": self.n_levels,
            "same_region_min_tokens": self.same_region_min_tokens,
            "in_region_one_way_ms": self.in_region_one_way_ms,
            "source": self.source,
            "wan_one_way_ms": [list(row) for row in self.wan_one_way_ms],
            "regions": [
                {
                    "name": r.name,
                    "n_workers": r.n_workers,
                    "prefill_ms_per_token": r.prefill_ms_per_token,
                }
                for r in self.regions
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Deployment:
        """Build from the TOML layout; unknown keys are rejected (typos must not pass silently)."""
        if not isinstance(data, Mapping):
            raise ConfigError(f"deployment: expected a table, got {type(data).__name__}")
        allowed = {
            "name",
            "regions",
            "wan_one_way_ms",
            "block_size_tokens",
            "n_levels",
            "same_region_min_tokens",
            "in_region_one_way_ms",
            "source",
        }
        unknown = sorted(set(data) - allowed)
        missing = sorted({"name", "regions", "wan_one_way_ms"} - set(data))
        if unknown or missing:
            raise ConfigError(
                f"deployment keys: expected {sorted(allowed)} (name, regions, wan_one_way_ms "
                f"required), got unknown {unknown}, missing {missing}"
            )
        raw_regions = data["regions"]
        if not isinstance(raw_regions, list | tuple):
            raise ConfigError(f"regions: expected an array of tables, got {raw_regions!r}")
        regions = []
        for i, item in enumerate(raw_regions):
            keys = {"name", "n_workers", "prefill_ms_per_token"}
            if not isinstance(item, Mapping) or set(item) != keys:
                got = sorted(item) if isinstance(item, Mapping) else item
                raise ConfigError(f"regions[{i}]: expected exactly keys {sorted(keys)}, got {got}")
            regions.append(Region(item["name"], item["n_workers"], item["prefill_ms_per_token"]))
        kwargs = {k: data[k] for k in allowed - {"regions", "wan_one_way_ms"} if k in data}
        return cls(regions=tuple(regions), wan_one_way_ms=data["wan_one_way_ms"], **kwargs)

    @classmethod
    def from_toml_text(cls, text: str) -> Deployment:
        """Parse TOML text (pure; reading the file is the caller's job)."""
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"deployment TOML: expected valid TOML, got error: {exc}") from exc
        return cls.from_dict(data)


def _data_dir() -> resources.abc.Traversable:
    return resources.files("kvcompass").joinpath("data", "deployments")


def builtin_deployment_names() -> list[str]:
    """Names of the deployments shipped with the package, sorted."""
    root = _data_dir()
    return sorted(p.name[: -len(".toml")] for p in root.iterdir() if p.name.endswith(".toml"))


def builtin_deployment(name: str) -> Deployment:
    """A shipped deployment by name, e.g. ``"paper-testbed-14x3"`` (read-only package data)."""
    names = builtin_deployment_names()
    if name not in names:
        raise ConfigError(f"built-in deployment: expected one of {names}, got {name!r}")
    text = _data_dir().joinpath(f"{name}.toml").read_text(encoding="utf-8")
    return Deployment.from_toml_text(text)
