"""The cost model: how long a simulated worker takes, and where every number comes from.

Owns the per-worker times (prefill, DRAM reload, decode, intra-region KV copy) and capacities,
derived from ``SimConfig`` and the deployment. Must not hold state or know schemes.

Worker model (a documented choice; paper §4 does not spell its own out)
-------------------------------------------------------------------------
A worker is one model replica. Prefill is compute-bound and saturates the GPU, so prefills are
served one at a time from a FIFO queue: a request's prefill takes ``β · (L - reused)`` ms plus
``γ · dram_reused`` ms of host->device reload, where ``reused`` is the prefix the worker truly
holds (VRAM or DRAM). Decode is memory-bandwidth-bound and runs in a continuous batch alongside
the prefills (SGLang/vLLM chunked prefill): each output token costs ``decode_ms_per_token`` of
latency but the batch does not delay the prefill queue. Hence

    TTFT = [lookup] + WAN(o->r) + queue + reload + prefill + WAN(r->o)
    E2E  = TTFT + (output_len - 1) · decode_ms_per_token

Both include the return trip because the user sees the first token only when it arrives back
(in-region hops use the deployment's ``in_region_one_way_ms``). The load a worker carries (for
the load factor, paper Fig. 14) is its prefill+reload GPU time.

Numbers (A100-80GB, Llama-3.1-8B-Instruct BF16; paper §5.3; the constants live in
``kvcompass.costs``, shared with the router and the emulated worker)
-----------------------------------------------------------------------------------------
* β: the deployment's ``prefill_ms_per_token`` per region (paper-64x8: 0.086 ms/token, derived
  there from 2 x 8.03e9 FLOP/token at 60% of 312 TFLOP/s; testbeds: RTX 5090 0.085, measured in
  the paper §5.2).
* γ = KV bytes per token / PCIe bandwidth = 131072 B / 25 GB/s = 0.00524 ms/token.
* Decode 10 ms/token: one decode step streams the 16.06 GB of BF16 weights plus the batch's KV
  from HBM2e (2.04 TB/s) -> 7.9 ms for the weights alone; ~25% more for KV reads and kernel
  overheads at moderate batch sizes gives ~10 ms, in line with published vLLM/SGLang A100
  Llama-3-8B inter-token latencies (8-15 ms). RTX 5090 (1.79 TB/s) lands at the same ~10 ms.
* Capacities: 32 GiB VRAM / 128 KiB = 262,144 tokens; 128 GiB DRAM = 1,048,576 tokens.
* Intra-region copy (migration): 128 KiB per token over 100 Gb/s = 0.0105 ms/token.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass import costs
from kvcompass.deployment import Deployment
from sim.config import SimConfig


@dataclass(frozen=True, slots=True)
class CostModel:
    """Per-worker service times and capacities of one run."""

    prefill_ms_per_token: NDArray[np.float64]
    """β of every worker, shape (W,)."""
    reload_ms_per_token: float
    """γ: DRAM -> VRAM reload per token."""
    decode_ms_per_token: float
    copy_ms_per_token: float
    """Worker-to-worker KV copy inside a region (migration)."""
    vram_tokens: int
    dram_tokens: int
    wan_one_way_ms: NDArray[np.float64]
    """(R, R) one-way latency; the diagonal is the in-region edge -> worker hop."""

    @classmethod
    def build(cls, deployment: Deployment, config: SimConfig) -> CostModel:
        beta_region = deployment.prefill_ms_per_token
        wan = deployment.wan_matrix_ms.copy()
        np.fill_diagonal(wan, float(deployment.in_region_one_way_ms))
        return cls(
            prefill_ms_per_token=beta_region[deployment.worker_region].astype(np.float64),
            reload_ms_per_token=costs.transfer_ms_per_token(
                config.kv_bytes_per_token, config.pcie_bytes_per_s
            ),
            decode_ms_per_token=config.decode_ms_per_token,
            copy_ms_per_token=costs.transfer_ms_per_token(
                config.kv_bytes_per_token, config.intra_region_bytes_per_s
            ),
            vram_tokens=config.vram_tokens,
            dram_tokens=config.dram_tokens,
            wan_one_way_ms=wan,
        )

    def service_ms(self, worker: int, prompt_tokens: int, reused: int, dram_reused: int) -> float:
        """GPU time of one prefill: recompute what is not reused, reload what sat in DRAM."""
        return float(
            costs.prefill_ms(
                float(self.prefill_ms_per_token[worker]),
                prompt_tokens - reused,
                self.reload_ms_per_token,
                dram_reused,
            )
        )

    def decode_ms(self, output_tokens: int) -> float:
        """Decode latency after the first token."""
        return self.decode_ms_per_token * max(0, output_tokens - 1)
