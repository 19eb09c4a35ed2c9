"""Service times of the emulated worker, and the time-scale factor that shrinks them.

The numbers and the formula are the core's (``kvcompass.costs``, derived in ``sim/cost.py``, paper
§5.3): prefill β ms per recomputed token (the deployment region's ``prefill_ms_per_token``),
host->device reload γ = 128 KiB/token over 25 GB/s = 0.00524 ms per DRAM-hit token, decode 10 ms
per output token; prefill_ms = β · uncached + γ · host_hit (``costs.prefill_ms``); in PD decode
mode the KV transfer from the prefill worker (``costs.kv_transfer_ms`` over the configured link).
``time_scale`` multiplies every sleep (0.01 runs a 100x faster emulation; 0 does not sleep at
all). Must not: sleep itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcompass import costs
from kvcompass.errors import ConfigError


@dataclass(frozen=True, slots=True)
class EmulatedCosts:
    prefill_ms_per_token: float = 0.085
    reload_ms_per_token: float = costs.transfer_ms_per_token(
        costs.LLAMA31_8B_BF16_KV_BYTES_PER_TOKEN, costs.HOST_DEVICE_BYTES_PER_S
    )
    decode_ms_per_token: float = costs.DECODE_MS_PER_TOKEN
    time_scale: float = 1.0
    pd_link_bytes_per_s: float = costs.INTRA_REGION_BYTES_PER_S
    """PD mode: bandwidth of the link from the prefill worker to this decode worker."""
    pd_link_one_way_ms: float = 0.0
    """PD mode: one-way latency of that link (0 in a region; the WAN's across regions)."""

    def __post_init__(self) -> None:
        for name in ("prefill_ms_per_token", "reload_ms_per_token", "decode_ms_per_token"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name}: expected >= 0, got {getattr(self, name)!r}")
        if not self.pd_link_bytes_per_s > 0 or not self.pd_link_one_way_ms >= 0:
            got = f"{self.pd_link_bytes_per_s!r}, {self.pd_link_one_way_ms!r}"
            raise ConfigError(f"pd link: expected bytes/s > 0 and one-way ms >= 0, got {got}")
        if not self.time_scale >= 0:
            raise ConfigError(f"time_scale: expected >= 0, got {self.time_scale!r}")

    def prefill_ms(self, uncached_tokens: int, host_hit_tokens: int) -> float:
        """Model time of one prefill (before scaling)."""
        return float(
            costs.prefill_ms(
                self.prefill_ms_per_token,
                uncached_tokens,
                self.reload_ms_per_token,
                host_hit_tokens,
            )
        )

    def kv_transfer_ms(self, tokens: int) -> float:
        """Model time of moving ``tokens`` of KV from the prefill worker (PD decode side)."""
        return costs.kv_transfer_ms(tokens, self.pd_link_bytes_per_s, self.pd_link_one_way_ms)

    def sleep_s(self, model_ms: float) -> float:
        """Wall-clock seconds to sleep for ``model_ms`` of model time."""
        return model_ms * self.time_scale / 1000.0
