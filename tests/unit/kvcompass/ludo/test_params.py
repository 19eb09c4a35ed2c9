"""LudoParams: sizing, array round trip, validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvcompass.errors import InvalidInputError
from kvcompass.ludo import LudoParams, PatchKind
from kvcompass.ludo.params import (
    P_BUCKET_SEED,
    P_BUCKETS,
    P_EPOCH,
    P_FP_BITS,
    P_FP_SEED,
    P_LOCATOR_SEED,
    P_MA,
    P_MB,
    P_SLOT_SEED,
    P_VALUE_BITS,
    PARAMS_LEN,
)


def test_for_capacity__sizes_follow_the_reference_formulas() -> None:
    p = LudoParams.for_capacity(1_000_000, rng=np.random.default_rng(1))
    mb = math.ceil(1_000_000 / 0.95)
    assert p.locator_b_cells == mb
    assert p.locator_a_cells == math.ceil(1.33334 * mb)
    assert p.n_buckets == math.ceil(1_000_000 / 0.95 / 4) + 2
    assert p.n_locator_words == math.ceil((p.locator_a_cells + mb) / 64)
    assert (p.value_words, p.fp_bytes, p.epoch) == (1, 1, 0)


def test_to_array__round_trips_with_documented_order() -> None:
    p = LudoParams.for_capacity(
        100, value_bits=64, fp_bits=16, rng=np.random.default_rng(2), epoch=3
    )
    a = p.to_array()
    assert a.dtype == np.uint64 and a.shape == (10,)
    assert [int(a[0]), int(a[1]), int(a[4]), int(a[5]), int(a[7])] == [
        3,
        p.n_buckets,
        64,
        16,
        p.locator_seed,
    ]
    assert LudoParams.from_array(a) == p


def test_p_names__index_their_field_in_to_array() -> None:
    p = LudoParams(1, 2, 3, 4, 64, 16, bucket_seed=7, locator_seed=8, slot_seed=9, fp_seed=10)
    a = p.to_array()
    named = [
        (P_EPOCH, "epoch"),
        (P_BUCKETS, "n_buckets"),
        (P_MA, "locator_a_cells"),
        (P_MB, "locator_b_cells"),
        (P_VALUE_BITS, "value_bits"),
        (P_FP_BITS, "fp_bits"),
        (P_BUCKET_SEED, "bucket_seed"),
        (P_LOCATOR_SEED, "locator_seed"),
        (P_SLOT_SEED, "slot_seed"),
        (P_FP_SEED, "fp_seed"),
    ]
    assert sorted(i for i, _ in named) == list(range(PARAMS_LEN))
    assert all(int(a[i]) == getattr(p, name) for i, name in named)


def test_with_locator_seed__changes_only_that_seed() -> None:
    p = LudoParams.for_capacity(100, rng=np.random.default_rng(3))
    q = p.with_locator_seed(42)
    assert q.locator_seed == 42
    assert (
        q.to_array()[[0, 1, 2, 3, 4, 5, 6, 8, 9]].tolist()
        == p.to_array()[[0, 1, 2, 3, 4, 5, 6, 8, 9]].tolist()
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("value_bits", 16),
        ("fp_bits", 4),
        ("n_buckets", 0),
        ("bucket_seed", 1 << 64),
        ("epoch", -1),
        ("locator_a_cells", 0),
    ],
)
def test_params__invalid_field_raises(field: str, value: int) -> None:
    good = LudoParams.for_capacity(10, rng=np.random.default_rng(0))
    fields = {f: getattr(good, f) for f in good.__dataclass_fields__}
    fields[field] = value
    with pytest.raises(InvalidInputError, match=field):
        LudoParams(**fields)


def test_from_array__wrong_dtype_raises() -> None:
    with pytest.raises(InvalidInputError, match="uint64"):
        LudoParams.from_array(np.zeros(10, np.int64))  # type: ignore[arg-type]


def test_for_capacity__zero_capacity_raises() -> None:
    with pytest.raises(InvalidInputError, match="capacity"):
        LudoParams.for_capacity(0, rng=np.random.default_rng(0))


def test_patch_kind__values_are_the_wire_codes() -> None:
    assert [int(k) for k in PatchKind] == [0, 1, 2, 3]
