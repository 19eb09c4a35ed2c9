"""Request validation and chat reshaping (edge.openai_shapes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from edge import openai_shapes as shapes
from edge.tokenizer import ByteTokenizer

LIM = shapes.Limits("m", max_context_tokens=100, max_new_tokens=50)
TOK = ByteTokenizer()


def _err(fn: Any, body: dict[str, Any]) -> shapes.ApiError:
    with pytest.raises(shapes.ApiError) as info:
        fn(body, TOK, LIM)
    return info.value


def test_generate__text_is_tokenized_and_forwarded_as_ids() -> None:
    p = shapes.parse_generate({"text": "hi", "stream": True}, TOK, LIM)
    assert p.tokens.tolist() == [104, 105] and p.stream
    assert p.forward_body == {"input_ids": [104, 105], "stream": True}
    assert p.worker_path == "/generate"


def test_generate__ids_forwarded_as_the_client_sent_them() -> None:
    p = shapes.parse_generate({"input_ids": [5, 2**31 - 1], "rid": "x"}, TOK, LIM)
    assert p.tokens.dtype == np.int32 and p.tokens.tolist() == [5, 2**31 - 1]
    assert p.forward_body is None


def test_chat__forwarded_as_completion_of_templated_ids() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}],
            "max_completion_tokens": 3, "tools": []}  # fmt: skip
    p = shapes.parse_chat(body, TOK, LIM)
    assert p.worker_path == "/v1/completions"
    assert p.forward_body["prompt"] == TOK.chat(body["messages"])
    assert p.forward_body["max_tokens"] == 3
    assert "messages" not in p.forward_body and "tools" not in p.forward_body


@pytest.mark.parametrize(
    ("fn", "body", "status", "code"),
    [
        (shapes.parse_generate, {}, 400, None),
        (shapes.parse_generate, {"input_ids": [1, -1]}, 400, None),
        (shapes.parse_generate, {"input_ids": [1, 2.5]}, 400, None),
        (shapes.parse_generate, {"input_ids": [1, "2"]}, 400, None),
        (shapes.parse_generate, {"input_ids": [[1, 2]]}, 400, None),
        (shapes.parse_generate, {"input_ids": [2**31]}, 400, None),
        (shapes.parse_generate, {"input_ids": [2**70]}, 400, None),
        (shapes.parse_generate, {"input_ids": []}, 400, None),
        (shapes.parse_generate, {"input_ids": [1] * 101}, 400, "context_length_exceeded"),
        (shapes.parse_generate, {"text": "x", "model": "other"}, 404, "model_not_found"),
        (shapes.parse_generate, {"text": "x", "sampling_params": []}, 400, None),
        (shapes.parse_generate, {"text": "x", "sampling_params": {"max_new_tokens": 51}}, 400,
         None),
        (shapes.parse_generate, {"text": "x", "stream": "yes"}, 400, None),
        (shapes.parse_completions, {"prompt": "x"}, 400, None),
        (shapes.parse_completions, {"model": "m", "prompt": ["a", "b"]}, 400, None),
        (shapes.parse_completions, {"model": "m", "prompt": "x", "max_tokens": -1}, 400, None),
        (shapes.parse_chat, {"model": "m", "messages": []}, 400, None),
        (shapes.parse_chat, {"model": "m", "messages": [{"content": 3}]}, 400, None),
        (shapes.parse_chat, {"model": 3, "messages": [{"content": "x"}]}, 400, None),
    ],
)  # fmt: skip
def test_parse__client_mistakes_are_4xx_with_a_reason(
    fn: Any, body: dict[str, Any], status: int, code: str | None
) -> None:
    err = _err(fn, body)
    assert err.status == status and err.code == code
    assert err.body("rid-1")["error"]["request_id"] == "rid-1"


def test_parse_json__non_objects_and_garbage_are_400() -> None:
    for raw in (b"[1]", b"{", b"\xff\xfe", b"1" * 10, b'"s"'):
        with pytest.raises(shapes.ApiError) as info:
            shapes.parse_json(raw)
        assert info.value.status == 400


def test_chat_body_and_chunk__reshaped_to_chat_objects() -> None:
    comp = {"id": "cmpl-7", "object": "text_completion",
            "choices": [{"index": 0, "text": "hey", "finish_reason": "length"}],
            "usage": {"prompt_tokens": 3}}  # fmt: skip
    body = shapes.chat_body(comp)
    assert body["id"] == "chatcmpl-7" and body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hey"}
    assert body["usage"] == comp["usage"]
    started: set[int] = set()
    chunk = shapes.chat_chunk(comp, started)
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"][0]["delta"] == {"role": "assistant", "content": "hey"}
    later = shapes.chat_chunk({**comp, "choices": [{"index": 0, "text": "!"}]}, started)
    assert later["choices"][0]["delta"] == {"content": "!"}  # role only in the first delta
    usage_only = shapes.chat_chunk({**comp, "choices": []}, started)
    assert usage_only["choices"] == [] and usage_only["usage"] == comp["usage"]
