"""The emulated worker's tokenizer and chat template (no engine, no ZMQ imports).

One token per UTF-8 byte; chat messages render as ``<|{role}|>{content}\\n`` each, then
``<|assistant|>``. The edge imports this module so the ids it hashes are the ids the worker caches.
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
