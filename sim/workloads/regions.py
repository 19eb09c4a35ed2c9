"""Where users are: population weights per region code and the assignment of users to regions.

Owns the table of approximate internet-user populations used to spread users (sessions,
conversations, trace roots) over a deployment's regions "in proportion to population" (paper
Appendix D), and ``assign_regions``. Must not know about workers or latencies.

Source of the numbers: internet users in millions, rounded, as published in DataReportal
"Digital 2024" country reports (which compile ITU, GSMA Intelligence and national regulators;
China's figure is CNNIC's Dec 2023 report). They are approximate by nature (+-5%) and are used
only as relative weights. Continental codes (``EU``, ``ASIA``, ``NA``) are ITU-2023-style
aggregates (EU-27; Asia without the Middle East; US + Canada + Mexico).

A region code names the country whose users the region serves. Deployment region names such as
``us-east-1`` are reduced to their country part (text before the first ``-`` or ``_``); several
regions of one country split that country's population equally (assumed: the trace carries no
finer location). ``GB`` is accepted for ``UK``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from types import MappingProxyType

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError

INTERNET_USERS_M: MappingProxyType[str, float] = MappingProxyType(
    {
        "US": 331.0,
        "CN": 1092.0,
        "IN": 751.0,
        "BR": 187.0,
        "ID": 185.0,
        "RU": 130.0,
        "MX": 107.0,
        "JP": 104.0,
        "DE": 78.0,
        "UK": 66.0,
        "FR": 60.0,
        "IT": 51.0,
        "KR": 50.0,
        "ES": 45.0,
        "ZA": 45.0,
        "CA": 39.0,
        "AU": 25.0,
        "TW": 21.0,
        "NL": 17.0,
        "SE": 10.0,
        "AE": 9.4,
        "CH": 8.7,
        "IL": 8.5,
        "HK": 7.0,
        "SG": 5.8,
        "IE": 5.0,
        "BH": 1.5,
        "EU": 410.0,
        "ASIA": 2800.0,
        "NA": 477.0,
    }
)
"""Approximate internet users (millions) per region code; see the module docstring for sources."""

_ALIASES = MappingProxyType({"GB": "UK", "EUROPE": "EU", "APAC": "ASIA"})


def country_of(code: str) -> str:
    """Normalise a region code or deployment region name to a key of ``INTERNET_USERS_M``."""
    if not isinstance(code, str) or not code.strip():
        raise InvalidInputError(f"region code: expected a non-empty string, got {code!r}")
    c = code.strip().upper()
    if c not in INTERNET_USERS_M and c not in _ALIASES:
        c = c.replace("_", "-").split("-", 1)[0]
    c = _ALIASES.get(c, c)
    if c not in INTERNET_USERS_M:
        raise InvalidInputError(
            f"region code: expected one of {sorted(INTERNET_USERS_M)} (optionally with a "
            f"'-suffix'), got {code!r}"
        )
    return c


def population_weights(codes: Sequence[str]) -> NDArray[np.float64]:
    """Normalised weights of the given regions, proportional to the users each one serves.

    Regions that reduce to the same country split its users equally.
    """
    if len(codes) == 0:
        raise InvalidInputError("codes: expected at least one region code, got none")
    countries = [country_of(c) for c in codes]
    per_country = Counter(countries)
    w = np.array([INTERNET_USERS_M[c] / per_country[c] for c in countries], dtype=np.float64)
    return np.asarray(w / w.sum(), dtype=np.float64)


def assign_regions(
    n: int, weights: NDArray[np.float64], rng: np.random.Generator
) -> NDArray[np.int64]:
    """Draw ``n`` region indices independently with probabilities proportional to ``weights``."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise InvalidInputError(
            f"weights: expected a non-empty 1-D array of finite non-negative weights with a "
            f"positive sum, got {w!r:.120}"
        )
    if not isinstance(n, int | np.integer) or n < 0:
        raise InvalidInputError(f"n: expected an int >= 0, got {n!r}")
    cdf = np.cumsum(w / w.sum())
    idx = np.searchsorted(cdf, rng.random(int(n)) * cdf[-1], side="right")
    return np.asarray(np.minimum(idx, w.size - 1), dtype=np.int64)
