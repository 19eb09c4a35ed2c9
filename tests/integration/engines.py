"""The engines' own KV-event code, imported from their PyPI wheels for the conformance tests.

Not a test module (no ``test_`` prefix); the conformance tests load it by path. ``make test``
installs the pinned wheels (``ENGINES`` in the Makefile) with ``pip install --no-deps --target``
into ``$KVCOMPASS_ENGINES_DIR`` (default ``${KVCOMPASS_CACHE:-~/.cache/kvcompass}/engines/<pins>``);
nothing else of the engines is installed, so their packages' ``__init__`` (torch, triton, CUDA
kernels, FastAPI) never runs. What is stubbed, and why (the rest is the engines' files as shipped):

- the package ``__init__`` of ``sglang``, ``sglang.srt``, ``sglang.srt.utils``, ``vllm``,
  ``vllm.config``, ``vllm.distributed``, ``vllm.utils``, ``vllm.v1``, ``vllm.v1.core``: empty
  packages over the wheels' directories (the real ones import torch / CUDA extensions);
- ``sglang.srt.mem_cache.utils``: the page-hash helpers (the real module imports CUDA kernels and
  ``cpp_utils.native_hash``, a native extension): a SHA-256 chain per page, and
  ``hash_str_to_int64`` as SGLang defines it (first 16 hex digits, signed);
- ``sglang.srt.arg_groups.overrides``: ``resolving_view`` (returns the args as given) and
  ``kv_event_block_size_of`` (``page_size * dcp_size``, as SGLang's) — the real module imports
  ``sglang.srt.utils.common`` (torch, triton);
- ``vllm.v1.core.kv_cache_utils``: only ``ExternalBlockHash = bytes | int`` (the real module
  imports ``VllmConfig`` and torch);
- SGLang's ``RadixKey`` / ``TreeNode`` (``radix_cache.py`` imports torch): ``Key`` and ``Node``
  below carry exactly the attributes ``KVCacheEventRecorder`` reads.

``sglang_metrics`` reads SGLang's Prometheus metric definitions (``metrics_collector.py``) as
source text, with ``ast``: importing that module needs torch.

If the directory is missing the tests are skipped with the install command, except under
``CI=true``, where they fail.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import os
import sys
import types
from array import array
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.ci import missing

PINS = ("sglang==0.5.23", "vllm==0.33.0")
_CACHE = Path(os.environ.get("KVCOMPASS_CACHE", str(Path.home() / ".cache" / "kvcompass")))
_DEFAULT = _CACHE / "engines" / "_".join(PINS).replace("==", "-")

_SHELLS = (
    "sglang", "sglang.srt", "sglang.srt.utils", "vllm", "vllm.config", "vllm.distributed",
    "vllm.utils", "vllm.v1", "vllm.v1.core",
)  # fmt: skip


def engines_dir() -> Path:
    root = Path(os.environ.get("KVCOMPASS_ENGINES_DIR", str(_DEFAULT)))
    if not (root / "sglang" / "srt" / "disaggregation" / "kv_events.py").is_file():
        why = (
            f"engine wheels not found in {root}: run `make engines` or "
            f"`pip install --no-deps --target {root} {' '.join(PINS)}`"
        )
        missing(why)
    return root


def _hash_chain(tokens: list[Any], prior: str | None, page_size: int) -> list[str]:
    out: list[str] = []
    for start in range(0, len(tokens), page_size):
        h = hashlib.sha256(bytes.fromhex(prior) if prior else b"")
        h.update(repr(tokens[start : start + page_size]).encode())
        prior = h.hexdigest()
        out.append(prior)
    return out


def _page_tokens(key: Key) -> list[Any]:
    return list(key)


def _stub_mem_cache_utils() -> types.ModuleType:
    m = types.ModuleType("sglang.srt.mem_cache.utils")

    def compute_node_hash_values(node: Any, page_size: int) -> list[str]:
        parent = node.parent
        prior = parent.hash_value[-1] if parent is not None and parent.hash_value else None
        return _hash_chain(_page_tokens(node.key), prior, page_size)

    def hash_str_to_int64(hash_str: str) -> int:
        v = int(hash_str[:16], 16)
        return v - 2**64 if v >= 2**63 else v

    m.compute_node_hash_values = compute_node_hash_values  # type: ignore[attr-defined]
    m.compute_node_event_hash_values = compute_node_hash_values  # type: ignore[attr-defined]
    m.hash_str_to_int64 = hash_str_to_int64  # type: ignore[attr-defined]
    return m


def _stub_overrides() -> types.ModuleType:
    m = types.ModuleType("sglang.srt.arg_groups.overrides")
    m.resolving_view = lambda server_args: server_args  # type: ignore[attr-defined]
    m.kv_event_block_size_of = lambda cfg: cfg.page_size * cfg.dcp_size  # type: ignore[attr-defined]
    return m


@dataclass
class Engines:
    """The engines' modules, as imported from the wheels."""

    sglang_kv_events: Any
    sglang_events: Any
    sglang_runtime_context: Any
    vllm_kv_events: Any


