"""The prefill/decode transfer prices in ``kvcompass.costs``: the KV transfer over a link, and
decode in another region vs prefill again there, at the paper's figures (β = 0.085 ms/token on
the RTX 5090 testbed, §5.2; one-way WAN 126-160 ms there, 5.8-37.4 ms in Appendix B)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcompass import costs

BETA = 0.085
GBPS = 1e9 / 8  # bytes/s in one Gb/s


def test_kv_transfer_ms__latency_plus_bytes_over_bandwidth() -> None:
    # 1,000 tokens x 128 KiB over 12.5 GB/s = 10.49 ms, + 5 ms one way
    got = costs.kv_transfer_ms(1000, 12.5e9, 5.0)
    assert got == pytest.approx(5.0 + 1000 * 131072 / 12.5e9 * 1e3)
    assert costs.kv_transfer_ms(0, 1e9, 7.0) == 7.0


@pytest.mark.parametrize(("tokens", "bw", "ow"), [(-1, 1e9, 0.0), (1, 0.0, 0.0), (1, 1e9, -1.0)])
def test_kv_transfer_ms__bad_input_is_a_clear_error(tokens: int, bw: float, ow: float) -> None:
    with pytest.raises(ValueError, match="kv_transfer_ms"):
        costs.kv_transfer_ms(tokens, bw, ow)


def test_cross_region_decode__public_internet_never_pays() -> None:
    # Paper §3.5: below s/β (131072 B / 0.085 ms = 12.3 Gb/s) recomputing beats moving KV.
    for gbps in (1.0, 10.0):
        for one_way in (5.8, 37.4, 126.0, 149.0, 160.0):
            assert costs.cross_region_break_even_tokens(BETA, gbps * GBPS, one_way) is None
    # a 4,096-token prompt fully cached in A, cold in B, 1 Gb/s and 149 ms (EU-Asia, §5.2)
    cross = costs.cross_region_decode_ms(4096, 4096, BETA, 1 * GBPS, 149.0)
    local = costs.reprefill_at_decode_ms(4096, 0, BETA)
    assert cross == pytest.approx(149.0 + 4096 * 131072 / GBPS * 1e3)
    assert local == pytest.approx(4096 * BETA + 4096 * 131072 / 12.5e9 * 1e3)
    assert cross > 10 * local


def test_cross_region_decode__a_fast_link_pays_past_the_break_even_length() -> None:
    bw, one_way = 100 * GBPS, 160.0
    n = costs.cross_region_break_even_tokens(BETA, bw, one_way)
    assert n is not None and 1800 < n < 1900
    short, long = int(n) - 50, int(n) + 50
    assert costs.cross_region_decode_ms(short, short, BETA, bw, one_way) > (
        costs.reprefill_at_decode_ms(short, 0, BETA)
    )
    assert costs.cross_region_decode_ms(long, long, BETA, bw, one_way) < (
        costs.reprefill_at_decode_ms(long, 0, BETA)
    )


def test_cross_region_decode__what_b_already_holds_counts() -> None:
    # B holding the prompt too: prefilling again in B is only the local transfer
    assert costs.reprefill_at_decode_ms(2048, 2048, BETA) == pytest.approx(
        costs.kv_transfer_ms(2048, costs.INTRA_REGION_BYTES_PER_S)
    )
    # A holding nothing: A recomputes all of it, then pays the WAN on top
    cold = costs.cross_region_decode_ms(2048, 0, BETA, 100 * GBPS, 50.0)
    assert cold == pytest.approx(2048 * BETA + costs.kv_transfer_ms(2048, 100 * GBPS, 50.0))


def test_the_break_even_table_in_docs_is_what_the_functions_say() -> None:
    doc = Path(__file__).resolve().parents[3] / "docs" / "disaggregation.md"
    text = doc.read_text(encoding="utf-8").split("<!-- table:cross-region-break-even -->")[1]
    rows = [ln for ln in text.strip().splitlines() if ln.startswith("|")]
    latencies = [float(c.removesuffix(" ms")) for c in _cells(rows[0])[1:]]
    assert len(rows) == 2 + 5
    for row in rows[2:]:
        cells = _cells(row)
        gbps = float(cells[0].removesuffix(" Gb/s"))
        for cell, one_way in zip(cells[1:], latencies, strict=True):
            n = costs.cross_region_break_even_tokens(BETA, gbps * GBPS, one_way)
            assert cell == ("never" if n is None else f"{n:,.0f}"), (gbps, one_way)


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]
