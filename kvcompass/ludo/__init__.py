"""Ludo discovery-index structures: keyed maintenance table, keyless view, whole-image patches.

Public API: ``PatchKind``, ``LudoParams``, ``PatchBatch``, ``LudoTable``, ``ViewArrays``,
``LudoView``. Kernels for other njit code (e.g. multi-view lookups) live in
``kvcompass.ludo.kernels`` (``lookup_key``). This package must not do I/O.
"""

from __future__ import annotations

from kvcompass.ludo.params import LudoParams, PatchKind
from kvcompass.ludo.patches import PatchBatch
from kvcompass.ludo.table import LudoTable
from kvcompass.ludo.view import LudoView, ViewArrays

__all__ = ["LudoParams", "LudoTable", "LudoView", "PatchBatch", "PatchKind", "ViewArrays"]
