"""Deployments from real geography: the site table, the distance, the latency model, the
built-in cloud-4096x64 as the generator's output."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvcompass import geography as g
from kvcompass.deployment import Deployment, builtin_deployment
from kvcompass.errors import ConfigError

# paper-64x8's regions (AWS codes in its deployments/README table) -> our sites
PAPER_64X8 = {
    "us": "aws-us-east-1",
    "cn": "aws-ap-east-1",
    "de": "aws-eu-central-1",
    "jp": "aws-ap-northeast-1",
    "sg": "aws-ap-southeast-1",
    "uk": "aws-eu-west-2",
    "kr": "aws-ap-northeast-2",
    "au": "aws-ap-southeast-2",
}


def test_sites__64_distinct_cities_and_names() -> None:
    assert len(g.SITES) == 64
    assert len({s.code for s in g.SITES}) == len({s.region_name for s in g.SITES}) == 64
    assert len({(s.lat, s.lon) for s in g.SITES}) == 64
    assert all(-90 <= s.lat <= 90 and -180 <= s.lon <= 180 for s in g.SITES)


def test_great_circle__quarter_meridian_and_a_known_pair() -> None:
    assert g.great_circle_km(0, 0, 90, 0) == pytest.approx(math.pi / 2 * g.EARTH_RADIUS_KM)
    assert g.great_circle_km(10, 20, 10, 20) == 0.0
    # London -> Ashburn (Washington Dulles area): about 5,900 km
    assert 5800 < g.great_circle_km(51.51, -0.13, 39.04, -77.49) < 6000


def test_one_way__fibre_speed_times_route_inflation_plus_metro_floor() -> None:
    assert g.one_way_ms(0.0) == g.METRO_ONE_WAY_MS
    assert g.one_way_ms(2000.0) == pytest.approx(1.0 + 1.5 * 2000 / 200)
    with pytest.raises(ConfigError, match="distance"):
        g.one_way_ms(-1.0)


def test_model__against_the_cloudping_derived_pairs_of_paper_64x8() -> None:
    """The model's error on the 28 measured-derived pairs (deployments/README states it)."""
    paper = builtin_deployment("paper-64x8")
    site = {s.code: s for s in g.SITES}
    err = []
    for i, a in enumerate(paper.regions):
        for j, b in enumerate(paper.regions[i + 1 :], start=i + 1):
            x, y = site[PAPER_64X8[a.name]], site[PAPER_64X8[b.name]]
            model = g.one_way_ms(g.great_circle_km(x.lat, x.lon, y.lat, y.lon))
            err.append(model - paper.wan_one_way_ms[i][j])
    e = np.array(err)
    assert len(e) == 28
    assert float(np.sqrt((e**2).mean())) < 20.0  # 19.3 ms; paper-128x16's own fit: 17.8 ms


def test_cloud_deployment__even_split_symmetric_wan() -> None:
    d = g.cloud_deployment(100, 8)
    assert [r.n_workers for r in d.regions] == [13, 13, 13, 13, 12, 12, 12, 12]
    m = d.wan_matrix_ms
    assert (m == m.T).all() and (np.diag(m) == 0).all()
    assert m[~np.eye(8, dtype=bool)].min() >= g.METRO_ONE_WAY_MS
    with pytest.raises(ConfigError, match="regions"):
        g.cloud_deployment(4096, 65)
    with pytest.raises(ConfigError, match="workers"):
        g.cloud_deployment(3, 4)


def test_builtin_cloud_4096x64__is_the_generators_output() -> None:
    built = builtin_deployment("cloud-4096x64")
    assert built == g.cloud_deployment(4096, 64)
    assert built.n_workers == 4096 and built.n_regions == 64
    assert Deployment.from_toml_text(g.deployment_toml(built)) == built
