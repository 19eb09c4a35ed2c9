"""The agents' supervisor survives a rebalance that restarts several actors at once."""

from __future__ import annotations

from mode import OneForOneSupervisor

from pipeline.agents import RebalanceSupervisor


def test_mode_default__a_second_restart_within_milliseconds_is_refused() -> None:
    bucket = OneForOneSupervisor(max_restarts=100.0, over=1.0)._bucket
    assert bucket.pour() and not bucket.pour()  # why the worker exited in CI


def test_rebalance_supervisor__holds_its_whole_rate_then_refuses() -> None:
    sup = RebalanceSupervisor(max_restarts=100.0, over=1.0)
    got = [sup._bucket.pour() for _ in range(101)]
    assert all(got[:100]) and not got[100]
