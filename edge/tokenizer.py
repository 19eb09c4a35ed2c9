"""Pluggable tokenization: text and chat messages to the token ids the edge hashes and forwards.

Owns the ``Tokenizer`` port and the built-in adapter; the Hugging Face adapter lives in
``edge.hf_tokenizer`` (imported only when configured, so ``transformers`` stays optional). Must
not validate request shapes (``edge.openai_shapes`` does) or know HTTP.

The built-in tokenizer IS the emulated worker's (``workers.emulated.tokenizer.tokenize``: one token
per UTF-8 byte), imported rather than copied, so the ids the edge hashes are the ids the worker
caches. Its chat template is the emulated worker's too: ``<|{role}|>{content}\\n`` per message,
then ``<|assistant|>`` (``tests/unit/edge/test_tokenizer.py`` checks both against the worker).
The edge always forwards ids, so a worker never re-tokenizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kvcompass.errors import ConfigError
from workers.emulated.tokenizer import chat_prompt, tokenize


class Tokenizer(Protocol):
    """Text → ids, chat messages → ids (after the model's chat template)."""

    def encode(self, text: str) -> list[int]: ...

    def chat(self, messages: Sequence[Mapping[str, Any]]) -> list[int]: ...


class ByteTokenizer:
    """The emulated worker's byte tokenizer and chat template."""

    def encode(self, text: str) -> list[int]:
        return tokenize(text)

    def chat(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        return tokenize(chat_prompt(messages))


def make_tokenizer(spec: str) -> Tokenizer:
    """``builtin`` or ``hf:<local path>`` (``EdgeConfig.tokenizer``)."""
    if spec == "builtin":
        return ByteTokenizer()
    if spec.startswith("hf:"):
        from edge.hf_tokenizer import HFTokenizer  # optional dependency, only when chosen

        return HFTokenizer(spec[3:])
    raise ConfigError(f"tokenizer: expected 'builtin' or 'hf:<path>', got {spec!r}")
