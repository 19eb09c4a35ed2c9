"""Pluggable tokenization: text and chat messages to the token ids the edge hashes and forwards.

Owns the ``Tokenizer`` port and the built-in adapter; the Hugging Face adapter lives in
``edge.hf_tokenizer`` (imported only when configured, so ``transformers`` stays optional). Must
not validate request shapes (``edge.openai_shapes`` does) or know HTTP.

The built-in tokenizer is the project's toy tokenizer (``kvcompass.byte_tokenizer``: one token
per UTF-8 byte), the one the emulated worker uses too, so the ids the edge hashes are the ids the
worker caches; so is its chat template, ``<|{role}|>{content}\\n`` per message, then
``<|assistant|>`` (``tests/unit/edge/test_tokenizer.py`` checks both against the worker).
The edge always forwards ids, so a worker never re-tokenizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from kvcompass.byte_tokenizer import chat_prompt, tokenize
from kvcompass.errors import ConfigError


class Tokenizer(Protocol):
    """Text → ids, chat messages → ids (after the model's chat template)."""

    max_chars_per_token: int
    """No token stands for more characters than this, so a text of n characters has at least
    n / max_chars_per_token tokens: a prompt far over the context is refused from its length
    alone, before it is tokenized (``edge.openai_shapes``)."""

    def encode(self, text: str) -> list[int]: ...

    def chat(self, messages: Sequence[Mapping[str, Any]]) -> list[int]: ...


class ByteTokenizer:
    """The project's byte tokenizer and chat template (``kvcompass.byte_tokenizer``)."""

    max_chars_per_token = 1  # one token per UTF-8 byte, and a character is at least one byte

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
