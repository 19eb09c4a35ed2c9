"""Multi-turn chat workloads shaped like WildChat and LMSYS-Chat-1M (paper §5.1, §2.1).

Owns ``make_wildchat``, ``make_lmsys`` and ``ChatParams`` (two presets; sources in
``sim/workloads/README.md``). Must not read the datasets: it reproduces their published turn and
length statistics and the cross-region sharing of Fig. 2/3, vectorised over turns.

A conversation is one stream of content blocks::

    [tenant system prompt, if tenants][shared prefix p ~ Zipf, with prob. p_shared][own blocks ...]

Turn k's prompt is the first ``L_k`` tokens of the stream, where ``L_1 = P + u_1`` and
``L_k = L_{k-1} + r_{k-1} + u_k`` (P: shared prefix tokens, u: user message, r: reply). So turn
k's prompt is turn k-1's prompt + reply + new message, token for token, and the reply occupies
the stream right after the prompt that produced it. Shared prefixes (popular system prompts and
prompt templates, e.g. role-play or image-prompt templates) are used by conversations from any
region: they carry the cross-region reuse. Everything else is reused only within a conversation
(same user, same region).

Timing: conversations start as a Poisson process; turn k+1 follows turn k after a log-normal
think time. The superposition ramps up from the conversation-start rate, so requests are ranked
by that intended time and then given the times of an exact Poisson process at ``rate_per_s``
(in steady state this shifts intended times by a near-constant; early on it compresses gaps).
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
    lognormal_mean_sd,
    lognormal_median,
    poisson_arrivals_ms,
    region_probabilities,
    round_up,
    zipf_choice,
)
from sim.workloads.workload import Kind, Workload


@dataclass(frozen=True, slots=True)
class ChatParams:
    """Every number of a chat workload; see the README for where each comes from."""

    name: str
    mean_turns: float
    user_mean_tokens: float
    user_sd_tokens: float
    reply_mean_tokens: float
    reply_sd_tokens: float
    p_shared: float
    n_shared_prefixes: int = 2000
    shared_zipf_s: float = 1.0
    shared_median_tokens: float = 1200.0
    shared_sigma: float = 0.5
    shared_min_tokens: int = 512
    shared_max_tokens: int = 8192
    think_median_s: float = 10.0
    think_sigma: float = 1.0
    max_turns: int = 100
    max_user_tokens: int = 16384
    max_reply_tokens: int = 4096
    max_prompt_tokens: int = 32768
    n_tenants: int = 0
    system_tokens_min: int = 200
    system_tokens_max: int = 800

    def __post_init__(self) -> None:
        if self.mean_turns < 1 or not 0 <= self.p_shared <= 1 or self.n_shared_prefixes < 1:
            raise InvalidInputError(
                f"ChatParams: expected mean_turns >= 1, 0 <= p_shared <= 1, n_shared_prefixes "
                f">= 1, got {self.mean_turns}, {self.p_shared}, {self.n_shared_prefixes}"
            )
        if self.max_prompt_tokens <= self.shared_max_tokens + self.system_tokens_max + 16:
            raise InvalidInputError("ChatParams: max_prompt_tokens must exceed the prefixes")


WILDCHAT = ChatParams(
    name="wildchat",
    mean_turns=2.54,
    user_mean_tokens=295.6,
    user_sd_tokens=1609.2,
    reply_mean_tokens=441.3,
    reply_sd_tokens=410.9,
    p_shared=0.075,
)
"""WildChat-1M (Zhao et al., ICLR 2024): longer prompts and replies, more turns."""

LMSYS = ChatParams(
    name="lmsys",
    mean_turns=2.0,
    user_mean_tokens=69.5,
    user_sd_tokens=143.4,
    reply_mean_tokens=214.5,
    reply_sd_tokens=226.6,
    p_shared=0.015,
    shared_median_tokens=800.0,
)
"""LMSYS-Chat-1M (Zheng et al., ICLR 2024): short prompts and replies, about two turns."""


def make_chat(
    n_requests: int,
    rate_per_s: float,
    n_regions: int,
    region_weights: NDArray[np.float64] | None,
    rng: np.random.Generator,
    params: ChatParams,
    *,
    block_tokens: int = 16,
) -> Workload:
    """Generate ``n_requests`` chat turns (see module docstring) in arrival order."""
    check_common(n_requests, rate_per_s, n_regions)
    check_block_tokens(block_tokens)
    probs = region_probabilities(n_regions, region_weights)
    n = int(n_requests)
    n_conv = int(np.ceil(n / params.mean_turns * 1.2)) + 16
    while True:
        w = _build(n, n_conv, rate_per_s, probs, rng, params, block_tokens)
        if w is not None:
            return w
        n_conv *= 2


def _build(
    n: int,
    n_conv: int,
    rate_per_s: float,
    probs: NDArray[np.float64],
    rng: np.random.Generator,
    p: ChatParams,
    bt: int,
) -> Workload | None:
    """One attempt with ``n_conv`` conversations; ``None`` if they cannot fill ``n`` requests."""
    # Per-conversation draws.
    turns = np.minimum(rng.geometric(1.0 / p.mean_turns, n_conv), p.max_turns).astype(np.int64)
    has_shared = rng.random(n_conv) < p.p_shared
    shared_id = zipf_choice(p.n_shared_prefixes, p.shared_zipf_s, n_conv, rng)
    region = assign_regions(n_conv, probs, rng)
    n_ten = max(p.n_tenants, 1)
    tenant = rng.integers(0, n_ten, n_conv).astype(np.int64)
    shared_b = (
        round_up(
            int_lengths(
                lognormal_median(p.shared_median_tokens, p.shared_sigma, p.n_shared_prefixes, rng),
                p.shared_min_tokens,
                p.shared_max_tokens,
            ),
            bt,
        )
        // bt
    )
    sys_b = round_up(rng.integers(p.system_tokens_min, p.system_tokens_max + 1, n_ten), bt) // bt
    if p.n_tenants == 0:
        sys_b[:] = 0
    pre_sys = sys_b[tenant]
    pre_shared = np.where(has_shared, shared_b[shared_id], 0)
    prefix_tokens = (pre_sys + pre_shared) * bt

    # Per-turn draws (flattened, conversation by conversation).
    total = int(turns.sum())
    conv = np.repeat(np.arange(n_conv, dtype=np.int64), turns)
    first = np.cumsum(turns) - turns
    k = np.arange(total, dtype=np.int64) - first[conv]
    user = int_lengths(
        lognormal_mean_sd(p.user_mean_tokens, p.user_sd_tokens, total, rng), 1, p.max_user_tokens
    )
    reply = int_lengths(
        lognormal_mean_sd(p.reply_mean_tokens, p.reply_sd_tokens, total, rng), 1, p.max_reply_tokens
    )
    think = lognormal_median(p.think_median_s * 1000.0, p.think_sigma, total, rng)
    cs = np.cumsum(user + reply)
    base = (cs - (user + reply))[first]
    prompt = prefix_tokens[conv] + cs - base[conv] - reply
    keep = prompt <= p.max_prompt_tokens
    realised = np.bincount(conv[keep], minlength=n_conv)
    if int(keep.sum()) < n:
        return None

    # Intended times: conversation starts at the rate that makes turns arrive at rate_per_s.
    conv_rate_per_ms = rate_per_s / 1000.0 / max(float(realised.mean()), 1.0)
    start = np.cumsum(rng.exponential(1.0 / conv_rate_per_ms, n_conv))
    gap = np.where(k == 0, 0.0, think)
    cg = np.cumsum(gap)
    intended = start[conv] + cg - (cg - gap)[first][conv]
    idx = np.flatnonzero(keep)
    order = idx[np.argsort(intended[idx], kind="stable")][:n]
    if n and intended[order[-1]] > start[-1]:
        return None  # a conversation not generated would have started before the n-th turn

    # Block ids: [tenant sys | shared prefixes (x tenant) | fresh conversation streams].
    sys_start = fresh_ranges(sys_b, 0)
    sh0 = int(sys_b.sum())
    sh_start, sh_total = fresh_ranges(shared_b, 0), int(shared_b.sum())
    fresh0 = sh0 + n_ten * sh_total
    own_tokens = np.zeros(n_conv, dtype=np.int64)
    np.maximum.at(own_tokens, conv[keep], prompt[keep] - prefix_tokens[conv[keep]])
    own_start = fresh_ranges(-(-own_tokens // bt), fresh0)

    c = conv[order]
    starts = np.stack(
        [sys_start[tenant[c]], sh0 + tenant[c] * sh_total + sh_start[shared_id[c]], own_start[c]],
        axis=1,
    )
    counts = np.stack(
        [pre_sys[c], pre_shared[c], -(-prompt[order] // bt) - pre_sys[c] - pre_shared[c]], axis=1
    )
    block_ids, block_offsets = concat_ranges(starts, counts)
    kind = np.where(k[order] == 0, Kind.CHAT_FIRST, Kind.CHAT_FOLLOWUP).astype(np.int8)
    return Workload(
        name=p.name,
        block_tokens=bt,
        arrival_ms=poisson_arrivals_ms(n, rate_per_s, rng),
        origin_region=region[c],
        prompt_len=prompt[order].astype(np.int64),
        output_len=reply[order].astype(np.int64),
        block_ids=block_ids,
        block_offsets=block_offsets,
        tenant=(tenant[c] if p.n_tenants > 0 else np.full(n, -1)).astype(np.int32),
        kind=kind,
    )


def make_wildchat(
    n_requests: int,
    rate_per_s: float,
    n_regions: int,
    region_weights: NDArray[np.float64] | None,
    rng: np.random.Generator,
    *,
    block_tokens: int = 16,
    params: ChatParams = WILDCHAT,
) -> Workload:
    """WildChat-like chat turns (``Kind.CHAT_FIRST`` / ``Kind.CHAT_FOLLOWUP``), Poisson arrivals."""
    return make_chat(
        n_requests, rate_per_s, n_regions, region_weights, rng, params, block_tokens=block_tokens
    )


def make_lmsys(
    n_requests: int,
    rate_per_s: float,
    n_regions: int,
    region_weights: NDArray[np.float64] | None,
    rng: np.random.Generator,
    *,
    block_tokens: int = 16,
    params: ChatParams = LMSYS,
) -> Workload:
    """LMSYS-Chat-1M-like chat turns (``Kind.CHAT_FIRST`` / ``Kind.CHAT_FOLLOWUP``)."""
    return make_chat(
        n_requests, rate_per_s, n_regions, region_weights, rng, params, block_tokens=block_tokens
    )
