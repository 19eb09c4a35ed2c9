"""Hot-prefix tracker: H misses within T_h, the two triggers, idle targets, de-duplication."""

from __future__ import annotations

import numpy as np

from kvcompass.router import MigrationMode, MigrationRequest, Router
from kvcompass.types import Tier

from .conftest import PROMPT, build_router, request

FAMILY = 7
REMOTE_HIT = {4: 2048}  # region 1 holds it, above n1 = 800; region 0 holds nothing


def _idle_router(**overrides: object) -> Router:
    router = build_router(**overrides)
    router.set_local_queues([0.0] * 4, now_ms=-1000.0)
    return router


def _miss(
    router: Router, now: float, matches: dict[int, int] = REMOTE_HIT
) -> list[MigrationRequest]:
    matched, tiers = request(matches)
    d = router.choose(PROMPT, matched, tiers, now_ms=now)
    return router.observe(FAMILY, matched, d, now_ms=now)


def test_fires_exactly_at_h_misses_within_window__cross_region_recompute() -> None:
    router = _idle_router()
    assert _miss(router, 0.0) == [] and _miss(router, 400.0) == []
    got = _miss(router, 800.0)
    assert got == [
        MigrationRequest(
            family_key=FAMILY,
            prefix_tokens=2048,
            source_worker=4,
            target_worker=0,
            mode=MigrationMode.CROSS_REGION_RECOMPUTE,
            tier=Tier.DRAM,
            requested_ms=800.0,
        )
    ]


def test_does_not_fire__when_misses_spread_beyond_window() -> None:
    router = _idle_router()
    assert _miss(router, 0.0) == [] and _miss(router, 600.0) == []
    assert _miss(router, 1200.0) == []  # the miss at 0 left the window
    assert len(_miss(router, 1300.0)) == 1  # 600, 1200, 1300


def test_window_is_half_open__a_miss_exactly_t_h_old_does_not_count() -> None:
    router = _idle_router()
    assert _miss(router, 0.0) == [] and _miss(router, 500.0) == []
    assert _miss(router, 1000.0) == []
    assert len(_miss(router, 1001.0)) == 1


def test_no_fire__when_remote_match_below_n1_or_no_holder_anywhere() -> None:
    router = _idle_router()
    for t in range(6):
        assert _miss(router, 100.0 * t, {4: 784}) == []
        assert _miss(router, 100.0 * t + 1, {}) == []


def test_target__is_longest_idle_local_non_holder() -> None:
    router = _idle_router()
    router.set_local_queues([5.0, 0.0, 0.0, 0.0], now_ms=-900.0)
    router.set_local_queues([0.0, 0.0, 0.0, 0.0], now_ms=-700.0)
    for t in (0.0, 1.0):
        _miss(router, t)
    assert _miss(router, 2.0)[0].target_worker == 1


def test_no_idle_target__no_request_and_next_miss_retries() -> None:
    router = build_router()
    router.set_local_queues([40.0] * 4, now_ms=-1000.0)
    for t in (0.0, 1.0, 2.0):
        assert _miss(router, t) == []
    router.set_local_queues([40.0, 40.0, 0.0, 40.0], now_ms=3.0)
    assert _miss(router, 400.0) == []  # idle for 397 ms only
    assert _miss(router, 600.0)[0].target_worker == 2


def test_dedup__not_while_in_flight_nor_within_cooldown() -> None:
    router = _idle_router(migration_cooldown_ms=2000.0, migration_timeout_ms=10_000.0)
    for t in (0.0, 1.0, 2.0):
        got = _miss(router, t)
    assert len(got) == 1
    for t in (3.0, 4.0, 5.0, 2500.0, 2501.0, 2502.0):
        assert _miss(router, t) == []  # in flight (the cooldown alone ended at 2002)
    router.complete_migration(FAMILY, now_ms=2600.0)
    for t in (2700.0, 2701.0):
        assert _miss(router, t) == []  # misses during the flight were forgotten on completion
    assert len(_miss(router, 2702.0)) == 1


def test_dedup__in_flight_expires_after_timeout() -> None:
    router = _idle_router(migration_cooldown_ms=100.0, migration_timeout_ms=5000.0)
    for t in (0.0, 1.0, 2.0):
        _miss(router, t)
    assert _miss(router, 4200.0) == [] and _miss(router, 4500.0) == []  # still in flight
    assert len(_miss(router, 5002.0)) == 1


def test_concurrent_families__get_different_targets() -> None:
    router = _idle_router()
    targets = []
    for family in (1, 2):
        matched, tiers = request(REMOTE_HIT)
        for t in (0.0, 1.0, 2.0):
            d = router.choose(PROMPT, matched, tiers, now_ms=t)
            got = router.observe(family, matched, d, now_ms=t)
        targets.append(got[0].target_worker)
    assert targets == [0, 1]


def _congested_holder_router() -> Router:
    router = build_router()
    router.set_local_queues([900.0, 0.0, 0.0, 0.0], now_ms=-1000.0)
    return router


def test_local_holders_keep_losing_to_load__intra_region_copy() -> None:
    router = _congested_holder_router()
    assert _miss(router, 0.0, {0: 2048}) == [] and _miss(router, 1.0, {0: 2048}) == []
    (got,) = _miss(router, 2.0, {0: 2048})
    assert got.mode is MigrationMode.INTRA_REGION_COPY
    assert (got.source_worker, got.target_worker, got.prefix_tokens) == (0, 1, 2048)
    assert got.tier is Tier.DRAM


def test_losing_streak__reset_by_a_local_hit() -> None:
    router = _congested_holder_router()
    _miss(router, 0.0, {0: 2048})
    _miss(router, 1.0, {0: 2048})
    router.set_local_queues([0.0, 0.0, 0.0, 0.0], now_ms=2.0)
    assert _miss(router, 3.0, {0: 2048}) == []  # a local hit
    router.set_local_queues([900.0, 0.0, 0.0, 0.0], now_ms=4.0)
    assert _miss(router, 5.0, {0: 2048}) == [] and _miss(router, 6.0, {0: 2048}) == []
    assert len(_miss(router, 7.0, {0: 2048})) == 1


def test_loss_not_due_to_load__does_not_count() -> None:
    # The local holder has a short match; a remote holder's long match wins on reuse, not load.
    router = build_router()
    router.set_local_queues([0.0] * 4, now_ms=-1000.0)
    for t in range(5):
        assert _miss(router, float(t), {0: 128, 4: 4096}) == []


def test_migration_switch_off__never_requests() -> None:
    router = _idle_router(migration=False)
    for t in range(10):
        assert _miss(router, float(t)) == []


def test_tracker_memory__bounded_over_many_families() -> None:
    router = _idle_router()
    matched, tiers = request(REMOTE_HIT)
    d = router.choose(PROMPT, matched, tiers, now_ms=0.0)
    for i in range(6000):
        router.observe(10_000 + i, matched, d, now_ms=10.0 * i)
    assert len(router.hot_prefixes._families) < 2100
    assert np.isfinite(d.score_ms)
