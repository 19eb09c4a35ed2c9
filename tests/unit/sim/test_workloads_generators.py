"""Synthetic workloads (sim/workloads/mixed.py, chat.py), registry, regions and sharing stats."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvcompass.deployment import builtin_deployment, builtin_deployment_names
from kvcompass.errors import InvalidInputError
from kvcompass.keys import KeyNamespace, PrefixHasher
from sim.workloads import WORKLOADS, load_trace
from sim.workloads.burst import BurstParams, make_burst
from sim.workloads.chat import LMSYS, WILDCHAT, make_lmsys, make_wildchat
from sim.workloads.mixed import MixedParams, make_mixed
from sim.workloads.regions import assign_regions, country_of, population_weights
from sim.workloads.stats import sharing_stats
from sim.workloads.workload import Kind, Workload

PAPER_8 = ["US", "CN", "DE", "JP", "SG", "UK", "KR", "AU"]


@pytest.fixture(scope="module")
def mixed() -> Workload:
    return make_mixed(12_000, 1000.0, 4, np.array([4.0, 3.0, 2.0, 1.0]), np.random.default_rng(7))


@pytest.fixture(scope="module")
def wildchat() -> Workload:
    return make_wildchat(3000, 200.0, 3, None, np.random.default_rng(3), block_tokens=64)


def _prefix_closed(w: Workload) -> bool:
    """Every block id is always preceded by the same block id (or starts every prompt)."""
    counts = np.diff(w.block_offsets)
    starts = np.zeros(w.block_ids.shape[0], dtype=bool)
    starts[w.block_offsets[:-1][counts > 0]] = True
    prev = np.concatenate([[-1], w.block_ids[:-1]])
    prev[starts] = -1
    m = int(w.block_ids.max(initial=0)) + 2
    keys = np.sort(w.block_ids * m + (prev + 1))
    distinct = keys[np.concatenate([[True], keys[1:] != keys[:-1]])]
    ids = distinct // m  # sorted; an id preceded by two different ids appears twice
    return bool(np.all(ids[1:] != ids[:-1]))


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_generator__same_seed_same_workload_other_seed_differs(name: str) -> None:
    make = WORKLOADS[name]
    a, b = (make(500, 50.0, 2, None, np.random.default_rng(11)) for _ in range(2))
    c = make(500, 50.0, 2, None, np.random.default_rng(12))
    for f in Workload.__dataclass_fields__:
        x, y = getattr(a, f), getattr(b, f)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
    assert not np.array_equal(a.prompt_len, c.prompt_len)
    assert len(a) == 500 and a.name == name and _prefix_closed(a)


@pytest.mark.parametrize("name", sorted(set(WORKLOADS) - {"burst"}))  # burst: below
def test_generator__poisson_rate_and_zero_requests(name: str) -> None:
    w = WORKLOADS[name](20_000, 500.0, 1, None, np.random.default_rng(5))
    gaps = np.diff(w.arrival_ms)
    assert np.all(gaps >= 0) and abs(gaps.mean() - 2.0) < 0.1
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05  # exponential gaps: CV = 1
    assert len(WORKLOADS[name](0, 500.0, 1, None, np.random.default_rng(5))) == 0


def test_mixed__kind_shares_tenants_and_regions(mixed: Workload) -> None:
    shares = np.bincount(mixed.kind, minlength=3) / len(mixed)
    assert np.allclose(shares, [0.50, 0.05, 0.45], atol=0.02)
    assert set(np.unique(mixed.tenant)) == set(range(50))
    region_shares = np.bincount(mixed.origin_region, minlength=4) / len(mixed)
    assert np.allclose(region_shares, [0.4, 0.3, 0.2, 0.1], atol=0.02)
    assert _prefix_closed(mixed)


def test_mixed__lengths_follow_kind(mixed: Workload) -> None:
    doc = mixed.prompt_len[mixed.kind == Kind.DOC_QA]
    tool = mixed.prompt_len[mixed.kind == Kind.TOOL]
    code = mixed.prompt_len[mixed.kind == Kind.CODE]
    assert doc.min() >= 10_000 and doc.max() <= 30_000 + 800 + 512 + 16
    assert tool.min() >= 1000 + 200 and np.median(tool) < np.median(doc)
    assert code.min() >= 200 + 1024 + 500 and code.max() <= 800 + 2048 + 1000 + 32
    out = {k: np.median(mixed.output_len[mixed.kind == k]) for k in Kind if k <= Kind.CODE}
    assert out[Kind.DOC_QA] < out[Kind.TOOL] < out[Kind.CODE]


def test_mixed__tool_requests_share_prefix_within_tenant_only(mixed: Workload) -> None:
    bt = mixed.block_tokens
    tool = np.flatnonzero(mixed.kind == Kind.TOOL)
    seconds = mixed.block_ids[mixed.block_offsets[tool] + (mixed.prompt_len[tool] > bt)]
    firsts = mixed.block_ids[mixed.block_offsets[tool]]
    # Same tenant -> same first block (system prompt); different tenants -> different.
    for t in range(3):
        assert np.unique(firsts[mixed.tenant[tool] == t]).shape == (1,)
    assert np.unique(firsts).shape[0] == 50
    assert np.unique(seconds).shape[0] == 50
    st = sharing_stats(mixed)
    assert 0.3 < st.hit_ratio < 0.99  # tool sets, documents and few-shot prefixes are reused


def test_mixed__zipf_popularity_concentrates_tool_sets(mixed: Workload) -> None:
    tool = np.flatnonzero((mixed.kind == Kind.TOOL) & (mixed.tenant == 0))
    # Tenant 0's tool requests agree on the system prompt and preamble; the first position where
    # they differ is the first block of the tool set.
    heads = np.stack([mixed.blocks_of(int(i))[:128] for i in tool])
    at = int(np.flatnonzero([np.unique(heads[:, k]).shape[0] > 1 for k in range(128)])[0])
    _, counts = np.unique(heads[:, at], return_counts=True)
    counts = np.sort(counts)[::-1]
    assert counts.shape[0] > 50 and counts[0] > 10 * counts[min(100, counts.shape[0] - 1)]


def test_chat__followups_extend_previous_turn_in_same_region(wildchat: Workload) -> None:
    w = wildchat
    seen: dict[tuple[int, ...], int] = {}
    n_follow = 0
    for i in range(len(w)):
        blocks = tuple(int(b) for b in w.blocks_of(i))
        prev = [seen[blocks[:m]] for m in range(1, len(blocks) + 1) if blocks[:m] in seen]
        own_prev = [j for j in prev if w.kind[j] in (Kind.CHAT_FIRST, Kind.CHAT_FOLLOWUP)]
        if w.kind[i] == Kind.CHAT_FOLLOWUP:
            n_follow += 1
            j = max(own_prev)
            assert w.prompt_len[i] > w.prompt_len[j] + w.output_len[j]
            assert w.origin_region[i] == w.origin_region[j]
            assert np.array_equal(w.tokens_of(i)[: w.prompt_len[j]], w.tokens_of(j))
        seen[blocks] = i
    assert n_follow > 0.2 * len(w)


def test_chat__first_turns_have_no_earlier_turn(wildchat: Workload) -> None:
    w = wildchat
    own_first_block: dict[int, int] = {}
    for i in np.flatnonzero(w.kind == Kind.CHAT_FIRST)[:300]:
        last = int(w.blocks_of(int(i))[-1])
        assert last not in own_first_block
        own_first_block[last] = int(i)
        assert not np.isin(last, w.block_ids[: w.block_offsets[i]])


def test_chat__published_lengths_and_wildchat_longer_than_lmsys() -> None:
    wc = make_wildchat(20_000, 500.0, 1, None, np.random.default_rng(1))
    lm = make_lmsys(20_000, 500.0, 1, None, np.random.default_rng(1))
    assert abs(wc.output_len.mean() / WILDCHAT.reply_mean_tokens - 1) < 0.1
    assert abs(lm.output_len.mean() / LMSYS.reply_mean_tokens - 1) < 0.1
    assert np.median(wc.prompt_len) > 2 * np.median(lm.prompt_len)
    assert wc.prompt_len.max() <= WILDCHAT.max_prompt_tokens
    assert np.all(wc.tenant == -1)


def test_chat__cross_region_share_near_paper_17_percent() -> None:
    w = make_wildchat(100_000, 2750.0, 8, population_weights(PAPER_8), np.random.default_rng(2))
    st = sharing_stats(w, min_prefix_tokens=1024)
    assert 0.08 < st.cross_region_share < 0.35
    assert 0 < st.remote_only_share < st.cross_region_share


def test_chat__tenants_prepend_private_system_prompt() -> None:
    p = dataclasses.replace(LMSYS, n_tenants=5)
    w = make_lmsys(2000, 100.0, 2, None, np.random.default_rng(4), params=p)
    assert set(np.unique(w.tenant)) == set(range(5))
    firsts = w.block_ids[w.block_offsets[:-1]]
    for t in range(5):
        assert np.unique(firsts[w.tenant == t]).shape == (1,)
    assert np.unique(firsts).shape == (5,)


def test_generators__reject_bad_arguments() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidInputError, match="rate_per_s"):
        make_mixed(10, 0.0, 2, None, rng)
    with pytest.raises(InvalidInputError, match="n_requests"):
        make_wildchat(-1, 1.0, 2, None, rng)
    with pytest.raises(InvalidInputError, match="region_weights: expected 2"):
        make_lmsys(10, 1.0, 2, np.array([1.0, 2.0, 3.0]), rng)
    with pytest.raises(InvalidInputError, match="shares"):
        MixedParams(share_tool=0.9)
    with pytest.raises(InvalidInputError, match="fmt"):
        load_trace("x.jsonl", fmt="nope")


def test_regions__population_weights_split_and_reject_unknown() -> None:
    w = population_weights(["us-east-1", "us-west-2", "CN", "gb"])
    assert w[0] == w[1] and w[2] > w[0] + w[1] and w[3] < w[0]
    assert abs(w.sum() - 1) < 1e-12 and country_of("eu-central") == "EU"
    with pytest.raises(InvalidInputError, match="expected one of"):
        population_weights(["XX"])


def test_regions__subnational_names_and_builtin_deployments_resolve() -> None:
    w = population_weights(["pennsylvania", "ohio", "new-york", "calgary"])
    assert w[2] > w[0] > w[1] > w[3] and abs(w.sum() - 1) < 1e-12
    for name in builtin_deployment_names():
        names = [r.name for r in builtin_deployment(name).regions]
        assert population_weights(names).shape == (len(names),)


def test_regions__assign_regions_follows_weights_and_skips_zero() -> None:
    r = assign_regions(50_000, np.array([0.0, 1.0, 3.0, 0.0]), np.random.default_rng(9))
    shares = np.bincount(r, minlength=4) / r.shape[0]
    assert shares[0] == 0 and shares[3] == 0 and abs(shares[2] - 0.75) < 0.01


def test_sharing_stats__hand_computed_example() -> None:
    # Requests: r0 [1,2] region 0; r1 [1,2,3] region 1; r2 [1,4] region 0. bt = 4.
    w = Workload(
        name="t",
        block_tokens=4,
        arrival_ms=np.arange(3, dtype=np.float64),
        origin_region=np.array([0, 1, 0], dtype=np.int64),
        prompt_len=np.array([8, 10, 6], dtype=np.int64),
        output_len=np.ones(3, dtype=np.int64),
        block_ids=np.array([1, 2, 1, 2, 3, 1, 4], dtype=np.int64),
        block_offsets=np.array([0, 2, 5, 7], dtype=np.int64),
        tenant=np.full(3, -1, dtype=np.int32),
        kind=np.zeros(3, dtype=np.int8),
    )
    st = sharing_stats(w)
    assert st.prompt_tokens == 24 and st.reused_tokens == 12  # r1: 8, r2: 4
    assert st.cross_region_tokens == 12  # blocks 1 and 2 are used from regions 0 and 1
    assert st.remote_only_tokens == 8  # r1 found blocks 1, 2 only in region 0
    assert sharing_stats(w, min_prefix_tokens=8).reused_tokens == 8


def test_make_workload__tenants_knob_sets_independent_copies_and_is_checked() -> None:
    from kvcompass.errors import ConfigError
    from sim.experiment import make_workload
    from wire.deployments import load_deployment

    dep = load_deployment("paper-testbed-14x3")
    one = make_workload("mixed", 300, 16.0, dep, 1, "uniform", tenants=1)
    default = make_workload("mixed", 300, 16.0, dep, 1, "uniform")
    assert set(one.tenant.tolist()) == {0}
    assert len(set(default.tenant.tolist())) > 20  # the paper's 50 (§5.3)
    # one replay shares its tool sets and documents across every request: far more reuse
    hasher = PrefixHasher(KeyNamespace("m"))

    def shared_prefixes(wl: Workload) -> int:
        seen: set[int] = set()
        n = 0
        for i in range(len(wl)):
            toks = wl.tokens_of(i)
            keys = hasher.keys_at(toks, np.arange(256, len(toks) + 1, 256)).tolist()
            n += sum(1 for k in keys if k in seen)
            seen.update(keys)
        return n

    assert shared_prefixes(one) > 2 * shared_prefixes(default)
    chat = make_workload("wildchat", 50, 16.0, dep, 1, tenants=3)
    assert set(chat.tenant.tolist()) <= {0, 1, 2}
    with pytest.raises(ConfigError):
        make_workload("mixed", 10, 1.0, dep, 1, tenants=0)


def test_burst__one_lead_request_then_the_rest_within_the_window_sharing_a_new_prefix() -> None:
    p = BurstParams()
    w = make_burst(5 * p.per_burst, 8.0, 3, None, np.random.default_rng(4), block_tokens=16)
    assert _prefix_closed(w) and np.all(np.diff(w.arrival_ms) >= 0)
    assert np.all(w.kind == Kind.BURST) and np.all(w.output_len == p.output_tokens)
    prefix_blocks = p.prefix_tokens // 16
    period = p.per_burst * 1000.0 / 8.0  # the mean rate is the asked one
    firsts: list[int] = []
    for b in range(5):  # 3 s apart: the bursts do not overlap
        idx = np.arange(b * p.per_burst, (b + 1) * p.per_burst)
        t = w.arrival_ms[idx] - b * period
        assert t[0] == 0.0  # the lead request, alone
        assert np.all((t[1:] >= p.lead_ms) & (t[1:] <= p.lead_ms + p.window_ms))
        heads = {tuple(w.block_ids[w.block_offsets[i] : w.block_offsets[i] + prefix_blocks])
                 for i in idx}  # fmt: skip
        assert len(heads) == 1  # one shared prefix per burst ...
        firsts.append(int(w.block_ids[w.block_offsets[idx[0]]]))
        tails = w.prompt_len[idx] - p.prefix_tokens
        assert np.all((tails >= p.suffix_min_tokens) & (tails <= p.suffix_max_tokens))
    assert len(set(firsts)) == 5  # ... new in every burst
    assert set(np.unique(w.origin_region).tolist()) == {0, 1, 2}  # from every region


def test_burst__rejects_bad_parameters() -> None:
    with pytest.raises(InvalidInputError, match="suffix_max_tokens"):
        BurstParams(suffix_min_tokens=10, suffix_max_tokens=5)
    with pytest.raises(InvalidInputError, match="window_ms"):
        BurstParams(window_ms=-1.0)
    with pytest.raises(InvalidInputError, match="per_burst"):
        BurstParams(per_burst=0)
