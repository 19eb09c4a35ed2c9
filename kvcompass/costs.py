"""The cost model's hardware numbers and the prefill-time formula: one home for every shell.

Owns what the router, the simulator and the emulated worker price work with: KV bytes per
token, host↔device and intra-region bandwidths, decode ms per output token, and the one formula
for a prefill's GPU time. ``RouterConfig`` (γ in the joint score), ``SimConfig``/``sim.cost``
(the simulated workers), ``workers.emulated.costs`` (the emulated worker's sleeps), the score
kernel and the reference baselines read them from here. Pure: no state, no I/O.

Numbers (A100-80GB, Llama-3.1-8B-Instruct BF16; paper §5.3; ``sim/cost.py`` derives each):

* KV bytes per token: 32 layers × 8 KV heads × 128 dims × (K, V) × 2 bytes = 131,072 (128 KiB).
* Host → device reload: PCIe 4.0 x16, ~25 GB/s, so γ = 131072 / 25e9 s = 0.00524 ms/token.
* Decode: 10 ms per output token (16.06 GB of weights ÷ 2.04 TB/s HBM2e = 7.9 ms, +25%).
* Intra-region KV copy (migration): 100 Gb/s = 12.5 GB/s, 0.0105 ms/token.

The prefill formula (paper §3.4, the simulator's worker model)::

    prefill_ms = β · (L − reused) + γ · reloaded

β is per worker (its region's ``prefill_ms_per_token``): it lives in the deployment, not here.

Prefill/decode disaggregation (end of the module): the KV transfer from a prefill worker to a
decode worker (``kv_transfer_ms``: one-way latency + bytes over the link), and the cross-region
price of decoding in region B what region A prefilled vs prefilling again in B.
"""

from __future__ import annotations

from typing import Any

from numba import njit

LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2
"""32 layers x 8 KV heads x 128 head dim x (K, V) x 2 bytes = 131072 bytes (128 KiB)."""
HOST_DEVICE_BYTES_PER_S = 25e9
"""Host DRAM -> GPU reload bandwidth (PCIe 4.0 x16, paper §5.3)."""
INTRA_REGION_BYTES_PER_S = 12.5e9
"""Worker-to-worker KV copy bandwidth inside a region (100 Gb/s)."""
DECODE_MS_PER_TOKEN = 10.0
"""Latency per output token of a request in a continuous batch."""


def transfer_ms_per_token(kv_bytes_per_token: float, bytes_per_s: float) -> float:
    """ms to move one token's KV over a link of ``bytes_per_s`` (γ for host→device)."""
    return kv_bytes_per_token / bytes_per_s * 1e3


@njit(cache=True, inline="always")
def prefill_ms(
    beta_ms_per_token: Any, uncached_tokens: Any, reload_ms_per_token: float, reloaded: Any
) -> Any:
    """GPU time of one prefill: recompute ``uncached_tokens`` at β, reload ``reloaded`` tokens
    from host DRAM at γ. Callable from Python and from njit kernels (the score's predicted
    service is this formula), on scalars (float out) or elementwise on arrays (array out)."""
    return beta_ms_per_token * uncached_tokens + reload_ms_per_token * reloaded


# --- Prefill/decode disaggregation: the KV transfer from prefill to decode -------------------
#
# A disaggregated request is prefilled on one worker and decoded on another; the prefill's KV
# (every prompt token's, ``LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN`` each) crosses the link between
# them before the first decode step. Across regions that link is the WAN; the alternative is to
# prefill again in the decode worker's region and move the KV over the regional network. Paper
# §3.5 ("Migration cost"): moving KV beats recomputing it when the bandwidth in bytes/ms exceeds
# s/β (s KV bytes per token, β prefill ms per token); regional networks (tens to hundreds of
# Gb/s) do, the public Internet between regions does not.


def kv_transfer_ms(
    tokens: int,
    bytes_per_s: float,
    one_way_ms: float = 0.0,
    kv_bytes_per_token: float = LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN,
) -> float:
    """ms from the end of a prefill until its ``tokens`` of KV are at the decode worker: one
    one-way link latency plus the bytes over the link's bandwidth."""
    if tokens < 0 or not bytes_per_s > 0 or not one_way_ms >= 0:
        raise ValueError(
            f"kv_transfer_ms: expected tokens >= 0, bytes_per_s > 0, one_way_ms >= 0; got "
            f"{tokens}, {bytes_per_s}, {one_way_ms}"
        )
    return one_way_ms + tokens * transfer_ms_per_token(kv_bytes_per_token, bytes_per_s)


def cross_region_decode_ms(
    prompt_tokens: int,
    cached_at_prefill: int,
    beta_ms_per_token: float,
    wan_bytes_per_s: float,
    one_way_ms: float,
    kv_bytes_per_token: float = LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN,
) -> float:
    """Prefill in region A (recomputing what A's worker does not hold), then the whole prompt's
    KV over the WAN to a decode worker in region B: ms until B can decode. ``one_way_ms``: the
    WAN latency this path adds over the alternative (``reprefill_at_decode_ms``): one one-way
    trip (the KV's) when the request is forwarded across either way (an edge in A choosing
    between a decode in B fed from A and a prefill in B), two when the alternative stays home
    (an edge in B: the prompt to A and the KV back)."""
    uncached = max(prompt_tokens - cached_at_prefill, 0)
    transfer = kv_transfer_ms(prompt_tokens, wan_bytes_per_s, one_way_ms, kv_bytes_per_token)
    return float(prefill_ms(beta_ms_per_token, uncached, 0.0, 0)) + transfer


def reprefill_at_decode_ms(
    prompt_tokens: int,
    cached_at_decode_region: int,
    beta_ms_per_token: float,
    intra_bytes_per_s: float = INTRA_REGION_BYTES_PER_S,
    kv_bytes_per_token: float = LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN,
) -> float:
    """The alternative: prefill again on a prefill worker in B's region, the KV to B's decode
    worker over the regional network: ms until B can decode."""
    uncached = max(prompt_tokens - cached_at_decode_region, 0)
    transfer = kv_transfer_ms(prompt_tokens, intra_bytes_per_s, 0.0, kv_bytes_per_token)
    return float(prefill_ms(beta_ms_per_token, uncached, 0.0, 0)) + transfer


def cross_region_break_even_tokens(
    beta_ms_per_token: float,
    wan_bytes_per_s: float,
    one_way_ms: float,
    intra_bytes_per_s: float = INTRA_REGION_BYTES_PER_S,
    kv_bytes_per_token: float = LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN,
) -> float | None:
    """The most favourable case for crossing: the whole prompt cached in A, nothing in B.
    Crossing pays for prompts longer than the returned token count; ``None``: it never pays
    (the WAN moves a token's KV slower than B recomputes and moves it locally), at any length.

    From ``one_way + L·s/wan < L·β + L·s/intra``: ``L > one_way / (β + s/intra − s/wan)``."""
    per_token_gain = (
        beta_ms_per_token
        + transfer_ms_per_token(kv_bytes_per_token, intra_bytes_per_s)
        - transfer_ms_per_token(kv_bytes_per_token, wan_bytes_per_s)
    )
    if per_token_gain <= 0:
        return None
    return one_way_ms / per_token_gain
