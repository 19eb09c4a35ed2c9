"""Mooncake trace reader (sim/workloads/mooncake.py) on the real trace and on malformed files.

Only the tests that read the real trace need it (through the ``trace`` fixture); the trace is
found beside the repository (``sim.datasets``), and under CI a missing trace fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvcompass.errors import InvalidInputError
from sim.datasets import MOONCAKE_TRACE as TRACE
from sim.workloads import load_trace
from sim.workloads.mooncake import TraceFormatError, read_mooncake
from sim.workloads.workload import Kind, Workload
from tests.ci import require_file

WEIGHTS = np.array([0.5, 0.3, 0.2])


@pytest.fixture(scope="module")
def trace() -> Workload:
    require_file(TRACE)
    return read_mooncake(TRACE, n_regions=3, region_weights=WEIGHTS, rng=np.random.default_rng(1))


def _write(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def _rec(ts: float, inp: int, out: int, ids: list[int]) -> str:
    return json.dumps({"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": ids})


def test_real_trace__counts_lengths_and_shared_first_block(trace: Workload) -> None:
    assert len(trace) == 12_031 and trace.block_tokens == 512
    assert np.all(np.diff(trace.arrival_ms) >= 0) and trace.arrival_ms[-1] == 3_536_999.0
    assert np.all(trace.block_ids[trace.block_offsets[:-1]] == 0)  # block 0 shared by all
    assert int(np.median(trace.prompt_len)) == 6909
    assert np.all(trace.tenant == -1)
    # From the trace: 3,837 requests extend an earlier, shorter request's whole prompt (follow-ups).
    assert int(np.sum(trace.kind == Kind.TRACE_FOLLOWUP)) == 3837
    assert int(np.sum(trace.kind == Kind.TRACE_ROOT)) == 12_031 - 3837
    assert trace.notes == ()  # the release is well formed and prefix-closed


def test_real_trace__equal_hash_prefix_gives_equal_tokens(trace: Workload) -> None:
    rows = [tuple(int(b) for b in trace.blocks_of(i)) for i in range(2000)]
    index: dict[tuple[int, ...], int] = {}
    checked = 0
    for i, row in enumerate(rows):
        for k in range(len(row) - 1, 1, -1):
            j = index.get(row[:k])
            if j is not None and len(rows[j]) > k and rows[j][k] != row[k]:
                a, b = trace.tokens_of(i), trace.tokens_of(j)
                assert np.array_equal(a[: k * 512], b[: k * 512])
                assert not np.array_equal(a[k * 512 : k * 512 + 16], b[k * 512 : k * 512 + 16])
                checked += 1
                break
        for k in range(1, len(row) + 1):
            index.setdefault(row[:k], i)
    assert checked > 10


def test_real_trace__roots_follow_weights_and_followups_inherit(trace: Workload) -> None:
    roots = trace.kind == Kind.TRACE_ROOT
    shares = np.bincount(trace.origin_region[roots], minlength=3) / roots.sum()
    assert np.allclose(shares, WEIGHTS, atol=0.025)
    # Naive session rule: a follow-up reuses every full block of the first carrier of its
    # deepest previously-seen block, and inherits that request's region.
    first_carrier: dict[int, int] = {}
    for i in range(len(trace)):
        ids = [int(b) for b in trace.blocks_of(i)]
        depth = 0
        while depth < len(ids) and ids[depth] in first_carrier:
            depth += 1
        j = first_carrier.get(ids[depth - 1], i) if depth else i
        longer = int(trace.prompt_len[i]) > int(trace.prompt_len[j])
        follows = j != i and longer and depth >= int(trace.prompt_len[j]) // 512
        assert (trace.kind[i] == Kind.TRACE_FOLLOWUP) == follows
        if follows:
            assert trace.origin_region[i] == trace.origin_region[j]
        for b in ids:
            first_carrier.setdefault(b, i)


def test_limit_time_scale_and_seed(trace: Workload) -> None:
    small = read_mooncake(
        TRACE,
        n_regions=3,
        region_weights=WEIGHTS,
        rng=np.random.default_rng(1),
        limit=200,
        time_scale=0.5,
    )
    assert len(small) == 200
    assert np.array_equal(small.prompt_len, trace.prompt_len[:200])
    assert np.array_equal(small.arrival_ms, trace.arrival_ms[:200] * 0.5)
    again = load_trace(
        TRACE,
        "mooncake",
        n_regions=3,
        region_weights=WEIGHTS,
        rng=np.random.default_rng(1),
        limit=200,
        time_scale=0.5,
    )
    assert np.array_equal(again.origin_region, small.origin_region)


def test_unsorted_timestamps__sorted_stably_and_sessions_follow_arrival(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        [
            _rec(5, 1500, 1, [0, 1, 2]),  # arrives last: extends the request at t=1 -> follow-up
            _rec(1, 1000, 2, [0, 1]),
            "   ",
            _rec(1, 600, 3, [0, 9]),
        ],
    )
    w = read_mooncake(p, n_regions=4, rng=np.random.default_rng(0), block_size=512)
    assert w.arrival_ms.tolist() == [1.0, 1.0, 5.0]
    assert w.output_len.tolist() == [2, 3, 1]
    assert w.kind.tolist() == [Kind.TRACE_ROOT, Kind.TRACE_ROOT, Kind.TRACE_FOLLOWUP]
    assert w.origin_region[2] == w.origin_region[0]
    assert w.blocks_of(2).tolist() == [0, 1, 2]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"timestamp": 1,', r"t\.jsonl:2: expected a JSON object, got invalid JSON"),
        ("[1, 2]", r":2: expected a JSON object, got list"),
        ('{"timestamp": 1, "input_length": 10, "output_length": 1}', r"missing \['hash_ids'\]"),
        (_rec(1, "10", 1, [0]), r":2: input_length: expected an int >= 1, got '10'"),  # type: ignore[arg-type]
        (_rec(1, True, 1, [0]), r"input_length: expected an int >= 1, got True"),
        (_rec(1, 10, -1, [0]), r"output_length: expected an int >= 0, got -1"),
        (_rec(-3, 10, 1, [0]), r"timestamp: expected a finite number >= 0 \(ms\) .*got -3"),
        (_rec("1.5e9", 10, 1, [0]), r":2: timestamp: expected .* string of digits"),  # type: ignore[arg-type]
        (_rec(1, 10, 1, [0.5]), r"hash_ids: expected a list of ints >= 0"),  # type: ignore[list-item]
        (_rec(1, 10, 1, [-2]), r"hash_ids: expected a list of ints >= 0"),
    ],
)
def test_malformed_line__trace_format_error_with_line_number(
    tmp_path: Path, line: str, message: str
) -> None:
    p = _write(tmp_path, [_rec(0, 10, 1, [0]), line])
    with pytest.raises(TraceFormatError, match=message) as info:
        read_mooncake(p, n_regions=1, rng=np.random.default_rng(0))
    assert isinstance(info.value, InvalidInputError)


def test_bad_options__rejected(tmp_path: Path) -> None:
    p = _write(tmp_path, [_rec(0, 10, 1, [0])])
    rng = np.random.default_rng(0)
    with pytest.raises(InvalidInputError, match="time_scale"):
        read_mooncake(p, n_regions=1, rng=rng, time_scale=0.0)
    with pytest.raises(InvalidInputError, match="region_weights"):
        read_mooncake(p, n_regions=2, rng=rng, region_weights=np.array([1.0]))
    assert len(read_mooncake(p, n_regions=1, rng=rng, limit=0)) == 0


def test_ns_string_timestamps__rebased_to_the_first_request(tmp_path: Path) -> None:
    t0 = 1_733_000_000_123_456_789
    p = _write(tmp_path, [_rec(str(t0 + 2_500_000), 10, 1, [0]), _rec(str(t0), 10, 1, [1])])  # type: ignore[arg-type]
    w = read_mooncake(p, n_regions=1, rng=np.random.default_rng(0))
    assert w.arrival_ms.tolist() == [0.0, 2.5]
    assert w.notes[0].startswith("timestamps are Unix ns")
    mixed = _write(tmp_path, [_rec(str(t0), 10, 1, [0]), _rec(5, 10, 1, [1])])  # type: ignore[arg-type]
    with pytest.raises(TraceFormatError, match=r":2: timestamp: expected Unix ns strings"):
        read_mooncake(mixed, n_regions=1, rng=np.random.default_rng(0))


def test_short_and_long_hash_ids__unhashed_blocks_unique_extra_ids_dropped(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        [
            _rec(0, 1500, 1, [0]),  # 3 blocks, 1 id: blocks 2 and 3 unhashed
            _rec(1, 1500, 1, [0]),  # same: its unhashed blocks must not match the first's
            _rec(2, 600, 1, [0, 5, 6, 7]),  # 2 blocks, 4 ids: 2 dropped
        ],
    )
    w = read_mooncake(p, n_regions=1, rng=np.random.default_rng(0))
    a, b, c = (w.blocks_of(i).tolist() for i in range(3))
    assert a[0] == b[0] == c[0] == 0 and len(a) == len(b) == 3 and c == [0, 5]
    assert not set(a[1:]) & set(b[1:]) and min(a[1:] + b[1:]) > 7
    assert any("2 requests had fewer hash_ids" in n and "4 unhashed blocks" in n for n in w.notes)
    assert any("1 requests had more hash_ids" in n and "2 ids" in n for n in w.notes)


def test_ids_not_prefix_closed__canonicalised_by_chaining_and_counted(tmp_path: Path) -> None:
    p = _write(
        tmp_path,
        [
            _rec(0, 1536, 1, [0, 1, 2]),
            _rec(1, 1536, 1, [9, 1, 2]),  # ids 1, 2 after a different prefix: other content
            _rec(2, 1536, 1, [0, 1, 2]),  # the first prefix again: the first request's ids
        ],
    )
    w = read_mooncake(p, n_regions=1, rng=np.random.default_rng(0))
    first, second, third = (w.blocks_of(i).tolist() for i in range(3))
    assert first == third == [0, 1, 2]
    assert second[0] == 9 and not {second[1], second[2]} & {0, 1, 2, 9}
    assert any("2 (predecessor, id) pairs remapped" in n for n in w.notes)


def test_trace_rate__own_timing_by_default_rescaled_when_asked(tmp_path: Path) -> None:
    from kvcompass.deployment import builtin_deployment
    from sim.experiment import load_trace_workload

    p = _write(tmp_path, [_rec(1000 * i, 600, 1, [0, 10 + i]) for i in range(5)])  # 1 req/s
    dep = builtin_deployment("paper-testbed-14x3")
    own = load_trace_workload(p, "mooncake", 512, dep, 0, 1, None)
    assert own.arrival_ms.tolist() == [0.0, 1000.0, 2000.0, 3000.0, 4000.0]
    assert "own timing: 5 requests over 4.0 s (mean 1.0 req/s)" in own.notes[-1]
    fast = load_trace_workload(p, "mooncake", 512, dep, 0, 1, 4.0)
    assert fast.arrival_ms.tolist() == [0.0, 250.0, 500.0, 750.0, 1000.0]
    assert "1.0 req/s -> 4.0 req/s" in fast.notes[-1]
