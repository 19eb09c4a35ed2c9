"""Deployments from real geography: public cloud region sites -> great circle -> WAN latency.

Owns the table of public cloud region sites (``SITES``: provider region code, city, latitude and
longitude of the city the provider names, rounded to 0.01°; written by hand from the providers'
public region lists, not fetched), the great-circle distance, the one-way latency model and the
generator of large deployments (``cloud_deployment``; the built-in ``cloud-4096x64`` is its
output, ``kvcompass/data/deployments/cloud-4096x64.toml``, and a test keeps the two equal).
Must not read files, the network or the clock.

Latency model (``one_way_ms``)::

    one_way_ms = METRO_ONE_WAY_MS + ROUTE_INFLATION * distance_km / FIBRE_KM_PER_MS

* ``FIBRE_KM_PER_MS`` = 200: light in silica fibre travels at c / n with n ≈ 1.47, about
  204 km/ms (≈ 2/3 of c), the usual 200 km/ms rule of thumb.
* ``ROUTE_INFLATION`` = 1.5: fibre does not follow the great circle. Singla et al., "The
  Internet at the Speed of Light" (HotNets 2014), measure Internet paths at a median of about
  3× the c-latency of the great circle, of which the 1.5× of fibre's refractive index leaves
  ≈ 1.5–2× for the route itself; cloud backbones sit at the low end: this repository's own
  least-squares fit of the CloudPing AWS pairs of ``paper-64x8`` (``paper-128x16``'s source)
  has a slope of 7.346 ms per 1000 km, i.e. 1.47× the 5 ms per 1000 km of straight fibre.
* ``METRO_ONE_WAY_MS`` = 1.0: our assumption for switching, the last kilometres and two
  providers' sites in one metro (Ashburn, Frankfurt, Tokyo host several): never 0 between two
  regions.

Against the 28 CloudPing-derived one-way values of ``paper-64x8`` the model's error is stated
in deployments/README.md (``tests/unit/kvcompass/test_geography.py`` recomputes it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass.deployment import Deployment, Region
from kvcompass.errors import ConfigError

EARTH_RADIUS_KM = 6371.0
FIBRE_KM_PER_MS = 200.0
ROUTE_INFLATION = 1.5
METRO_ONE_WAY_MS = 1.0
A100_PREFILL_MS_PER_TOKEN = 0.086
"""β of the simulated A100 workers (``paper-64x8``'s derivation, deployments/README.md)."""


@dataclass(frozen=True, slots=True)
class Site:
    """One public cloud region: its provider code, the city it is named after, that city's
    country (ISO 3166 alpha-2, but UK for GB as elsewhere in the project) and coordinates."""

    code: str
    city: str
    country: str
    lat: float
    lon: float

    @property
    def region_name(self) -> str:
        """The deployment's region name: ISO country code and city, e.g. ``us-ashburn`` (the
        country prefix is what ``sim.workloads.regions`` reads for population weights)."""
        return f"{self.country.lower()}-{self.city.lower().replace(' ', '-')}"


SITES: tuple[Site, ...] = (
    # AWS
    Site("aws-us-east-1", "Ashburn", "US", 39.04, -77.49),
    Site("aws-us-east-2", "Columbus", "US", 39.96, -83.00),
    Site("aws-us-west-1", "San Francisco", "US", 37.77, -122.42),
    Site("aws-us-west-2", "Boardman", "US", 45.84, -119.70),
    Site("aws-ca-central-1", "Montreal", "CA", 45.50, -73.57),
    Site("aws-ca-west-1", "Calgary", "CA", 51.05, -114.07),
    Site("aws-mx-central-1", "Queretaro", "MX", 20.59, -100.39),
    Site("aws-sa-east-1", "Sao Paulo", "BR", -23.55, -46.63),
    Site("aws-eu-west-1", "Dublin", "IE", 53.35, -6.26),
    Site("aws-eu-west-2", "London", "UK", 51.51, -0.13),
    Site("aws-eu-west-3", "Paris", "FR", 48.86, 2.35),
    Site("aws-eu-central-1", "Frankfurt", "DE", 50.11, 8.68),
    Site("aws-eu-central-2", "Zurich", "CH", 47.37, 8.54),
    Site("aws-eu-north-1", "Stockholm", "SE", 59.33, 18.07),
    Site("aws-eu-south-1", "Milan", "IT", 45.46, 9.19),
    Site("aws-eu-south-2", "Zaragoza", "ES", 41.65, -0.88),
    Site("aws-il-central-1", "Tel Aviv", "IL", 32.09, 34.78),
    Site("aws-me-south-1", "Bahrain", "BH", 26.07, 50.55),
    Site("aws-me-central-1", "Dubai", "AE", 25.20, 55.27),
    Site("aws-af-south-1", "Cape Town", "ZA", -33.92, 18.42),
    Site("aws-ap-south-1", "Mumbai", "IN", 19.08, 72.88),
    Site("aws-ap-south-2", "Hyderabad", "IN", 17.39, 78.49),
    Site("aws-ap-east-1", "Hong Kong", "HK", 22.32, 114.17),
    Site("aws-ap-southeast-1", "Singapore", "SG", 1.35, 103.82),
    Site("aws-ap-southeast-3", "Jakarta", "ID", -6.21, 106.85),
    Site("aws-ap-southeast-2", "Sydney", "AU", -33.87, 151.21),
    Site("aws-ap-southeast-4", "Melbourne", "AU", -37.81, 144.96),
    Site("aws-ap-northeast-1", "Tokyo", "JP", 35.68, 139.69),
    Site("aws-ap-northeast-2", "Seoul", "KR", 37.57, 126.98),
    Site("aws-ap-northeast-3", "Osaka", "JP", 34.69, 135.50),
    Site("aws-cn-north-1", "Beijing", "CN", 39.90, 116.40),
    Site("aws-cn-northwest-1", "Zhongwei", "CN", 37.51, 105.19),
    # Google Cloud and Microsoft Azure: cities no region above is named after
    Site("gcp-us-central1", "Council Bluffs", "US", 41.26, -95.86),
    Site("gcp-us-east1", "Moncks Corner", "US", 33.20, -80.01),
    Site("gcp-us-west2", "Los Angeles", "US", 34.05, -118.24),
    Site("gcp-us-west3", "Salt Lake City", "US", 40.76, -111.89),
    Site("gcp-us-south1", "Dallas", "US", 32.78, -96.80),
    Site("gcp-northamerica-northeast2", "Toronto", "CA", 43.65, -79.38),
    Site("az-brazilsoutheast", "Rio de Janeiro", "BR", -22.91, -43.17),
    Site("gcp-europe-west12", "Turin", "IT", 45.07, 7.69),
    Site("gcp-europe-west4", "Eemshaven", "NL", 53.44, 6.83),
    Site("az-westeurope", "Amsterdam", "NL", 52.37, 4.90),
    Site("az-switzerlandwest", "Geneva", "CH", 46.20, 6.14),
    Site("gcp-europe-southwest1", "Madrid", "ES", 40.42, -3.70),
    Site("gcp-asia-east1", "Changhua", "TW", 24.08, 120.54),
    Site("gcp-asia-south2", "Delhi", "IN", 28.61, 77.21),
    Site("az-uaecentral", "Abu Dhabi", "AE", 24.45, 54.38),
    Site("gcp-africa-south1", "Johannesburg", "ZA", -26.20, 28.05),
    Site("az-eastus2", "Boydton", "US", 36.67, -78.39),
    Site("az-northcentralus", "Chicago", "US", 41.88, -87.63),
    Site("az-centralus", "Des Moines", "US", 41.59, -93.62),
    Site("az-southcentralus", "San Antonio", "US", 29.42, -98.49),
    Site("az-westus2", "Quincy", "US", 47.23, -119.85),
    Site("az-westus3", "Phoenix", "US", 33.45, -112.07),
    Site("az-canadaeast", "Quebec City", "CA", 46.81, -71.21),
    Site("az-ukwest", "Cardiff", "UK", 51.48, -3.18),
    Site("az-francesouth", "Marseille", "FR", 43.30, 5.37),
    Site("az-germanynorth", "Berlin", "DE", 52.52, 13.40),
    Site("az-koreasouth", "Busan", "KR", 35.18, 129.08),
    Site("az-swedencentral", "Gavle", "SE", 60.67, 17.14),
    Site("az-centralindia", "Pune", "IN", 18.52, 73.86),
    Site("az-southindia", "Chennai", "IN", 13.08, 80.27),
    Site("az-australiacentral", "Canberra", "AU", -35.28, 149.13),
    Site("az-chinaeast2", "Shanghai", "CN", 31.23, 121.47),
)


def great_circle_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in km on a sphere of ``EARTH_RADIUS_KM`` (haversine form)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    h = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2.0 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(h)))


