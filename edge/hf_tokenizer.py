"""Hugging Face tokenizer adapter (optional: needs ``transformers``, not installed by default).

Owns loading a tokenizer from a local directory (never the network: ``local_files_only``) and
applying its chat template. Imported by ``edge.tokenizer.make_tokenizer`` only when the config
says ``hf:<path>``; nothing else imports this module.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from transformers import AutoTokenizer  # type: ignore[import-not-found,unused-ignore]


class HFTokenizer:
    """``AutoTokenizer.from_pretrained(path, local_files_only=True)``."""

    def __init__(self, path: str) -> None:
        self._tok: Any = AutoTokenizer.from_pretrained(path, local_files_only=True)
        # the longest vocabulary entry: byte-level BPE spells one byte per character, so no
        # token decodes to more characters than its entry has (special tokens included). Sound
        # for normalizers that delete no characters (Llama 3, Qwen, Llama 2's SentencePiece)
        self.max_chars_per_token = max((len(t) for t in self._tok.get_vocab()), default=1)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=True))

    def chat(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        ids = self._tok.apply_chat_template(
            [dict(m) for m in messages], add_generation_prompt=True, tokenize=True
        )
        return list(ids)
