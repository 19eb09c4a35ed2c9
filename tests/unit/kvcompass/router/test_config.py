"""RouterConfig: the paper's defaults, the derived γ and τ, validation."""

from __future__ import annotations

import pytest

from kvcompass.errors import ConfigError
from kvcompass.router import RouterConfig


def test_defaults__are_the_papers() -> None:
    c = RouterConfig()
    assert (c.broadcast_period_ms, c.queue_ewma_weight, c.lambda_max) == (100.0, 0.5, 8.0)
    assert (c.hot_miss_threshold, c.hot_window_ms) == (3, 1000.0)
    assert c.kv_bytes_per_token == 128 * 1024


def test_tau__derived_from_median_beta_and_reference_match() -> None:
    assert RouterConfig().resolve_tau_ms(0.1) == pytest.approx(204.8)
    assert RouterConfig(tau_ms=50.0).resolve_tau_ms(0.1) == 50.0


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("broadcast_period_ms", 0.0),
        ("queue_ewma_weight", 0.0),
        ("queue_ewma_weight", 1.5),
        ("belief_prior", 1.1),
        ("lambda_max", -1.0),
        ("tau_ms", 0.0),
        ("hot_miss_threshold", 0),
        ("explain_top_k", 0),
        ("hot_window_ms", float("nan")),
    ],
)
def test_config_rejects__out_of_range(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=field):
        RouterConfig(**{field: value})  # type: ignore[arg-type]
