"""Request shapes at the edge's HTTP front: validation, the body forwarded, the error shape.

Owns turning a client body of ``POST /generate`` (SGLang), ``/v1/completions`` or
``/v1/chat/completions`` (OpenAI) into a ``Parsed`` request — token ids plus the body to forward —
or an ``ApiError`` (4xx, OpenAI error shape), and reshaping a worker's completion into a chat
completion. Must not do I/O or routing.

What is forwarded (the worker never re-tokenizes; always with ``stream: true``, plus
``stream_options.include_usage`` on the OpenAI routes, whatever the client asked: the edge sees
the first token when the worker sends it and assembles a whole body itself, ``edge.responses``):
- ``/generate`` → worker ``/generate``, the client's body with ``input_ids`` (``text`` dropped).
- ``/v1/completions`` → worker ``/v1/completions``, the client's body with ``prompt`` = ids (a
  list holding one prompt is that prompt; a list of several is a 400: one request, one route).
- ``/v1/chat/completions`` → worker ``/v1/completions`` with ``prompt`` = the chat-templated ids
  (text content parts flattened first, ``kvcompass.chat_content``) and the sampling fields;
  the edge reshapes the answer (``chat_body``/``chat_chunk``) into
  ``chat.completion`` / ``chat.completion.chunk`` objects.

Error body: ``{"error": {"message", "type", "param", "code", "request_id"}}``; the request id is
also echoed in the ``X-Request-Id`` header.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
from numpy.typing import NDArray

from edge.tokenizer import Tokenizer
from kvcompass.chat_content import ContentError, text_messages

MAX_TOKEN_ID = 2**31 - 1
STREAM_MEMBER = b',"stream":true'
"""Spliced into a ``/generate`` body that names no ``stream`` (``Parsed.forward_suffix``)."""
_CHAT_ONLY_KEYS = ("messages", "tools", "tool_choice", "response_format", "parallel_tool_calls")


class ApiError(Exception):
    """A client mistake (or an upstream failure) as an OpenAI-shaped error response."""

    def __init__(
        self,
        status: int,
        message: str,
        err_type: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.code = code
        self.param = param

    def body(self, request_id: str) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.err_type,
                "param": self.param,
                "code": self.code,
                "request_id": request_id,
            }
        }


@dataclass(frozen=True, slots=True)
class Parsed:
    """A validated request: what to route on and what to send."""

    kind: str
    """``generate``, ``completions`` or ``chat``."""
    tokens: NDArray[np.int32]
    stream: bool
    """Whether the CLIENT asked for a stream; the worker is always asked for one
    (``forward_body`` says ``stream: true``; ``edge.responses`` assembles a whole body)."""
    worker_path: str
    forward_body: dict[str, Any] | None
    """The body to send; None: the client's bytes as they came (they already carry the ids)."""
    strip_usage: bool = False
    """The edge asked the worker for a usage chunk (to learn the reuse) that the client did not:
    drop it from the stream (OpenAI sends usage only with ``stream_options.include_usage``)."""
    forward_suffix: bytes = b""
    """With ``forward_body`` None: JSON members (``,"key":value``) the edge adds to the client's
    object as it came (``edge.isolation``: the tenant's ``cache_salt``), spliced in before its
    closing brace instead of re-encoding a body of token ids."""


def _usage_upstream(body: Mapping[str, Any], fwd: dict[str, Any], stream: bool) -> bool:
    """The worker is always asked for a stream (``edge.responses``: the first token is seen when
    it is sent, also for a client that wants the whole body) with the final usage chunk (its
    ``cached_tokens`` is how the edge learns the reuse); True when a streaming client did not ask
    for that chunk (the edge drops it). ``n`` is the worker's to honour or refuse (SGLang honours
    it; the emulated worker answers 400 for n > 1)."""
    n = body.get("n", 1)
    if type(n) is not int or n < 1:
        raise ApiError(400, f"n: expected an int >= 1, got {n!r}"[:200], param="n")
    opts = body.get("stream_options")
    if opts is not None and not isinstance(opts, dict):
        raise ApiError(400, "stream_options: expected an object", param="stream_options")
    asked = bool((opts or {}).get("include_usage"))
    fwd["stream"] = True
    fwd["stream_options"] = {**(opts or {}), "include_usage": True}
    return stream and not asked


_DECODE = msgspec.json.Decoder()


def parse_json(raw: bytes) -> dict[str, Any]:
    """The body as a JSON object, or 400 (msgspec: ~4x faster than ``json`` on id lists)."""
    try:
        body = _DECODE.decode(raw)
    except (msgspec.DecodeError, ValueError, RecursionError) as exc:  # bad JSON, UTF-8, depth
        raise ApiError(400, f"body: expected valid JSON: {str(exc)[:200]}") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"body: expected a JSON object, got {type(body).__name__}")
    return body