@pytest.fixture(scope="module")
def engines() -> Iterator[Engines]:
    root = engines_dir()
    saved = {n: m for n, m in sys.modules.items() if n.split(".")[0] in ("sglang", "vllm")}
    for name in _SHELLS:
        shell = types.ModuleType(name)
        shell.__path__ = [str(root / name.replace(".", "/"))]
        sys.modules[name] = shell
    kcu = types.ModuleType("vllm.v1.core.kv_cache_utils")
    kcu.ExternalBlockHash = bytes | int  # type: ignore[attr-defined]
    sys.modules[kcu.__name__] = kcu
    sys.modules["sglang.srt.mem_cache.utils"] = _stub_mem_cache_utils()
    sys.modules["sglang.srt.arg_groups.overrides"] = _stub_overrides()
    try:
        yield Engines(
            importlib.import_module("sglang.srt.disaggregation.kv_events"),
            importlib.import_module("sglang.srt.mem_cache.events"),
            importlib.import_module("sglang.srt.runtime_context"),
            importlib.import_module("vllm.distributed.kv_events"),
        )
    finally:
        for n in [n for n in sys.modules if n.split(".")[0] in ("sglang", "vllm")]:
            del sys.modules[n]
        sys.modules.update(saved)


@dataclass
class Key:
    """SGLang's ``RadixKey`` as the recorder reads it: raw token ids; in bigram (EAGLE) mode the
    key's logical units are the pairs ``(t[j], t[j+1])``, one fewer than the raw tokens."""

    token_ids: array[int]
    is_bigram: bool = False
    extra_key: str | None = None
    cache_salt: str | None = None

    def __len__(self) -> int:
        n = len(self.token_ids)
        return max(0, n - 1) if self.is_bigram else n

    def __iter__(self) -> Iterator[Any]:
        t = self.token_ids
        if self.is_bigram:
            return iter([(t[i], t[i + 1]) for i in range(len(self))])
        return iter(list(t))


@dataclass
class Node:
    """SGLang's radix ``TreeNode`` as the recorder reads it."""

    key: Key
    parent: Node | None = None
    hash_value: list[str] | None = None
    event_hash_value: list[str] | None = None
    children: list[Node] = field(default_factory=list)

    def child(self, tokens: list[int], *, bigram: bool = False) -> Node:
        n = Node(Key(array("q", tokens), is_bigram=bigram), self)
        self.children.append(n)
        return n


def root() -> Node:
    return Node(Key(array("q")))


@dataclass(frozen=True)
class MetricDef:
    """One ``Gauge``/``Counter``/``Histogram`` of SGLang's ``metrics_collector.py``, as written:
    its ``prometheus_client`` class, label names (the collector's base labels, then the extra
    ones) and literal ``buckets`` (None when computed)."""

    kind: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] | None
    multiprocess_mode: str | None


