"""The core's kernels are really compiled when the JIT is on, and really Python when it is off.

JIT on (every ordinary run): each function the core decorates with ``njit``/``kernel``/
``inlined`` is a numba ``CPUDispatcher``, and after a workload through the public wrappers every
entry kernel holds a compiled signature, none in object mode. JIT off (``make test-nojit``,
``NUMBA_DISABLE_JIT=1``): the same names are the plain Python functions and the intrinsics their
Python twins, so that run exercises the kernels' own lines, not compiled code.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from numba.core.registry import CPUDispatcher

from kvcompass import index, index_view, keys, mix
from kvcompass.index import DiscoveryIndex
from kvcompass.index_view import IndexView
from kvcompass.keys import KeyNamespace, PrefixHasher
from kvcompass.layout import TableLayout
from kvcompass.ludo import LudoTable, LudoView, jit, kernels, ops, prefetch, table, view
from kvcompass.ludo.jit import JIT_ENABLED, view_of
from kvcompass.mix import splitmix64_array

CORE = Path(__file__).resolve().parents[3] / "kvcompass"
DECORATORS = {"njit", "jit", "kernel", "inlined"}
jit_on = pytest.mark.skipif(not JIT_ENABLED, reason="JIT off (make test-nojit)")
jit_off = pytest.mark.skipif(JIT_ENABLED, reason="JIT on")


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _kernels() -> list[tuple[ModuleType, str]]:
    """(module, name) of every module-level function the core decorates as a numba kernel."""
    found = []
    for path in sorted(CORE.rglob("*.py")):
        rel = path.relative_to(CORE)
        if rel.parts[0] == "cli" or rel.name == "__main__.py":
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        names = [
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef)
            and any(_decorator_name(d) in DECORATORS for d in n.decorator_list)
        ]
        if names:
            module = ".".join(("kvcompass", *rel.with_suffix("").parts))
            found += [(importlib.import_module(module), name) for name in names]
    return found


KERNELS = _kernels()
KERNEL_IDS = [f"{m.__name__.removeprefix('kvcompass.')}.{n}" for m, n in KERNELS]


def _compiled(module: ModuleType, name: str) -> bool:
    return isinstance(getattr(module, name), CPUDispatcher)


# The kernels Python calls directly: a workload through the public API compiles each of them.
ENTRY_KERNELS: list[Any] = [
    ops.update_batch,
    ops.clear_all,
    ops.get_batch,
    table._dirty_images,
    kernels.lookup_batch,
    kernels.lookup_one,
    kernels.apply_images,
    view._batch_problem,
    index._ops_problem,
    index_view._match_one,
    index_view._query_problem,
    keys._header_state,
    keys._keys_one,
    keys._keys_batch,
    keys._first_negative,
    keys._first_bad_length,
    mix._mix,
    mix._mix_all,
]


def _workload() -> None:
    """Every public path that reaches an entry kernel, once."""
    t = LudoTable(64, seed=3)
    k = np.arange(1, 200, dtype=np.uint64) * np.uint64(7919)
    t.update(k, np.zeros_like(k), np.ones_like(k))  # inserts, growth, dirty images
    t.get(k)
    t.clear_bits(1)
    v = LudoView.empty(t.params)
    v.apply(t.full_image())
    v.lookup(k)
    v.lookup_one(int(k[0]))
    layout = TableLayout.for_regions([2, 3])
    levels = np.tile(np.array([4, 8], dtype=np.int64), (2, 2, 1))
    idx = DiscoveryIndex(layout, n_shards=2, initial_capacity=16)
    iv = IndexView(layout, levels, 2)
    iv.apply_all(idx.full_images())
    hasher = PrefixHasher(KeyNamespace("m"))
    toks = np.arange(16, dtype=np.int32)
    prompt = hasher.keys_at(toks, np.array([4, 8], dtype=np.int64))
    hasher.keys_at_batch(toks, np.array([0, 8, 16], dtype=np.int64), np.array([4, 8]))
    for s in idx.shards:
        ops_keys = prompt[prompt % np.uint64(2) == np.uint64(s.shard)]
        n = ops_keys.shape[0]
        iv.apply_all(
            s.apply(np.zeros(n, np.int64), ops_keys, np.zeros(n, np.int64), np.ones(n, np.uint8))
        )
    iv.match_keys(0, np.array([4, 8], dtype=np.int64), prompt)
    splitmix64_array(k, 1)
    mix.splitmix64(1, 2)


def test_kernel_scan__finds_the_ludo_index_and_key_kernels() -> None:
    names = {f"{m.__name__}.{n}" for m, n in KERNELS}
    for must in ("kvcompass.ludo.ops.update_batch", "kvcompass.ludo.cuckoo.bfs_path"):
        assert must in names
    assert {f"{f.__module__}.{f.__name__}" for f in ENTRY_KERNELS} <= names


@jit_on
def test_every_kernel__is_a_numba_dispatcher__jit_on() -> None:
    plain = [i for i, (m, n) in zip(KERNEL_IDS, KERNELS, strict=True) if not _compiled(m, n)]
    assert not plain, f"kernels that would run as Python: {plain}"


@jit_on
def test_entry_kernels__compiled_in_nopython_mode__after_a_workload() -> None:
    _workload()
    for disp in ENTRY_KERNELS:
        assert disp.signatures, f"{disp.__name__}: never compiled"
        assert len(disp.nopython_signatures) == len(disp.signatures), disp.__name__
        assert not any(cres.objectmode for cres in disp.overloads.values()), disp.__name__


@jit_on
def test_intrinsics__are_numba_intrinsics__jit_on() -> None:
    for f in (view_of, prefetch.prefetch, index_view._as_pointer):
        assert type(f).__name__ == "_Intrinsic", f


@jit_off
def test_every_kernel__is_its_python_function__jit_off() -> None:
    compiled = [i for i, (m, n) in zip(KERNEL_IDS, KERNELS, strict=True) if _compiled(m, n)]
    assert not compiled, f"kernels compiled although the JIT is off: {compiled}"


@jit_off
def test_intrinsics__are_their_python_twins__jit_off() -> None:
    assert view_of is jit._view_py
    assert prefetch.prefetch is prefetch._prefetch_py
    assert index_view._as_pointer is index_view._as_pointer_py
    assert index_view.carray is index_view._carray_py
