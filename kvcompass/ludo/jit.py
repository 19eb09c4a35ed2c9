"""The numba compile options of the maintenance-side kernels (``cuckoo``, ``othello``, ``ops``).

Owns: ``kernel``, the decorator those modules use instead of a bare ``@njit``. Must not: be used
for code that allocates arrays (it compiles without numba's reference-counting runtime).

``kernel`` = ``njit(cache=True, _nrt=False)``. ``_nrt`` is numba's private switch for the
reference-counting runtime; these kernels only index preallocated arrays, and without it every
non-inlined call increfs and decrefs each array argument (~60 atomic calls per ``apply_ops``
entry, which also serialise the cache misses this code is bound by). Measured: inserts 25-40%
faster. If a numba release drops the switch, replace the body by ``njit(cache=True)(fn)``; only
speed is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import njit

F = TypeVar("F", bound=Callable[..., Any])
_njit: Any = njit


def kernel(fn: F) -> F:
    """Compile ``fn`` as a cached, runtime-free numba kernel (see module docstring)."""
    return cast(F, _njit(cache=True, _nrt=False)(fn))
