"""Deployment descriptions: validation, worker numbering, dict/TOML round trip, built-ins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvcompass.deployment import (
    Deployment,
    Region,
    builtin_deployment,
    builtin_deployment_names,
)
from kvcompass.errors import ConfigError
from wire.deployments import load_deployment


def _dep(**over: Any) -> Deployment:
    kw: dict[str, Any] = {
        "name": "t",
        "regions": (Region("a", 2, 0.1), Region("b", 3, 0.2), Region("c", 1, 0.1)),
        "wan_one_way_ms": ((0, 10, 20), (10, 0, 30), (20, 30, 0)),
    }
    kw.update(over)
    return Deployment(**kw)


def test_workers__numbered_region_by_region() -> None:
    d = _dep()
    assert d.n_regions == 3 and d.n_workers == 6
    assert d.worker_region.tolist() == [0, 0, 1, 1, 1, 2]
    assert d.worker_offsets.tolist() == [0, 2, 5, 6]
    assert d.workers_of("b").tolist() == [2, 3, 4]
    assert d.workers_of(2).tolist() == [5]
    assert d.region_index("c") == 2


def test_rtt__twice_one_way__zero_in_region() -> None:
    d = _dep()
    assert d.rtt_ms(0, 2) == 40.0 and d.rtt_ms("b", "c") == 60.0 and d.rtt_ms(1, 1) == 0.0
    assert d.wan_matrix_ms.shape == (3, 3)
    assert d.prefill_ms_per_token.tolist() == [0.1, 0.2, 0.1]


def test_lists__normalised_to_tuples__value_is_hashable() -> None:
    d = _dep(regions=[Region("a", 1, 0.1)], wan_one_way_ms=[[0]])
    assert isinstance(d.regions, tuple) and d.wan_one_way_ms == ((0.0,),)
    assert hash(d) == hash(_dep(regions=(Region("a", 1, 0.1),), wan_one_way_ms=((0.0,),)))


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        ({"wan_one_way_ms": ((0, 10), (10, 0))}, "3x3"),
        ({"wan_one_way_ms": ((0, 10, 20), (11, 0, 30), (20, 30, 0))}, "symmetric"),
        ({"wan_one_way_ms": ((0, -1, 20), (-1, 0, 30), (20, 30, 0))}, "non-negative"),
        ({"wan_one_way_ms": ((1, 10, 20), (10, 0, 30), (20, 30, 0))}, "expected 0"),
        ({"wan_one_way_ms": ((0, float("nan"), 20), (10, 0, 30), (20, 30, 0))}, "finite"),
        ({"regions": (Region("a", 1, 0.1), Region("a", 1, 0.1), Region("c", 1, 0.1))}, "unique"),
        ({"regions": ()}, "non-empty"),
        ({"block_size_tokens": 0}, "block_size_tokens"),
        ({"n_levels": True}, "n_levels"),
        ({"same_region_min_tokens": 1.5}, "same_region_min_tokens"),
        ({"in_region_one_way_ms": -0.1}, "in_region_one_way_ms"),
        ({"name": ""}, "name"),
    ],
)
def test_deployment__rejects_inconsistent_config(over: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError, match="expected") as info:
        _dep(**over)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "args", [("", 1, 0.1), ("a", 0, 0.1), ("a", 1, 0.0), ("a", 1, -1.0), ("a", 1, float("inf"))]
)
def test_region__rejects_bad_fields(args: tuple[Any, ...]) -> None:
    with pytest.raises(ConfigError, match="expected"):
        Region(*args)


def test_region_lookup__unknown_name_or_index__config_error() -> None:
    d = _dep()
    with pytest.raises(ConfigError, match="one of"):
        d.region_index("zz")
    with pytest.raises(ConfigError, match=r"\[0, 3\)"):
        d.workers_of(3)


def test_dict__round_trips() -> None:
    d = _dep(source="why", in_region_one_way_ms=0.5, n_levels=4)
    assert Deployment.from_dict(d.to_dict()) == d


def test_from_dict__rejects_unknown_and_missing_keys() -> None:
    data = _dep().to_dict()
    with pytest.raises(ConfigError, match="unknown \\['blocksize'\\]"):
        Deployment.from_dict({**data, "blocksize": 16})
    with pytest.raises(ConfigError, match="missing \\['wan_one_way_ms'\\]"):
        Deployment.from_dict({k: v for k, v in data.items() if k != "wan_one_way_ms"})
    bad_region = {**data, "regions": [{"name": "a", "n_workers": 1}]}
    with pytest.raises(ConfigError, match=r"regions\[0\]"):
        Deployment.from_dict(bad_region)


def test_from_toml_text__parses_the_documented_layout() -> None:
    text = """
