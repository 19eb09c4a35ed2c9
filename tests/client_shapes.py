"""Request bodies exactly as standard benchmark clients send them (tests' shared fixtures).

``guidellm_chat``: guidellm 0.8.1's default chat request (``guidellm benchmark --target URL
--data prompt_tokens=...,output_tokens=...``; streaming is its default). Its
``backends/openai/request_handlers.py`` (``ChatCompletionsRequestHandler.format``) builds it in
this key order: ``model``, ``stream``, ``stream_options`` with ``include_usage`` and
``continuous_usage_stats``, then — because synthetic data fixes the output length —
``max_completion_tokens``, ``stop: null``, ``ignore_eos: true``, then ``messages`` whose user turn
is a list of content parts (``_format_prompts``: ``{"type": "text", "text": ...}`` per text
column entry). The issue that found it: every such request was refused by the edge (400).

``guidellm_completions``: its text-completions request (``TextCompletionsRequestHandler.format``):
a string ``prompt`` and ``max_tokens`` in place of ``max_completion_tokens``.
"""

from __future__ import annotations

from typing import Any


def guidellm_chat(model: str, text: str, output_tokens: int, stream: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    body.update({"max_completion_tokens": output_tokens, "stop": None, "ignore_eos": True})
    body["messages"] = [{"role": "user", "content": [{"type": "text", "text": text}]}]
    return body


def guidellm_completions(
    model: str, text: str, output_tokens: int, stream: bool = True
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    body.update({"max_tokens": output_tokens, "stop": None, "ignore_eos": True, "prompt": text})
    return body
