"""The edge's per-worker queue estimates Tq(r) and the broadcast-suppression rule (paper §3.4).

Owns: the estimate of every worker's queueing delay as seen from one edge (origin region o),
when each was last refreshed, since when it has been at zero (for migration targets), and the
herding-guard work this edge forwarded since each refresh. It must not talk to anything: the
shell feeds it readings and asks ``broadcast_targets`` whom to send its own vector to.

Refresh channels
- Local region: read live (``set_local``): the reading replaces the estimate.
- Remote regions: vectors piggybacked on cross-region responses and periodic broadcasts
  (every Δ) are folded in with an EWMA of weight w: ``q ← (1-w)·q + w·sample``. A worker never
  heard from takes its first sample as is; before that its estimate is 0 (optimistic: a new
  region gets tried, and its first response carries a real vector) and its staleness is +inf.

Herding guard (beyond the paper): between refreshes the estimate of r does not see the
requests this edge itself just sent to r, so a burst would pile onto one stale-idle worker.
``on_forward`` adds each forward's predicted prefill time to ``pending_ms[r]``. Without arrival
times (or with ``RouterConfig.forward_ledger`` off) any refresh of r zeroes it, since the fresh
reading includes that work; a remote reading taken before in-flight forwards reached r then
under-counts by up to one RTT of this edge's traffic to r. With arrival times and the ledger
(``kvcompass.router.forwards``), a refresh keeps exactly the forwards landing after the reading
was taken, plus those other edges reported (``on_peer_in_flight``).

The arrays may be views into the Router's packed score state (rows of one matrix), so the
score kernel reads them without copying; this class only ever writes them in place.

Every refresh (``set_local``, ``on_vector``) is one njit pass, ``_refresh_kernel``, that checks
the values (and the ids and their region) and writes all four per-worker arrays: vectors arrive
~600 times per simulated second at 8 regions, and the numpy version cost ~40 µs each. Checks stay
on every call; on a failed check the readable validation below raises the error.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from kvcompass.router.config import RouterConfig
from kvcompass.router.forwards import ForwardLedger

MAX_QUEUE_MS = 86_400_000.0
"""The largest queue estimate a reading or vector may carry: a day. No request waits that long;
a larger value is a broken or hostile reporter, refused like a negative one (issue 26: one record
with an absurd value pinned a worker's estimate at 5e11 ms)."""


def broadcast_targets(
    own_region: int,
    last_piggyback_sent_ms: NDArray[np.float64],
    now_ms: float,
    period_ms: float,
) -> NDArray[np.int64]:
    """Regions that ``own_region``'s periodic broadcast at ``now_ms`` should go to.

    Every region except ``own_region``, minus those that received a piggybacked vector from
    ``own_region`` less than ``period_ms`` ago (``now - last < period``: suppressed; a region
    last reached exactly one period ago, or never (-inf), gets the broadcast).
    """
    if last_piggyback_sent_ms.ndim != 1 or not 0 <= own_region < last_piggyback_sent_ms.shape[0]:
        raise InvalidInputError(
            f"expected own_region in [0, {last_piggyback_sent_ms.shape[0]}) and a 1-d vector, "
            f"got {own_region} and shape {last_piggyback_sent_ms.shape}"
        )
    due = (now_ms - last_piggyback_sent_ms) >= period_ms
    due[own_region] = False
    return np.flatnonzero(due).astype(np.int64)


class BroadcastSchedule:
    """Sender side: remembers when this region last piggybacked its vector to each region."""

    __slots__ = ("last_piggyback_sent_ms", "own_region", "period_ms")

    def __init__(self, own_region: int, n_regions: int, period_ms: float) -> None:
        if not 0 <= own_region < n_regions:
            raise InvalidInputError(f"expected own_region in [0, {n_regions}), got {own_region}")
        self.own_region = own_region
        self.period_ms = period_ms
        self.last_piggyback_sent_ms = np.full(n_regions, -np.inf)

    def note_piggyback(self, dest_region: int, now_ms: float) -> None:
        """A response carrying this region's vector left for ``dest_region`` at ``now_ms``."""
        self.last_piggyback_sent_ms[dest_region] = now_ms

    def targets(self, now_ms: float) -> NDArray[np.int64]:
        """Whom the broadcast due at ``now_ms`` goes to (see ``broadcast_targets``)."""
        return broadcast_targets(
            self.own_region, self.last_piggyback_sent_ms, now_ms, self.period_ms
        )


class QueueView:
    """Per-worker Tq estimates of one edge, with staleness and idleness tracking."""

    __slots__ = (
        "_config",
        "_local_ids",
        "idle_since_ms",
        "ledger",
        "n_regions",
        "origin",
        "pending_ms",
        "queue_ms",
        "refreshed_ms",
        "region_refreshed_ms",
        "taken_ms",
        "worker_region",
    )

    def __init__(
        self,
        worker_region: NDArray[np.int64],
        origin: int,
        n_regions: int,
        config: RouterConfig,
        queue_ms: NDArray[np.float64] | None = None,
        pending_ms: NDArray[np.float64] | None = None,
    ) -> None:
        """``queue_ms``/``pending_ms``: optional (W,) float64 buffers to own (zeroed here)."""
        n = worker_region.shape[0]
        if not 0 <= origin < n_regions:
            raise InvalidInputError(f"expected origin in [0, {n_regions}), got {origin}")
        self.worker_region = worker_region
        self.n_regions = n_regions
        self.origin = origin
        self._config = config
        self._local_ids = np.flatnonzero(worker_region == origin).astype(np.int64)
        self.queue_ms = np.zeros(n) if queue_ms is None else queue_ms
        self.pending_ms = np.zeros(n) if pending_ms is None else pending_ms
        for name, buf in (("queue_ms", self.queue_ms), ("pending_ms", self.pending_ms)):
            if buf.shape != (n,) or buf.dtype != np.float64:
                raise InvalidInputError(f"expected {name} float64 ({n},), got {buf.shape}")
            buf[:] = 0.0
        self.refreshed_ms = np.full(n, -np.inf)
        self.taken_ms = np.full(n, -np.inf)
        """When each worker's last reading was taken (= refreshed, unless the shell said)."""
        self.ledger = ForwardLedger(n) if config.forward_ledger else None
        self.idle_since_ms = np.full(n, np.inf)
        self.region_refreshed_ms = np.full(n_regions, -np.inf)

    @property
    def local_workers(self) -> NDArray[np.int64]:
        """Ids of the workers in the edge's own region, in the order ``set_local`` expects."""
        return self._local_ids

    def set_local(
        self, queue_ms: NDArray[np.float64], now_ms: float, taken_ms: float | None = None
    ) -> None:
        """Live readings for the local workers (in ``local_workers`` order) replace estimates.

        ``taken_ms``: when the readings were produced (default ``now_ms``); with the in-flight
        ledger on, known forwards landing after it stay pending."""
        values = _as_vector(queue_ms, self._local_ids.shape[0], "local queue_ms")
        if self._refresh(self._local_ids, values, now_ms, -1, ewma=False):
            _check_values(values, values.shape[0], "local queue_ms")
        self.region_refreshed_ms[self.origin] = now_ms
        self._after_refresh(self._local_ids, now_ms if taken_ms is None else taken_ms)

    def on_vector(
        self,
        region: int,
        worker_ids: NDArray[np.int64],
        queue_ms: NDArray[np.float64],
        now_ms: float,
        taken_ms: float | None = None,
    ) -> None:
        """Fold in a piggybacked or broadcast vector of ``region`` (EWMA; live if local).

        ``taken_ms``: when the vector's readings were produced (its ``seq``; default ``now_ms``).
        Refused (``InvalidInputError``, nothing written): a reading time more than
        ``RouterConfig.max_clock_ahead_ms`` in this edge's future (no synchronised clock is that
        far ahead: one such vector would otherwise pin the ledger's view of its workers), a value
        above ``MAX_QUEUE_MS``, or a worker of another region (checked by the refresh kernel).
        """
        if not 0 <= region < self.region_refreshed_ms.shape[0]:
            raise InvalidInputError(
                f"expected region in [0, {self.region_refreshed_ms.shape[0]}), got {region}"
            )
        ahead = self._config.max_clock_ahead_ms
        if taken_ms is not None and not taken_ms <= now_ms + ahead:
            raise InvalidInputError(
                f"queue vector of region {region}: taken at {taken_ms} ms, more than {ahead:g} ms "
                f"after this edge's clock ({now_ms} ms)"
            )
        ids = np.asarray(worker_ids, dtype=np.int64)
        what = f"queue vector of region {region}"
        values = _as_vector(queue_ms, ids.shape[0] if ids.ndim == 1 else -1, what)
        if ids.ndim != 1:
            raise InvalidInputError(f"expected worker ids as a 1-d array, got shape {ids.shape}")
        # EWMA for remote regions; a (local) vector of the edge's own region replaces.
        if self._refresh(ids, values, now_ms, region, ewma=region != self.origin):
            self._raise_vector_problem(region, ids, values)
        self.region_refreshed_ms[region] = now_ms
        self._after_refresh(ids, now_ms if taken_ms is None else taken_ms)

    def expire_stale(self, now_ms: float) -> list[int]:
        """Forget every remote region not refreshed for ``RouterConfig.stale_vector_ms``: its
        workers go back to "never heard from" (estimate 0, staleness +inf), so a region whose
        vectors stopped (or whose last vector was wrong) cannot pin its workers' estimates for
        longer than that bound. Returns the regions forgotten."""
        limit = now_ms - self._config.stale_vector_ms
        stale = np.flatnonzero(self.region_refreshed_ms < limit)
        out: list[int] = []
        for r in stale.tolist():
            if r == self.origin or self.region_refreshed_ms[r] == -np.inf:
                continue
            ids = np.flatnonzero(self.worker_region == r)
            self.queue_ms[ids] = 0.0
            self.refreshed_ms[ids] = -np.inf
            self.taken_ms[ids] = -np.inf
            self.region_refreshed_ms[r] = -np.inf
            if self.ledger is not None:
                self.pending_ms[ids] = self.ledger.pending_after(self.taken_ms)[ids]
            out.append(r)
        return out

    def _after_refresh(self, ids: NDArray[np.int64], taken_ms: float) -> None:
        """The refresh zeroed ``pending_ms``; put back what the readings cannot include."""
        self.taken_ms[ids] = taken_ms
        ledger = self.ledger
        if ledger is None or len(ledger) == 0:
            return
        ledger.forget_landed(self.taken_ms)
        self.pending_ms[ids] = ledger.pending_after(self.taken_ms)[ids]

    def on_peer_in_flight(
        self, source_region: int, entries: list[tuple[int, float, float]]
    ) -> None:
        """Region ``source_region``'s edge reported its forwards not yet landed
        (worker, arrive_ms, work_ms); they replace its previous report."""
        ledger = self.ledger
        if ledger is None or source_region == self.origin:
            return
        n = self.worker_region.shape[0]
        for w, _, work in entries:
            if not (0 <= w < n and math.isfinite(work) and work >= 0):
                raise InvalidInputError(
                    f"expected in-flight entries (worker in [0, {n}), work >= 0), got {(w, work)}"
                )
        ledger.replace_source(source_region, entries)
        self.pending_ms[:] = ledger.pending_after(self.taken_ms)

    def on_peer_forward(
        self, source_region: int, worker: int, arrive_ms: float, work_ms: float
    ) -> None:
        """Region ``source_region``'s edge announced one forward as it made it."""
        ledger = self.ledger
        if ledger is None or source_region == self.origin:
            return
        ledger.add(worker, arrive_ms, work_ms, source_region)
        if arrive_ms > self.taken_ms[worker]:
            self.pending_ms[worker] += work_ms

    def retire_own(self, worker: int, arrive_ms: float, work_ms: float) -> None:
        """One of this edge's forwards to ``worker`` is done (its first token is back) or was
        never sent: no reading needs it added any more."""
        ledger = self.ledger
        if ledger is not None and ledger.remove(worker, arrive_ms, work_ms):
            self.pending_ms[worker] = ledger.pending_after(self.taken_ms)[worker]

    def own_in_flight(self, now_ms: float) -> list[tuple[int, float, float]]:
        """This edge's forwards not landed at ``now_ms``, for its region's broadcast."""
        return [] if self.ledger is None else self.ledger.in_flight(now_ms)

    def _raise_vector_problem(
        self, region: int, ids: NDArray[np.int64], values: NDArray[np.float64]
    ) -> None:
        """The readable checks behind a refused vector: raise the first problem found."""
        _check_values(values, ids.shape[0], f"queue vector of region {region}")
        n = self.worker_region.shape[0]
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise InvalidInputError(f"expected worker ids in [0, {n}), got {ids.tolist()}")
        raise InvalidInputError(
            f"expected workers of region {region}, got regions "
            f"{self.worker_region[ids].tolist()} for ids {ids.tolist()}"
        )

    def on_forward(
        self, worker: int, predicted_ms: float, now_ms: float, arrive_ms: float | None = None
    ) -> None:
        """This edge sent ``predicted_ms`` of prefill work to ``worker`` at ``now_ms``; it lands
        at ``arrive_ms`` (the ledger counts it until a reading taken after that; without an
        arrival time it is counted until the worker's next refresh)."""
        if not (math.isfinite(predicted_ms) and predicted_ms >= 0):
            raise InvalidInputError(f"expected predicted_ms finite >= 0, got {predicted_ms}")
        self.pending_ms[worker] += predicted_ms
        self.idle_since_ms[worker] = np.inf
        if self.ledger is not None and arrive_ms is not None:
            self.ledger.add(worker, arrive_ms, predicted_ms)

    def staleness_ms(self, now_ms: float) -> NDArray[np.float64]:
        """(W,) time since each worker's estimate was refreshed; +inf if never."""
        return now_ms - self.refreshed_ms

    def region_staleness_ms(self, now_ms: float) -> NDArray[np.float64]:
        """(R,) time since any vector (live, piggyback or broadcast) of each region arrived."""
        return now_ms - self.region_refreshed_ms

    def persistently_idle(self, now_ms: float) -> NDArray[np.bool_]:
        """(W,) estimate at zero, nothing forwarded since, for at least migration_idle_min_ms."""
        eps = self._config.idle_queue_eps_ms
        at_zero = self.queue_ms + self.pending_ms <= eps
        return at_zero & (self.idle_since_ms <= now_ms - self._config.migration_idle_min_ms)

    def _refresh(
        self,
        ids: NDArray[np.int64],
        values: NDArray[np.float64],
        now_ms: float,
        region: int,
        *,
        ewma: bool,
    ) -> bool:
        """Fold ``values`` in for ``ids``; False if a check failed (then nothing was written).

        ``region`` >= 0: every id must be a worker of that region. ``ewma``: blend with the
        current estimate where one exists (weight ``queue_ewma_weight``), else replace.
        """
        cfg = self._config
        status = _refresh_kernel(
            self.queue_ms,
            self.pending_ms,
            self.refreshed_ms,
            self.idle_since_ms,
            self.worker_region,
            ids,
            values,
            float(now_ms),
            region,
            ewma,
            cfg.queue_ewma_weight,
            cfg.idle_queue_eps_ms,
        )
        return bool(status)


@njit(cache=True)
def _refresh_kernel(  # type: ignore[no-untyped-def]
    queue,
    pending,
    refreshed,
    idle_since,
    worker_region,
    ids,
    values,
    now,
    region,
    ewma,
    w,
    eps,
):
    """One refresh of ``ids`` (checked first; returns 1 and writes nothing on a bad input).

    Reads every old value before writing any, so duplicate ids behave like numpy fancy
    assignment (the last one wins); the arithmetic is the numpy version's, term for term.
    """
    n = ids.shape[0]
    n_workers = worker_region.shape[0]
    for i in range(n):
        v = values[i]
        if not np.isfinite(v) or v < 0 or v > MAX_QUEUE_MS:
            return 1
        r = ids[i]
        if r < 0 or r >= n_workers:
            return 1
        if region >= 0 and worker_region[r] != region:
            return 1
    new_q = np.empty(n)
    new_idle = np.empty(n)
    for i in range(n):
        r = ids[i]
        v = values[i]
        if ewma and np.isfinite(refreshed[r]):
            v = (1 - w) * queue[r] + w * v
        new_q[i] = v
        new_idle[i] = min(idle_since[r], now) if v <= eps else np.inf
    for i in range(n):
        r = ids[i]
        queue[r] = new_q[i]
        pending[r] = 0.0
        refreshed[r] = now
        idle_since[r] = new_idle[i]
    return 0


def _as_vector(values: object, n: int, what: str) -> NDArray[np.float64]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (n,):
        raise InvalidInputError(f"expected {what} of shape ({n},), got {arr.shape}")
    return arr


def _check_values(values: NDArray[np.float64], n: int, what: str) -> NDArray[np.float64]:
    arr = np.asarray(values, dtype=np.float64)
    if arr.shape != (n,):
        raise InvalidInputError(f"expected {what} of shape ({n},), got {arr.shape}")
    if not np.all(np.isfinite(arr)) or (arr.size and (arr.min() < 0 or arr.max() > MAX_QUEUE_MS)):
        raise InvalidInputError(
            f"expected {what} finite, >= 0 and <= {MAX_QUEUE_MS:g}, got {arr.tolist()[:20]}"
        )
    return arr
