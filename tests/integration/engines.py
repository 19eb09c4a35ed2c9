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

If the directory is missing the tests are skipped with the install command, except under
``CI=true``, where they fail.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import types
from array import array
from collections.abc import Iterator
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
