"""The Mixed workload (paper §5.1, §5.3): tool calling, long-document QA and programming problems.

Owns ``make_mixed`` and the numbers that shape it (``MixedParams``; sources and reasoning are in
``sim/workloads/README.md``). Must not read datasets: it reproduces the prefix-sharing structure
of ToolBench, LooGLE and APPS from their published statistics, vectorised (no per-token Python).

Prompt layout (every shared segment is a whole number of blocks; ids are prefix-closed)::

    TOOL   (50%): [tenant system prompt][agent preamble][tool set t ~ Zipf][user query]
    DOC_QA  (5%): [tenant system prompt][document d ~ Zipf][question]
    CODE   (45%): [tenant system prompt][few-shot prefix of difficulty k][problem]

The tenant system prompt is private to the tenant, so shared content is shared only within a
tenant, as when 50 tenants each replay the workload (§5.3). A shared segment's ids are drawn per
(tenant, item): the same tool set under two tenants has different ids, which keeps every block id
naming its whole prefix. The last segment is fresh per request.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from kvcompass.errors import InvalidInputError
from sim.workloads.regions import assign_regions
from sim.workloads.sampling import (
    check_block_tokens,
    check_common,
    concat_ranges,
    fresh_ranges,
    int_lengths,
    lognormal_median,
    poisson_arrivals_ms,
    region_probabilities,
    round_up,
    zipf_choice,
)
from sim.workloads.workload import Kind, Workload


@dataclass(frozen=True, slots=True)
class MixedParams:
    """Every number of the Mixed workload; see the README for where each comes from."""

    n_tenants: int = 50
    share_tool: float = 0.50
    share_doc: float = 0.05
    share_code: float = 0.45
    system_tokens_min: int = 200
    system_tokens_max: int = 800
    tool_preamble_tokens: int = 320
    n_tool_sets: int = 3000
    tool_set_median_tokens: float = 2500.0
    tool_set_sigma: float = 0.4
    tool_set_min_tokens: int = 1000
    tool_set_max_tokens: int = 8000
    tool_zipf_s: float = 1.0
    query_median_tokens: float = 80.0
    query_sigma: float = 0.5
    tool_output_median_tokens: float = 150.0
    tool_output_sigma: float = 0.6
    n_documents: int = 776
    doc_median_tokens: float = 18000.0
    doc_sigma: float = 0.35
    doc_min_tokens: int = 10000
    doc_max_tokens: int = 30000
    doc_zipf_s: float = 1.0
    question_median_tokens: float = 40.0
    question_sigma: float = 0.4
    doc_output_median_tokens: float = 64.0
    doc_output_sigma: float = 0.7
    n_difficulties: int = 3
    fewshot_min_tokens: int = 1024
    fewshot_max_tokens: int = 2048
    problem_median_tokens: float = 700.0
    problem_sigma: float = 0.3
    problem_min_tokens: int = 500
    problem_max_tokens: int = 1000
    code_output_median_tokens: float = 300.0
    code_output_sigma: float = 0.6
    max_output_tokens: int = 4096

    def __post_init__(self) -> None:
        shares = (self.share_tool, self.share_doc, self.share_code)
        if min(shares) < 0 or abs(sum(shares) - 1.0) > 1e-9:
            raise InvalidInputError(f"shares: expected non-negative, summing to 1, got {shares}")
        for name in ("n_tenants", "n_tool_sets", "n_documents", "n_difficulties"):
            if getattr(self, name) < 1:
                raise InvalidInputError(f"{name}: expected >= 1, got {getattr(self, name)}")


def make_mixed(
    n_requests: int,
    rate_per_s: float,
    n_regions: int,
    region_weights: NDArray[np.float64] | None,
    rng: np.random.Generator,
    *,
    block_tokens: int = 16,
    params: MixedParams | None = None,
) -> Workload:
    """Generate ``n_requests`` Mixed requests with Poisson arrivals at ``rate_per_s``.

    Each request's origin region is drawn independently, proportional to ``region_weights``
    (``None``: uniform). Kind codes: ``Kind.TOOL``, ``Kind.DOC_QA``, ``Kind.CODE``; ``tenant`` is
    in ``[0, params.n_tenants)``.
    """
    check_common(n_requests, rate_per_s, n_regions)
    p = params if params is not None else MixedParams()
    bt = check_block_tokens(block_tokens)
    n = int(n_requests)
    probs = region_probabilities(n_regions, region_weights)

    # Per-tenant / per-item content, drawn once (all lengths are whole blocks).
    t_n, ts_n, d_n, k_n = p.n_tenants, p.n_tool_sets, p.n_documents, p.n_difficulties
    sys_b = round_up(rng.integers(p.system_tokens_min, p.system_tokens_max + 1, t_n), bt) // bt
    pre_b = -(-p.tool_preamble_tokens // bt)
    tool_b = (
        round_up(
            int_lengths(
                lognormal_median(p.tool_set_median_tokens, p.tool_set_sigma, ts_n, rng),
                p.tool_set_min_tokens,
                p.tool_set_max_tokens,
            ),
            bt,
        )
        // bt
    )
    doc_b = (
        round_up(
            int_lengths(
                lognormal_median(p.doc_median_tokens, p.doc_sigma, d_n, rng),
                p.doc_min_tokens,
                p.doc_max_tokens,
            ),
            bt,
        )
        // bt
    )
    fs_b = round_up(rng.integers(p.fewshot_min_tokens, p.fewshot_max_tokens + 1, k_n), bt) // bt

    # Id space: [sys | preamble x tenant | few-shot x tenant | tool sets x tenant | docs x tenant
    # | fresh per-request ids].
    sys_start = fresh_ranges(sys_b, 0)
    pre0 = int(sys_b.sum())
    fs0 = pre0 + t_n * pre_b
    fs_start, fs_total = fresh_ranges(fs_b, 0), int(fs_b.sum())
    tool0 = fs0 + t_n * fs_total
    tool_start, tool_total = fresh_ranges(tool_b, 0), int(tool_b.sum())
    doc0 = tool0 + t_n * tool_total
    doc_start, doc_total = fresh_ranges(doc_b, 0), int(doc_b.sum())
    fresh0 = doc0 + t_n * doc_total

    # Per-request draws.
    cdf = np.cumsum([p.share_tool, p.share_doc, p.share_code])
    kind = np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), 2).astype(np.int8)
    tenant = rng.integers(0, t_n, n).astype(np.int64)
    region = assign_regions(n, probs, rng)
    is_tool, is_doc, is_code = kind == Kind.TOOL, kind == Kind.DOC_QA, kind == Kind.CODE
    tool_id = zipf_choice(ts_n, p.tool_zipf_s, n, rng)
    doc_id = zipf_choice(d_n, p.doc_zipf_s, n, rng)
    level = rng.integers(0, k_n, n)

    tail = np.where(
        is_tool,
        int_lengths(lognormal_median(p.query_median_tokens, p.query_sigma, n, rng), 8, 1024),
        np.where(
            is_doc,
            int_lengths(
                lognormal_median(p.question_median_tokens, p.question_sigma, n, rng), 8, 512
            ),
            int_lengths(
                lognormal_median(p.problem_median_tokens, p.problem_sigma, n, rng),
                p.problem_min_tokens,
                p.problem_max_tokens,
            ),
        ),
    )
    out_median = np.where(
        is_tool,
        p.tool_output_median_tokens,
        np.where(is_doc, p.doc_output_median_tokens, p.code_output_median_tokens),
    )
    out_sigma = np.where(
        is_tool, p.tool_output_sigma, np.where(is_doc, p.doc_output_sigma, p.code_output_sigma)
    )
    output_len = int_lengths(
        np.exp(np.log(out_median) + out_sigma * rng.standard_normal(n)), 1, p.max_output_tokens
    )

    starts = np.zeros((n, 4), dtype=np.int64)
    counts = np.zeros((n, 4), dtype=np.int64)
    starts[:, 0], counts[:, 0] = sys_start[tenant], sys_b[tenant]
    starts[:, 1] = np.where(
        is_tool, pre0 + tenant * pre_b, fs0 + tenant * fs_total + fs_start[level]
    )
    counts[:, 1] = np.where(is_tool, pre_b, np.where(is_code, fs_b[level], 0))
    starts[:, 2] = np.where(
        is_tool,
        tool0 + tenant * tool_total + tool_start[tool_id],
        doc0 + tenant * doc_total + doc_start[doc_id],
    )
    counts[:, 2] = np.where(is_tool, tool_b[tool_id], np.where(is_doc, doc_b[doc_id], 0))
    counts[:, 3] = -(-tail // bt)
    starts[:, 3] = fresh_ranges(counts[:, 3], fresh0)
    block_ids, block_offsets = concat_ranges(starts, counts)
    prompt_len = counts[:, :3].sum(axis=1) * bt + tail

    return Workload(
        name="mixed",
        block_tokens=bt,
        arrival_ms=poisson_arrivals_ms(n, rate_per_s, rng),
        origin_region=region,
        prompt_len=prompt_len.astype(np.int64),
        output_len=output_len,
        block_ids=block_ids,
        block_offsets=block_offsets,
        tenant=tenant.astype(np.int32),
        kind=kind,
    )