def one_way_ms(distance_km: float) -> float:
    """One-way WAN latency between two distinct regions ``distance_km`` apart (module docstring)."""
    if not math.isfinite(distance_km) or distance_km < 0:
        raise ConfigError(f"distance: expected a finite number >= 0 km, got {distance_km}")
    return METRO_ONE_WAY_MS + ROUTE_INFLATION * distance_km / FIBRE_KM_PER_MS


def wan_matrix_ms(sites: tuple[Site, ...]) -> NDArray[np.float64]:
    """(R, R) one-way latency between the sites, rounded to 0.1 ms, zero diagonal."""
    n = len(sites)
    out = np.zeros((n, n), dtype=np.float64)
    for i in range(n):
        for j in range(i + 1, n):
            a, b = sites[i], sites[j]
            ms = round(one_way_ms(great_circle_km(a.lat, a.lon, b.lat, b.lon)), 1)
            out[i, j] = out[j, i] = ms
    return out


def cloud_deployment(
    n_workers: int,
    n_regions: int,
    *,
    prefill_ms_per_token: float = A100_PREFILL_MS_PER_TOKEN,
    name: str | None = None,
) -> Deployment:
    """``n_workers`` split evenly (the first regions get one more) over the first ``n_regions``
    sites of ``SITES``, the WAN from the latency model; block size, levels and in-region hop
    as the paper deployments (16 tokens, 6 levels, 128-token same-region minimum, 0.5 ms)."""
    if not 1 <= n_regions <= len(SITES):
        raise ConfigError(f"regions: expected 1..{len(SITES)} (the sites known), got {n_regions}")
    if n_workers < n_regions:
        raise ConfigError(f"workers: expected >= regions ({n_regions}), got {n_workers}")
    sites = SITES[:n_regions]
    sizes = [n_workers // n_regions + (r < n_workers % n_regions) for r in range(n_regions)]
    regions = tuple(
        Region(s.region_name, k, prefill_ms_per_token) for s, k in zip(sites, sizes, strict=True)
    )
    wan = wan_matrix_ms(sites)
    return Deployment(
        name=name or f"cloud-{n_workers}x{n_regions}",
        regions=regions,
        wan_one_way_ms=tuple(tuple(float(x) for x in row) for row in wan),
        in_region_one_way_ms=0.5,
        source=source_text(sites, prefill_ms_per_token),
    )


def source_text(sites: tuple[Site, ...], beta: float) -> str:
    """The ``source`` field of a generated deployment: where every number comes from."""
    where = ", ".join(f"{s.region_name} = {s.code} {s.city} {s.lat:.2f},{s.lon:.2f}" for s in sites)
    return (
        "Generated by kvcompass.geography.cloud_deployment (regenerate, do not edit). Regions: "
        "public cloud regions (AWS, Google Cloud, Azure) at the city each is named after "
        f"(lat,lon): {where}. WAN one-way ms = {METRO_ONE_WAY_MS} + {ROUTE_INFLATION} x "
        f"great-circle km / {FIBRE_KM_PER_MS} km/ms (light in fibre ~200 km/ms; route "
        "inflation 1.5x over the great circle: Singla et al., HotNets 2014, and the CloudPing "
        "fit of paper-128x16, 7.346 ms per 1000 km; 1 ms metro floor, our assumption), rounded "
        f"to 0.1 ms. Workers split evenly. Prefill {beta} ms/token per worker (A100-80GB, "
        "Llama-3.1-8B BF16, paper-64x8's derivation)."
    )


def deployment_toml(dep: Deployment) -> str:
    """``dep`` as the TOML text of a deployment file (``Deployment.from_toml_text`` reads it
    back equal): how ``cloud-4096x64.toml`` was written."""
    lines = [
        f"# {dep.n_workers} workers in {dep.n_regions} public cloud regions "
        "(kvcompass.geography.cloud_deployment).",
        f'name = "{dep.name}"',
        f"block_size_tokens = {dep.block_size_tokens}",
        f"n_levels = {dep.n_levels}",
        f"same_region_min_tokens = {dep.same_region_min_tokens}",
        f"in_region_one_way_ms = {dep.in_region_one_way_ms}",
        f'source = """\n{dep.source}"""',
        "# one-way ms, rows and columns in region order",
        "wan_one_way_ms = [",
    ]
    for region, row in zip(dep.regions, dep.wan_one_way_ms, strict=True):
        lines.append("  [" + ", ".join(f"{x:.1f}" for x in row) + f"],  # {region.name}")
    lines.append("]")
    for r in dep.regions:
        lines += [
            "",
            "[[regions]]",
            f'name = "{r.name}"',
            f"n_workers = {r.n_workers}",
            f"prefill_ms_per_token = {r.prefill_ms_per_token}",
        ]
    return "\n".join(lines) + "\n"
