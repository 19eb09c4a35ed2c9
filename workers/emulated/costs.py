"""Service times of the emulated worker, and the time-scale factor that shrinks them.

The numbers and their derivation are the simulator's (``sim/cost.py``, paper §5.3): prefill β
ms per recomputed token (the deployment region's ``prefill_ms_per_token``), host->device reload
γ = 128 KiB/token over 25 GB/s = 0.00524 ms per DRAM-hit token, decode 10 ms per output token.
Kept as a small model of its own so the worker does not pull in the simulator's config; the same
formula: prefill_ms = β · uncached + γ · host_hit. ``time_scale`` multiplies every sleep (0.01 runs
a 100x faster emulation; 0 does not sleep at all). Must not: sleep itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcompass.errors import ConfigError


@dataclass(frozen=True, slots=True)
class EmulatedCosts:
    prefill_ms_per_token: float = 0.085
    reload_ms_per_token: float = 0.00524
    decode_ms_per_token: float = 10.0
    time_scale: float = 1.0

    def __post_init__(self) -> None:
        for name in ("prefill_ms_per_token", "reload_ms_per_token", "decode_ms_per_token"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name}: expected >= 0, got {getattr(self, name)!r}")
        if not self.time_scale >= 0:
            raise ConfigError(f"time_scale: expected >= 0, got {self.time_scale!r}")

    def prefill_ms(self, uncached_tokens: int, host_hit_tokens: int) -> float:
        """Model time of one prefill (before scaling)."""
        return (
            self.prefill_ms_per_token * uncached_tokens + self.reload_ms_per_token * host_hit_tokens
        )

    def sleep_s(self, model_ms: float) -> float:
        """Wall-clock seconds to sleep for ``model_ms`` of model time."""
        return model_ms * self.time_scale / 1000.0
