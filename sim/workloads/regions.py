"""Where users are: population weights per region code and the assignment of users to regions.

Owns the table of approximate internet-user populations used to spread users (sessions,
conversations, trace roots) over a deployment's regions "in proportion to population" (paper
Appendix D), and ``assign_regions``. Must not know about workers or latencies.

Source of the numbers: internet users in millions, rounded, as published in DataReportal
"Digital 2024" country reports (which compile ITU, GSMA Intelligence and national regulators;
China's figure is CNNIC's Dec 2023 report). They are approximate by nature (+-5%) and are used
only as relative weights. Continental codes (``EU``, ``ASIA``, ``NA``) are ITU-2023-style
aggregates (EU-27; Asia without the Middle East; US + Canada + Mexico).

North-American deployments name regions after states, provinces or metro areas (paper App. D:
"16 North-American regions"); ``SUBNATIONAL_POPULATION_M`` gives their resident population
(US Census Bureau 2023 state estimates; Statistics Canada 2023 province / census-metropolitan-area
estimates; millions, rounded) times an assumed internet penetration of 0.93 (US and Canada are
both about 92-95% online), so they mix with the country table.

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

SUBNATIONAL_POPULATION_M: MappingProxyType[str, float] = MappingProxyType(
    {
        "california": 39.0,
        "texas": 30.5,
        "florida": 22.6,
        "new-york": 19.6,
        "pennsylvania": 13.0,
        "illinois": 12.5,
        "ohio": 11.8,
        "georgia": 11.0,
        "north-carolina": 10.8,
        "michigan": 10.0,
        "new-jersey": 9.3,
        "virginia": 8.7,
        "washington": 7.8,
        "arizona": 7.4,
        "massachusetts": 7.0,
        "colorado": 5.9,
        "minnesota": 5.7,
        "oregon": 4.2,
        "utah": 3.4,
        "iowa": 3.2,
        "nevada": 3.2,
        "ontario": 15.6,
        "quebec": 8.9,
        "british-columbia": 5.6,
        "alberta": 4.7,
        "toronto": 6.4,
        "montreal": 4.3,
        "vancouver": 2.7,
        "calgary": 1.6,
    }
)
"""Resident population (millions) of North-American sub-national region names (lower case)."""
INTERNET_PENETRATION_NA = 0.93
"""Assumed share of US / Canadian residents online, to turn populations into internet users."""

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
            f"'-suffix') or a name in SUBNATIONAL_POPULATION_M, got {code!r}"
        )
    return c


def _subnational(code: str) -> str | None:
    key = code.strip().lower().replace("_", "-").replace(" ", "-")
    return key if key in SUBNATIONAL_POPULATION_M else None


def internet_users_m(code: str) -> float:
    """Internet users (millions) a region code stands for, before splitting shared countries."""
    sub = _subnational(code) if isinstance(code, str) else None
    if sub is not None:
        return SUBNATIONAL_POPULATION_M[sub] * INTERNET_PENETRATION_NA
    return INTERNET_USERS_M[country_of(code)]


def population_weights(codes: Sequence[str]) -> NDArray[np.float64]:
    """Normalised weights of the given regions, proportional to the users each one serves.

    A sub-national name (``"ohio"``) uses its own population; other regions that reduce to the
    same country split its users equally.
    """
    if len(codes) == 0:
        raise InvalidInputError("codes: expected at least one region code, got none")
    keys = [_subnational(c) or country_of(c) for c in codes]
    per_key = Counter(keys)
    w = np.array(
        [internet_users_m(c) / per_key[k] for c, k in zip(codes, keys, strict=True)],
        dtype=np.float64,
    )
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
