"""The project's toy tokenizer and chat template: one token per UTF-8 byte.

Owns the ids the edge's built-in tokenizer (``edge.tokenizer.ByteTokenizer``) hashes and
forwards and the ids the emulated SGLang worker (``workers.emulated.server``) tokenizes and
caches: one implementation below both shells, so the two agree by construction. Chat messages
render as ``<|{role}|>{content}\\n`` each, then ``<|assistant|>``. Pure: no engine, no I/O. A real
model's tokenizer is ``edge.hf_tokenizer`` (Hugging Face, on the edge only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def tokenize(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def detokenize(ids: Sequence[int]) -> str:
    return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", "replace")


def chat_prompt(messages: Sequence[Mapping[str, Any]]) -> str:
    """The chat template's text for messages already checked to carry string contents."""
    parts = [f"<|{m.get('role', 'user')}|>{m['content']}\n" for m in messages]
    return "".join(parts) + "<|assistant|>"
