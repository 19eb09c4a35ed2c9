"""Hot-prefix tracker: when to ask for a KV replica in the edge's region (paper §3.4 Insert).

Owns per-family miss history, the under-way/cooldown bookkeeping and the choice of source and
target; returns ``MigrationRequest``s as data. It must not move anything or read a clock: the
shell performs the copy/recompute and reports completion with ``complete``.

Definitions (one edge, origin region o; a *family* is the caller's first-level key)
- Local hit: the decision's winner is in o and holds a match. Anything else is a *local miss*.
- Window: an event at time t counts at ``now`` iff ``now - t < hot_window_ms`` (T_h).
- Trigger A (no local holder): the request is a miss, o holds no match, a remote holder's match
  is at least its region's n1 (``Decision.remote_holder``), and the family has >= H misses in
  the window. The index reports no remote match shorter than n1, so with a well-formed index
  every reported remote holder qualifies; the check guards the contract.
- Trigger B (local holders keep losing to load): a *loss to load* is a miss where o holds a
  match and the best local holder lost although, queue terms aside, it scored at least as well
  as the winner (``Decision.local_holder_lost_to_load``). Losses are *consecutive*: a local hit,
  or a miss lost for another reason, or a request with no local holder resets the streak.
  Trigger at H consecutive losses within the window.
- Target: a worker of o, persistently idle (estimated queue <= eps for >= idle_min, nothing
  forwarded since), holding no match, not the target of a migration under way; longest-idle
  first, then lowest id. None idle: no request, history kept, the next miss retries.
- Source and mode: A → the remote holder, CROSS_REGION_RECOMPUTE (the edge ships the prompt's
  first ``prefix_tokens`` tokens; KV tensors do not cross the WAN). B → the local holder,
  INTRA_REGION_COPY. Tier: always DRAM, so the replica evicts nothing serving from VRAM.
  ``prefix_tokens`` is the source's match: the triggering request's own indexed prefix.
- De-duplication: a family is not migrated while one is under way (until ``complete`` or
  ``migration_timeout_ms``) nor within ``migration_cooldown_ms`` of its last request.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import numpy as np
from numpy.typing import NDArray

from kvcompass.router.config import RouterConfig
from kvcompass.router.decision import Decision
from kvcompass.types import Tier


class MigrationMode(IntEnum):
    """How the replica is produced (paper §3.5 Migration cost)."""

    INTRA_REGION_COPY = 1
    CROSS_REGION_RECOMPUTE = 2


@dataclass(frozen=True, slots=True)
class MigrationRequest:
    """Ask ``target_worker`` to hold the first ``prefix_tokens`` tokens of the request's prompt."""

    family_key: int
    prefix_tokens: int
    source_worker: int
    target_worker: int
    mode: MigrationMode
    tier: Tier
    requested_ms: float


@dataclass(slots=True)
class _Family:
    miss_ms: deque[float]
    lose_ms: deque[float]


