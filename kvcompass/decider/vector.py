"""What edges tell each other: the QueueVector v3 value, the relay shortlist, and their sizes.

Owns the core values that cross the WAN between edges and the byte count of each as it would be
encoded, which the simulator charges per message (sim/README "update bandwidth"). Must not
encode or send anything: the Avro schema and codec belong to the wire package, the HTTP header
to the edge. The sizes follow Avro's binary encoding (zig-zag varints for int/long, 4 bytes per
float, arrays as one block: count, items, a 0 terminator; an empty array is the single 0) plus
the 5-byte schema-registry framing (magic byte, 4-byte schema id).

QueueVector v3 (proposed Avro fields; v2's fields keep their meaning, new fields have
defaults so v2 records still read):

    region_id                 int            the region whose workers are reported
    worker_ids                array<int>     the workers this edge speaks for (its region's)
    queue_ms                  array<float>   expected wait of worker_ids[i] at taken, ms
    seq                       long           the sender's clock at taken (ms); newest wins
    timestamp_ms              long           = seq (wall clock of the reading, UTC ms)
    bridged_worker_ids        array<int>     v2, unchanged (cache-state authority)
    cache_unknown_worker_ids  array<int>     v2, unchanged
    in_flight_worker_ids      array<int>     NEW: the sender's forwards not yet landed: worker
    in_flight_arrive_ms       array<float>   NEW: its predicted landing, ms after timestamp_ms
    in_flight_work_ms         array<float>   NEW: its predicted prefill work, ms

``taken_ms`` is the sender's clock: the receiver compares it only with other times of the same
sender (its in-flight landings) and with its own forwards' landings, which clock skew blurs by
the offset between the two clocks (sim/README "clock skew").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

FRAMING_BYTES = 5
"""Schema-registry framing in front of every Avro record (magic byte + 4-byte schema id)."""
LONG_MS_BYTES = 6
"""A long holding epoch milliseconds (~1.8e12, zig-zag < 2^42): 6 varint bytes."""
FLOAT_BYTES = 4

InFlight = tuple[int, float, float]
"""(worker, arrive_ms, work_ms): one forward not yet landed, in the sender's clock."""


def varint_bytes(value: int) -> int:
    """Bytes of one Avro int/long (zig-zag varint)."""
    z = (value << 1) ^ (value >> 63)
    n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


def _int_array_bytes(values: list[int]) -> int:
    if not values:
        return 1
    return varint_bytes(len(values)) + sum(varint_bytes(v) for v in values) + 1


def _float_array_bytes(n: int) -> int:
    return 1 if n == 0 else varint_bytes(n) + FLOAT_BYTES * n + 1


@dataclass(frozen=True, slots=True)
class QueueVector:
    """A region's queue estimates at ``taken_ms`` (sender's clock) and its edge's forwards."""

    region: int
    taken_ms: float
    worker_ids: NDArray[np.int64]
    queue_ms: NDArray[np.float64]
    in_flight: tuple[InFlight, ...] = field(default=())

    def wire_bytes(self) -> int:
        """Size of this vector as one framed Avro record (v3 fields above)."""
        ids = self.worker_ids.tolist()
        flying = [w for w, _, _ in self.in_flight]
        return (
            FRAMING_BYTES
            + varint_bytes(self.region)
            + _int_array_bytes(ids)
            + _float_array_bytes(len(ids))
            + 2 * LONG_MS_BYTES  # seq, timestamp_ms
            + 2  # bridged_worker_ids, cache_unknown_worker_ids: empty in the simulator
            + _int_array_bytes(flying)
            + 2 * _float_array_bytes(len(flying))
        )


@dataclass(frozen=True, slots=True)
class Shortlist:
    """What the origin edge sends with a request it relays to region ``region``'s edge.

    ``workers``/``matched_tokens``/``tiers``: the destination's workers, best first by the
    origin's score, with the origin's index answer for each; ``lambda_price``: the origin's λ
    (the destination re-scores at it); ``alternative_ms``: the origin's best score outside
    ``region`` (+inf: none); ``final``: the origin already re-decided once, the destination must
    accept. Travels as one request header: per worker a varint id, a varint match and a tier
    byte; λ and the alternative as floats; the count and the flag one byte each.
    """

    origin: int
    region: int
    prompt_tokens: int
    workers: tuple[int, ...]
    matched_tokens: tuple[int, ...]
    tiers: tuple[int, ...]
    lambda_price: float
    alternative_ms: float
    final: bool = False

    def wire_bytes(self) -> int:
        return (
            2 * FLOAT_BYTES
            + 2
            + sum(varint_bytes(w) for w in self.workers)
            + sum(varint_bytes(m) for m in self.matched_tokens)
            + len(self.tiers)
        )
