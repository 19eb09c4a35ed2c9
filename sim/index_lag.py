"""The index path's delay as measured, for the simulator (issue 33 item 4: no kinder than the
pipeline).

``MEASURED_LAG_MS``: quantiles of the event -> view lag that ``bench/pipeline.py`` measured on
2026-12-04 (``--rate 1000 --seconds 10``, 4,651 applied batches, one maintenance process, the
local broker and the bench's own view on the same 2-vCPU machine at load average 2.4-3.1; the
``view_lag`` histogram written with ``--lag-out``): from the sidecar's produce to the patches
applied in the view, every Kafka hop, take window and delivery wait included, no WAN leg. The
simulator samples one value per window of cache events and per edge region (inverse CDF, linear
between the quantiles) and charges it in place of ``index_base_delay_ms`` (its window
``index_batch_ms`` stays on top: a few ms pessimistic, never optimistic); the WAN legs come from
its network as before. Re-measure and replace when the pipeline changes (bench/README,
"Pipeline").
"""

from __future__ import annotations

import numpy as np

MEASURED_LAG_MS: tuple[tuple[float, float], ...] = (
    (0.0, 30.0), (0.01, 36.3), (0.05, 40.8), (0.1, 45.8), (0.2, 51.4), (0.4, 57.7),
    (0.5, 57.7), (0.6, 64.8), (0.8, 72.7), (0.9, 81.7), (0.95, 115.6), (0.98, 231.5),
    (0.99, 291.9), (0.995, 327.7), (0.999, 413.1), (1.0, 463.8),
)  # fmt: skip
"""(quantile, ms) of the measured event -> view lag (the run in the module docstring)."""

_Q = np.array([q for q, _ in MEASURED_LAG_MS])
_MS = np.array([ms for _, ms in MEASURED_LAG_MS])


def sample_lag_ms(rng: np.random.Generator) -> float:
    """One event -> view lag drawn from the measured distribution."""
    return float(np.interp(rng.random(), _Q, _MS))


def median_lag_ms() -> float:
    return float(np.interp(0.5, _Q, _MS))