name = "x"
n_levels = 3
wan_one_way_ms = [[0, 5], [5, 0]]
[[regions]]
name = "p"
n_workers = 2
prefill_ms_per_token = 0.1
[[regions]]
name = "q"
n_workers = 1
prefill_ms_per_token = 0.2
"""
    d = Deployment.from_toml_text(text)
    assert d.n_levels == 3 and d.block_size_tokens == 16 and d.n_workers == 3
    assert d.rtt_ms("p", "q") == 10.0


def test_from_toml_text__invalid_toml__config_error() -> None:
    with pytest.raises(ConfigError, match="valid TOML"):
        Deployment.from_toml_text("name = ")


def test_builtins__all_four_load_with_the_papers_numbers() -> None:
    names = builtin_deployment_names()
    assert names == [
        "cloud-4096x64",
        "paper-128x16",
        "paper-64x8",
        "paper-na-11x4",
        "paper-testbed-14x3",
    ]
    tb = builtin_deployment("paper-testbed-14x3")
    assert [(r.name, r.n_workers) for r in tb.regions] == [("us", 8), ("eu", 2), ("asia", 4)]
    assert tb.wan_one_way_ms[0][1] == 160 and tb.wan_one_way_ms[0][2] == 126
    assert tb.wan_one_way_ms[1][2] == 149
    assert all(r.prefill_ms_per_token == 0.085 for r in tb.regions)
    na = builtin_deployment("paper-na-11x4")
    assert [r.n_workers for r in na.regions] == [2, 4, 1, 4]
    m = na.wan_matrix_ms
    assert m[:3, :3][~np.eye(3, dtype=bool)].min() == 5.8
    assert m[:3, :3].max() == 16.6
    assert m[3, :3].min() == 24.9 and m[3].max() == 37.4
    d64 = builtin_deployment("paper-64x8")
    assert d64.n_workers == 64 and d64.n_regions == 8
    assert [r.n_workers for r in d64.regions][:3] == [30, 13, 8]
    d128 = builtin_deployment("paper-128x16")
    assert d128.n_workers == 128 and d128.n_regions == 16
    assert all(2 <= r.n_workers <= 7 for r in d128.regions[7:])
    for d in (tb, na, d64, d128):
        assert d.source.strip(), d.name


def test_builtin__unknown_name__lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="paper-testbed-14x3"):
        builtin_deployment("nope")


def test_builtin_128x16__reuses_the_64x8_matrix_for_shared_regions() -> None:
    d64 = builtin_deployment("paper-64x8")
    d128 = builtin_deployment("paper-128x16")
    idx = [d128.region_index(n) for n in ("us-east", "cn", "de", "jp", "sg", "uk", "kr", "au")]
    assert np.array_equal(d128.wan_matrix_ms[np.ix_(idx, idx)], d64.wan_matrix_ms)


def test_load_deployment__by_name_or_path(tmp_path: Path) -> None:
    assert load_deployment("paper-na-11x4") == builtin_deployment("paper-na-11x4")
    p = tmp_path / "site.toml"
    p.write_text(
        'name = "site"\nwan_one_way_ms = [[0]]\n'
        '[[regions]]\nname = "x"\nn_workers = 1\nprefill_ms_per_token = 0.1\n'
    )
    assert load_deployment(p).name == "site"
    assert load_deployment(str(p)).n_workers == 1
    with pytest.raises(ConfigError, match="readable"):
        load_deployment(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="built-in name"):
        load_deployment("no-such-deployment")