def _keys_of_dict(node: ast.AST) -> tuple[str, ...]:
    assert isinstance(node, ast.Dict)
    return tuple(str(k.value) for k in node.keys if isinstance(k, ast.Constant))


def _literal_floats(node: ast.AST | None, names: Mapping[str, ast.AST]) -> tuple[float, ...] | None:
    """A literal bucket list; a name bound to one in the class (``bucket_time_to_first_token``
    when not configured); ``generate_buckets(rule, default)``: the default (no rule given)."""
    if isinstance(node, ast.Name):
        node = names.get(node.id)
    elif isinstance(node, ast.Call) and node.args and isinstance(node.args[-1], ast.Name):
        node = names.get(node.args[-1].id)
    try:
        value = ast.literal_eval(node) if node is not None else None
    except ValueError:
        return None
    return tuple(float(v) for v in value) if isinstance(value, list | tuple) else None


def _labelnames(node: ast.AST, base: tuple[str, ...]) -> tuple[str, ...]:
    """``labels.keys()``, ``list(labels.keys()) + [...]``, ``[*labels.keys(), ...]``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return base  # labels.keys()
    if isinstance(node, ast.BinOp):
        return _labelnames(node.left, base) + _labelnames(node.right, base)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):  # list(labels.keys())
        return _labelnames(node.args[0], base)
    if isinstance(node, ast.List | ast.Set | ast.Tuple):
        out: tuple[str, ...] = ()
        for e in node.elts:
            out += _labelnames(e.value, base) if isinstance(e, ast.Starred) else (e.value,)  # type: ignore[attr-defined]
        return out
    raise AssertionError(f"unexpected labelnames expression: {ast.unparse(node)}")


def sglang_metrics(root: Path) -> dict[str, MetricDef]:
    """SGLang 0.5.23's scheduler and tokenizer metrics by name (``sglang:...``), from the source
    of ``sglang/srt/observability/metrics_collector.py``. Base labels: the ``labels`` dict of
    ``SchedulerMetricsCollectorContext.init_new`` (scheduler) and of
    ``tokenizer_metric_labels`` (tokenizer), without their conditional additions (priority,
    dp_rank, custom labels: off by default)."""
    tree = ast.parse((root / "sglang/srt/observability/metrics_collector.py").read_text())
    base: dict[str, tuple[str, ...]] = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name in ("init_new", "tokenizer_metric_labels"):
            for st in ast.walk(fn):
                if not (isinstance(st, ast.Assign) and isinstance(st.value, ast.Dict)):
                    continue
                if any(isinstance(t, ast.Name) and t.id == "labels" for t in st.targets):
                    base[fn.name] = _keys_of_dict(st.value)
    out: dict[str, MetricDef] = {}
    for cls in tree.body:
        if not (isinstance(cls, ast.ClassDef) and cls.name in
                ("SchedulerMetricsCollector", "TokenizerMetricsCollector")):  # fmt: skip
            continue
        labels = base["init_new" if cls.name.startswith("Scheduler") else "tokenizer_metric_labels"]
        names = {t.id: st.value for st in ast.walk(cls) if isinstance(st, ast.Assign)
                 for t in st.targets if isinstance(t, ast.Name)}  # fmt: skip
        for call in ast.walk(cls):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)):
                continue
            kw = {k.arg: k.value for k in call.keywords if k.arg}
            name = kw.get("name")
            if not (isinstance(name, ast.Constant) and str(name.value).startswith("sglang:")):
                continue
            mode = kw.get("multiprocess_mode")
            out[str(name.value)] = MetricDef(
                call.func.id,
                _labelnames(kw["labelnames"], labels),
                _literal_floats(kw.get("buckets"), names),
                str(mode.value) if isinstance(mode, ast.Constant) else None,
            )
    return out
