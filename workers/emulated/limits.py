"""What one request may ask of the emulated worker, refused with SGLang 0.5.23's own messages.

Owns the checks SGLang's tokenizer manager and sampling parameters make on every generation
request, whichever route it came by (``/generate`` and the OpenAI routes raise the same
``ValueError``; each route shapes it, ``http_common``):

- ``check_context`` — ``TokenizerManager._validate_one_request``
  (``sglang/srt/managers/tokenizer_manager.py``): an input of at least the context length is
  refused ("The input (N tokens) is longer than the model's context length (C tokens)."), and
  so is an input plus the asked ``max_new_tokens`` over it ("Requested token count exceeds the
  model's maximum context length of C tokens. ..."); without ``--allow-auto-truncate``, which the
  emulated worker does not offer. No asked ``max_new_tokens`` (``/generate`` without it, a chat
  without ``max_completion_tokens``): no total check, as SGLang.
- ``check_max_new`` — ``SamplingParams.verify`` (``sglang/srt/sampling/sampling_params.py``):
  "max_new_tokens must be at least 0, got N."

The context length is SGLang's ``--context-length`` (default: the model's, 131,072 for
Llama-3.1-8B; ``EmulatedConfig.context_length_tokens``). Must not: know HTTP.
"""

from __future__ import annotations

from typing import Any

from workers.emulated.http_common import BadRequest, Invalid


def check_max_new(value: Any) -> None:
    """``value``: the asked ``max_new_tokens`` (None: not asked)."""
    if value is None:
        return
    if type(value) is not int:
        raise Invalid(f"max_new_tokens: Input should be a valid integer, got {value!r}")
    if value < 0:
        raise BadRequest(f"max_new_tokens must be at least 0, got {value}.")


def check_context(input_tokens: int, max_new: Any, context_len: int) -> None:
    if input_tokens >= context_len:
        raise BadRequest(
            f"The input ({input_tokens} tokens) is longer than the "
            f"model's context length ({context_len} tokens)."
        )
    if type(max_new) is int and input_tokens + max_new > context_len:
        total = input_tokens + max_new
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length "
            f"of {context_len} tokens. You requested a total of {total} "
            f"tokens: {input_tokens} tokens from the input messages and "
            f"{max_new} tokens for the completion. Please reduce the number "
            f"of tokens in the input messages or the completion to fit within the limit."
        )