def _ids(value: Any, param: str) -> NDArray[np.int32]:
    """Token ids, validated in one numpy pass (a per-element Python check costs ~50 µs at 512).

    JSON ``true``/``false`` inside a list of ints read as 1/0 (numpy's coercion); every other
    non-integer, nested list or out-of-range id is refused.
    """
    bad = ApiError(400, f"{param}: expected a list of token ids in [0, 2^31)", param=param)
    if not isinstance(value, list):
        raise bad
    if not value:
        return np.zeros(0, dtype=np.int32)
    try:
        arr = np.asarray(value)
    except (ValueError, OverflowError, TypeError):
        raise bad from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() > MAX_TOKEN_ID:
        raise bad
    return arr.astype(np.int32)


def _stream(body: Mapping[str, Any]) -> bool:
    value = body.get("stream", False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ApiError(400, f"stream: expected a boolean, got {value!r}"[:200], param="stream")
    return value


def _check_model(body: Mapping[str, Any], served: str, required: bool) -> None:
    model = body.get("model")
    if model is None:
        if required:
            raise ApiError(400, "model: required", param="model")
        return
    if not isinstance(model, str):
        raise ApiError(400, "model: expected a string", param="model")
    if model != served:
        raise ApiError(
            404,
            f"model: expected {served!r}, got {model[:200]!r}",
            err_type="invalid_request_error",
            code="model_not_found",
            param="model",
        )


def _check_length(tokens: NDArray[np.int32], max_context: int, param: str) -> None:
    if not len(tokens):
        raise ApiError(400, f"{param}: expected a non-empty prompt", param=param)
    if len(tokens) > max_context:
        raise ApiError(
            400,
            f"{param}: expected at most {max_context} tokens, got {len(tokens)}",
            code="context_length_exceeded",
            param=param,
        )


@dataclass(frozen=True, slots=True)
class Limits:
    """What one request may ask for (from ``EdgeConfig``)."""

    model: str
    max_context_tokens: int
    max_new_tokens: int


def _check_max_tokens(body: Mapping[str, Any], names: Sequence[str], limit: int) -> None:
    for name in names:
        value = body.get(name)
        if value is not None and (type(value) is not int or not 0 <= value <= limit):
            raise ApiError(400, f"{name}: expected an int in [0, {limit}]", param=name)


def parse_generate(body: dict[str, Any], tok: Tokenizer, lim: Limits) -> Parsed:
    """SGLang ``/generate``: ``input_ids`` or ``text``, optional ``sampling_params``."""
    _check_model(body, lim.model, required=False)
    ids: list[int] | None = None
    if "input_ids" in body:
        tokens = _ids(body["input_ids"], "input_ids")
    elif isinstance(body.get("text"), str):
        _at_least(len(body["text"]), tok, lim, "input_ids")
        ids = _encode(tok.encode, body["text"], "text")
        tokens = np.asarray(ids, dtype=np.int32)
    else:
        raise ApiError(400, "expected 'input_ids' (list of ints) or 'text' (string)",
                       param="input_ids")  # fmt: skip
    params = body.get("sampling_params")
    if params is not None and not isinstance(params, dict):
        raise ApiError(400, "sampling_params: expected an object", param="sampling_params")
    if params:
        _check_max_tokens(params, ("max_new_tokens",), lim.max_new_tokens)
    _check_length(tokens, lim.max_context_tokens, "input_ids")
    fwd = None
    stream = _stream(body)
    suffix = b""
    if ids is None and not stream and "stream" not in body:
        suffix = STREAM_MEMBER  # the client's bytes and one member: no re-encoding of its ids
    elif ids is not None or not stream:  # the worker always streams (edge.responses)
        fwd = {k: v for k, v in body.items() if k != "text"}
        fwd["stream"] = True
        if ids is not None:
            fwd["input_ids"] = ids
    return Parsed("generate", tokens, stream, "/generate", fwd, forward_suffix=suffix)


def _one_prompt(prompt: Any) -> Any:
    """The one prompt of ``prompt``: a string, a list of ids, or a list holding one of those.

    OpenAI and SGLang both take a list of prompts (SGLang serves it as a batch,
    ``serving_completions.py``: ``{"text": [...]}`` or ``{"input_ids": [[...], ...]}``). The edge
    does not: each prompt has its own prefix, so its own best worker, and one request is one
    routing decision. A list of one is that prompt; a list of several is a 400 that says so."""
    if not isinstance(prompt, list) or not prompt or type(prompt[0]) is int:
        return prompt
    if all(isinstance(p, str) for p in prompt) or all(isinstance(p, list) for p in prompt):
        if len(prompt) == 1:
            return prompt[0]
        raise ApiError(
            400,
            f"prompt: the edge routes one prompt per request, got a list of {len(prompt)}: "
            "send each prompt as its own request (each may go to a different worker)",
            param="prompt",
        )
    return prompt


def parse_completions(body: dict[str, Any], tok: Tokenizer, lim: Limits) -> Parsed:
    """OpenAI ``/v1/completions``: ``prompt`` is a string or a list of token ids, or a list
    holding one of those (``_one_prompt``)."""
    _check_model(body, lim.model, required=True)
    raw = body.get("prompt")
    prompt = _one_prompt(raw)
    ids: list[int] | None = None
    if isinstance(prompt, str):
        _at_least(len(prompt), tok, lim, "prompt")
        ids = _encode(tok.encode, prompt, "prompt")
        tokens = np.asarray(ids, dtype=np.int32)
    elif isinstance(prompt, list) and (not prompt or type(prompt[0]) is int):
        tokens = _ids(prompt, "prompt")
        if prompt is not raw:
            ids = prompt
    else:
        raise ApiError(400, "prompt: expected a string or a list of token ids",
                       param="prompt")  # fmt: skip
    _check_max_tokens(body, ("max_tokens",), lim.max_new_tokens)
    _check_length(tokens, lim.max_context_tokens, "prompt")
    fwd = dict(body)
    if ids is not None:
        fwd["prompt"] = ids
    stream = _stream(body)
    strip = _usage_upstream(body, fwd, stream)
    keep = ids is None and fwd == body  # the client's bytes already say it all
    return Parsed("completions", tokens, stream, "/v1/completions", None if keep else fwd, strip)


def parse_chat(body: dict[str, Any], tok: Tokenizer, lim: Limits) -> Parsed:
    """OpenAI ``/v1/chat/completions``: messages whose content is a string or a list of text
    parts (``kvcompass.chat_content``: flattened as SGLang does, other part types a 400 naming
    the type), templated at the edge."""
    _check_model(body, lim.model, required=True)
    try:
        messages = text_messages(body.get("messages"))
    except ContentError as exc:
        raise ApiError(400, str(exc), param="messages") from None
    _at_least(sum(len(m["content"]) for m in messages), tok, lim, "messages")
    ids = _encode(tok.chat, messages, "messages")
    tokens = np.asarray(ids, dtype=np.int32)
    _check_max_tokens(body, ("max_tokens", "max_completion_tokens"), lim.max_new_tokens)
    _check_length(tokens, lim.max_context_tokens, "messages")
    fwd = {k: v for k, v in body.items() if k not in _CHAT_ONLY_KEYS}
    if "max_completion_tokens" in fwd:
        fwd["max_tokens"] = fwd.pop("max_completion_tokens")
    fwd["prompt"] = ids
    stream = _stream(body)
    strip = _usage_upstream(body, fwd, stream)
    return Parsed("chat", tokens, stream, "/v1/completions", fwd, strip)


def _at_least(chars: int, tok: Tokenizer, lim: Limits, param: str) -> None:
    """Refuse a text that cannot fit the context whatever it tokenizes to (its length alone:
    an oversized prompt costs no tokenization, issue 26 item 6)."""
    fewest = -(-chars // max(1, tok.max_chars_per_token))
    if fewest > lim.max_context_tokens:
        raise ApiError(
            400,
            f"{param}: expected at most {lim.max_context_tokens} tokens, got at least {fewest} "
            f"({chars} characters)",
            code="context_length_exceeded",
            param=param,
        )


def _encode(fn: Callable[[Any], list[int]], value: Any, param: str) -> list[int]:
    try:
        return fn(value)
    except (ValueError, KeyError, TypeError) as exc:  # e.g. lone surrogates in the text
        raise ApiError(400, f"{param}: cannot tokenize: {str(exc)[:200]}", param=param) from None


def _chat_id(cid: Any) -> Any:
    if isinstance(cid, str) and cid.startswith("cmpl-"):
        return "chatcmpl-" + cid[5:]
    return cid


def chat_body(completion: dict[str, Any]) -> dict[str, Any]:
    """A worker's ``text_completion`` as a ``chat.completion``."""
    out = dict(completion)
    out["id"] = _chat_id(completion.get("id"))
    out["object"] = "chat.completion"
    out["choices"] = [
        {
            "index": c.get("index", 0),
            "message": {"role": "assistant", "content": c.get("text", "")},
            "finish_reason": c.get("finish_reason"),
            "logprobs": c.get("logprobs"),
        }
        for c in completion.get("choices") or []
        if isinstance(c, dict)
    ]
    return out


def chat_chunk(chunk: dict[str, Any], started: set[int]) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk as a ``chat.completion.chunk``; ``role`` only in
    a choice's first delta (``started`` holds the indices that had theirs)."""
    out = dict(chunk)
    out["id"] = _chat_id(chunk.get("id"))
    out["object"] = "chat.completion.chunk"
    choices = []
    for c in chunk.get("choices") or []:
        if not isinstance(c, dict):
            continue
        index = c.get("index", 0)
        text = c.get("text", "")
        delta: dict[str, Any] = {"content": text} if text or index not in started else {}
        if index not in started:
            started.add(index)
            delta["role"] = "assistant"
        choices.append({"index": index, "delta": delta, "finish_reason": c.get("finish_reason"),
                        "logprobs": c.get("logprobs")})  # fmt: skip
    out["choices"] = choices
    return out
