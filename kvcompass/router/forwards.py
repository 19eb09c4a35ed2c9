"""Work in flight until it lands: the one ledger of every component that books work.

Owns, for one decider (an edge, a directory, a reference baseline), every forward it knows is
on its way to each worker — its own, and those other edges reported — with the time it reaches
the worker and its predicted prefill work. A queue reading of worker w taken at T includes
exactly the forwards that reached w by T, so the work to add to that reading is the sum over
known forwards that reach w after T (``pending_after``). That is the herding guard made exact
in time: a remote vector taken before this edge's last forwards landed no longer erases them,
and other edges' forwards, which no reading can show until they land and the next vector
crosses the WAN, are counted from their own edge's report (paper §3.4's vectors extended to
carry in-flight work; an edge learns another's forwards one broadcast + one WAN late). A
scheme that reads exact live backlogs asks for the work landing after ``now``.

Used by the edge's queue view (``router.queue_view``), the central directory and the exact-state
references (``sim/schemes/``): one implementation, so "in flight" means one thing everywhere.

Entries are parallel arrays (worker, arrive_ms, work_ms, source), in the order they were added;
source -1 (``OWN``) is the ledger owner's, r >= 0 the edge of region r. Removal marks an entry
dead; dead entries are compacted away when they are half the store. Must not know the score or
talk to anything.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError

OWN = -1
"""Source tag of the ledger owner's own forwards."""

_DEAD = -1
_ONE_TIME = np.zeros(1, dtype=np.float64)


@njit(cache=True)
def _pending_kernel(w, arrive, work, n, t0, taken, scalar, out):  # type: ignore[no-untyped-def]
    """``pending_after`` in one pass, entries in order (the sums of ``np.bincount``, bit for
    bit). False, with ``out`` partly written, if a live entry's worker is outside ``out``."""
    size = out.shape[0]
    for i in range(n):
        wi = w[i]
        if wi == _DEAD:
            continue
        if wi < 0 or wi >= size:
            return False
        t = t0 if scalar else taken[wi]
        if arrive[i] > t:
            out[wi] += work[i]
    return True


@njit(cache=True)
def _forget_kernel(w, arrive, n, t0, taken, scalar, size):  # type: ignore[no-untyped-def]
    """``forget_landed``'s marking in one pass: how many were marked dead, or -1 (nothing
    changed) if a live entry's worker is outside 0..size-1."""
    for i in range(n):
        wi = w[i]
        if wi != _DEAD and (wi < 0 or wi >= size):
            return -1
    k = 0
    for i in range(n):
        wi = w[i]
        if wi == _DEAD:
            continue
        t = t0 if scalar else taken[wi]
        if arrive[i] <= t:
            w[i] = _DEAD
            k += 1
    return k


