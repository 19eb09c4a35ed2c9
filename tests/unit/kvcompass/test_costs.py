"""The one home of the cost model's numbers and the prefill formula (issue 24 item 3)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcompass import costs
from kvcompass.router import RouterConfig
from sim.config import SimConfig
from sim.cost import CostModel
from workers.emulated.costs import EmulatedCosts


def test_every_shell_reads_the_same_numbers() -> None:
    gamma = costs.transfer_ms_per_token(
        costs.LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN, costs.HOST_DEVICE_BYTES_PER_S
    )
    assert gamma == pytest.approx(131072 / 25e9 * 1e3)
    assert RouterConfig().gamma_ms_per_token == gamma
    assert EmulatedCosts().reload_ms_per_token == gamma
    assert EmulatedCosts().decode_ms_per_token == costs.DECODE_MS_PER_TOKEN
    sim = SimConfig()
    assert sim.kv_bytes_per_token == costs.LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN
    assert sim.pcie_bytes_per_s == costs.HOST_DEVICE_BYTES_PER_S


@given(
    beta=st.floats(0.01, 1.0),
    prompt=st.integers(1, 40_000),
    reused=st.integers(0, 40_000),
    dram=st.integers(0, 40_000),
)
@settings(max_examples=100, deadline=None)
def test_prefill_ms__one_formula_on_scalars_and_arrays(
    beta: float, prompt: int, reused: int, dram: int
) -> None:
    reused = min(reused, prompt)
    dram = min(dram, reused)
    gamma = RouterConfig().gamma_ms_per_token
    want = beta * (prompt - reused) + gamma * dram
    assert costs.prefill_ms(beta, prompt - reused, gamma, dram) == want
    arr = costs.prefill_ms(np.array([beta, beta]), np.array([prompt - reused, 0]), gamma,
                           np.array([dram, 0]))  # fmt: skip
    assert arr.tolist() == [want, 0.0]
    assert EmulatedCosts(prefill_ms_per_token=beta).prefill_ms(prompt - reused, dram) == want


def test_sim_cost_model__service_is_the_core_formula() -> None:
    from wire.deployments import load_deployment

    dep = load_deployment("paper-64x8")
    cm = CostModel.build(dep, SimConfig())
    beta = float(cm.prefill_ms_per_token[3])
    assert cm.service_ms(3, 4000, 1000, 500) == costs.prefill_ms(
        beta, 3000, cm.reload_ms_per_token, 500
    )