class HotPrefixTracker:
    """Counts local misses per prefix family and emits de-duplicated migration requests."""

    __slots__ = (
        "_config",
        "_families",
        "_last_request_ms",
        "_local",
        "_sweep_at",
        "_underway",
        "origin",
    )

    def __init__(self, worker_region: NDArray[np.int64], origin: int, config: RouterConfig) -> None:
        self._config = config
        self.origin = origin
        self._local = worker_region == origin
        self._families: dict[int, _Family] = {}
        self._underway: dict[int, tuple[float, int]] = {}
        self._last_request_ms: dict[int, float] = {}
        self._sweep_at = 1024

    def observe(
        self,
        family_key: int,
        decision: Decision,
        matched_tokens: NDArray[np.int64],
        idle_since_ms: NDArray[np.float64],
        idle_now: Callable[[], NDArray[np.bool_]],
        now_ms: float,
    ) -> list[MigrationRequest]:
        """Record one routed request; return the migrations it triggers (usually none).

        ``idle_since_ms`` and ``idle_now`` come from the queue view (``QueueView.idle_since_ms``,
        ``lambda: view.persistently_idle(now_ms)``); ``idle_now`` is called only on a trigger,
        keeping the common path free of the (W,) mask computation.
        """
        if not self._config.migration:
            return []
        family = self._families.get(family_key)
        if decision.winner_is_local_holder:
            if family is not None:
                family.lose_ms.clear()
            return []
        if family is None:
            family = self._families[family_key] = _Family(deque(), deque())
            if len(self._families) >= self._sweep_at:
                self._sweep(now_ms)
        horizon = now_ms - self._config.hot_window_ms
        family.miss_ms.append(now_ms)
        if decision.local_holder >= 0 and decision.local_holder_lost_to_load:
            family.lose_ms.append(now_ms)
        else:
            family.lose_ms.clear()
        for times in (family.miss_ms, family.lose_ms):
            while times and times[0] <= horizon:
                times.popleft()

        h = self._config.hot_miss_threshold
        if decision.local_holder < 0:
            if decision.remote_holder < 0 or len(family.miss_ms) < h:
                return []
            source, mode = decision.remote_holder, MigrationMode.CROSS_REGION_RECOMPUTE
        else:
            if len(family.lose_ms) < h:
                return []
            source, mode = decision.local_holder, MigrationMode.INTRA_REGION_COPY
        if self._blocked(family_key, now_ms):
            return []
        target = self._pick_target(matched_tokens, idle_since_ms, idle_now(), now_ms)
        if target < 0:
            return []
        self._underway[family_key] = (now_ms, target)
        self._last_request_ms[family_key] = now_ms
        family.miss_ms.clear()
        family.lose_ms.clear()
        return [
            MigrationRequest(
                family_key=family_key,
                prefix_tokens=int(matched_tokens[source]),
                source_worker=source,
                target_worker=target,
                mode=mode,
                tier=Tier.DRAM,
                requested_ms=now_ms,
            )
        ]

    def complete(self, family_key: int, now_ms: float) -> None:
        """The replica for ``family_key`` landed (or failed): it no longer blocks as under way.

        The cooldown still runs from the request time. The family's miss history is dropped:
        misses while the replica was on its way say nothing about whether it helps.
        """
        self._underway.pop(family_key, None)
        self._families.pop(family_key, None)

    def underway(self, now_ms: float) -> dict[int, int]:
        """family_key → target worker of migrations still under way at ``now_ms``."""
        timeout = self._config.migration_timeout_ms
        return {f: t for f, (at, t) in self._underway.items() if now_ms - at < timeout}

    def _blocked(self, family_key: int, now_ms: float) -> bool:
        flight = self._underway.get(family_key)
        if flight is not None and now_ms - flight[0] < self._config.migration_timeout_ms:
            return True
        last = self._last_request_ms.get(family_key)
        return last is not None and now_ms - last < self._config.migration_cooldown_ms

    def _pick_target(
        self,
        matched_tokens: NDArray[np.int64],
        idle_since_ms: NDArray[np.float64],
        idle_now: NDArray[np.bool_],
        now_ms: float,
    ) -> int:
        ok = self._local & idle_now & (matched_tokens == 0)
        if not ok.any():
            return -1  # the common case under load: no idle local worker without the prefix
        busy = list(self.underway(now_ms).values())
        if busy:
            ok[busy] = False
        candidates = np.flatnonzero(ok)
        if candidates.size == 0:
            return -1
        # argmin returns the first minimum, and candidates are ascending: ties go to the lower id.
        return int(candidates[np.argmin(idle_since_ms[candidates])])

    def _sweep(self, now_ms: float) -> None:
        """Drop families with no miss in the window and expired bookkeeping (bounded memory)."""
        horizon = now_ms - self._config.hot_window_ms
        self._families = {
            k: f for k, f in self._families.items() if f.miss_ms and f.miss_ms[-1] > horizon
        }
        keep = max(self._config.migration_cooldown_ms, self._config.migration_timeout_ms)
        self._last_request_ms = {
            k: t for k, t in self._last_request_ms.items() if now_ms - t < keep
        }
        self._underway = {
            k: v
            for k, v in self._underway.items()
            if now_ms - v[0] < self._config.migration_timeout_ms
        }
        self._sweep_at = max(1024, 2 * len(self._families))