class ForwardLedger:
    """Known forwards; ``pending_after(t)`` is, per worker, the work landing after ``t``."""

    __slots__ = ("_arrive", "_dead", "_n", "_src", "_w", "_work", "n_workers")

    def __init__(self, n_workers: int) -> None:
        if n_workers < 1:
            raise InvalidInputError(f"expected n_workers >= 1, got {n_workers}")
        self.n_workers = n_workers
        self._n = 0
        self._dead = 0
        self._w = np.empty(64, np.int64)
        self._arrive = np.empty(64, np.float64)
        self._work = np.empty(64, np.float64)
        self._src = np.empty(64, np.int64)

    def __len__(self) -> int:
        return self._n - self._dead

    def add(self, worker: int, arrive_ms: float, work_ms: float, source: int = OWN) -> None:
        """``work_ms`` of prefill reaches ``worker`` at ``arrive_ms`` (sent by ``source``)."""
        n = self._n
        if n == self._w.shape[0]:
            self._compact()
            n = self._n
            if n >= self._w.shape[0] // 2:
                for name in ("_w", "_arrive", "_work", "_src"):
                    old = getattr(self, name)
                    new = np.empty(2 * old.shape[0], old.dtype)
                    new[:n] = old[:n]
                    setattr(self, name, new)
        self._w[n] = worker
        self._arrive[n] = arrive_ms
        self._work[n] = work_ms
        self._src[n] = source
        self._n = n + 1

    def pending_after(self, taken_ms: float | NDArray[np.float64]) -> NDArray[np.float64]:
        """(W,) work of the live forwards reaching each worker after ``taken_ms`` (one time for
        every worker, or one per worker). Does not change the ledger."""
        n = self._n
        scalar = np.ndim(taken_ms) == 0
        taken = _ONE_TIME if scalar else np.asarray(taken_ms, dtype=np.float64)
        t0 = float(np.asarray(taken_ms)) if scalar else 0.0
        if scalar or (taken.ndim == 1 and taken.shape[0] >= self.n_workers):
            out = np.zeros(self.n_workers, dtype=np.float64)
            if _pending_kernel(self._w, self._arrive, self._work, n, t0, taken, scalar, out):
                return out
        # Out-of-range ids or an odd time array: the plain numpy form (its errors, its shape).
        w = self._w[:n]
        mask = self._arrive[:n] > (t0 if scalar else taken[np.maximum(w, 0)])
        if self._dead:
            mask &= w != _DEAD
        res = np.bincount(w[mask], self._work[:n][mask], minlength=self.n_workers)
        return res.astype(np.float64, copy=False)

    def forget_landed(self, taken_ms: float | NDArray[np.float64]) -> None:
        """Drop every forward that reached its worker by ``taken_ms`` (per worker, or one time
        for all): no reading taken since needs it added."""
        n = self._n
        scalar = np.ndim(taken_ms) == 0
        taken = _ONE_TIME if scalar else np.asarray(taken_ms, dtype=np.float64)
        t0 = float(np.asarray(taken_ms)) if scalar else 0.0
        if scalar or (taken.ndim == 1 and taken.shape[0] >= self.n_workers):
            k = _forget_kernel(self._w, self._arrive, n, t0, taken, scalar, self.n_workers)
        else:
            k = -1
        if k < 0:  # out-of-range ids or an odd time array: the plain numpy form
            w = self._w[:n]
            landed = self._arrive[:n] <= (t0 if scalar else taken[np.maximum(w, 0)])
            landed &= w != _DEAD
            k = int(landed.sum())
            if k:
                w[landed] = _DEAD
        if k:
            self._dead += k
            if 2 * self._dead >= self._n:
                self._compact()

    def remove(self, worker: int, arrive_ms: float, work_ms: float, source: int = OWN) -> bool:
        """Forget one forward (its first token came back, or it was never sent); False if it is
        not there (a reading taken after it landed already dropped it)."""
        n = self._n
        hit = np.flatnonzero(
            (self._w[:n] == worker)
            & (self._arrive[:n] == arrive_ms)
            & (self._work[:n] == work_ms)
            & (self._src[:n] == source)
        )
        if hit.size == 0:
            return False
        self._w[hit[0]] = _DEAD
        self._dead += 1
        return True

    def replace_source(self, source: int, entries: list[tuple[int, float, float]]) -> None:
        """Region ``source``'s reported list (worker, arrive_ms, work_ms) replaces its entries."""
        n = self._n
        mine = (self._src[:n] == source) & (self._w[:n] != _DEAD)
        k = int(mine.sum())
        if k:
            self._w[:n][mine] = _DEAD
            self._dead += k
        for w, arrive, work in entries:
            self.add(w, arrive, work, source)

    def in_flight(self, now_ms: float, source: int = OWN) -> list[tuple[int, float, float]]:
        """(worker, arrive_ms, work_ms) of ``source``'s live forwards not landed at ``now_ms``."""
        n = self._n
        sel = np.flatnonzero(
            (self._src[:n] == source) & (self._arrive[:n] > now_ms) & (self._w[:n] != _DEAD)
        )
        return list(
            zip(
                self._w[sel].tolist(),
                self._arrive[sel].tolist(),
                self._work[sel].tolist(),
                strict=True,
            )
        )

    def _compact(self) -> None:
        n = self._n
        keep = np.flatnonzero(self._w[:n] != _DEAD)
        k = keep.shape[0]
        for arr in (self._w, self._arrive, self._work, self._src):
            arr[:k] = arr[keep]
        self._n = k
        self._dead = 0
