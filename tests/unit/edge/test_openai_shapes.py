"""Request validation and chat reshaping (edge.openai_shapes)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from edge import openai_shapes as shapes
from edge.tokenizer import ByteTokenizer
from tests.client_shapes import guidellm_chat

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
    assert not p.stream and p.forward_suffix == shapes.STREAM_MEMBER  # the worker streams


def test_the_worker_is_always_asked_for_a_stream__whatever_the_client_asked() -> None:
    """Issue 34 item 2: the first token is seen at the edge for whole-body clients too."""
    p = shapes.parse_generate({"input_ids": [5], "stream": False}, TOK, LIM)
    assert not p.stream and p.forward_body == {"input_ids": [5], "stream": True}
    p = shapes.parse_generate({"input_ids": [5], "stream": True}, TOK, LIM)
    assert p.stream and p.forward_body is None and p.forward_suffix == b""  # as it came
    for parse in (shapes.parse_completions, shapes.parse_chat):
        body = {"model": "m", "prompt": [1, 2], "messages": [{"role": "user", "content": "x"}]}
        p = parse(body, TOK, LIM)
        assert not p.stream and not p.strip_usage and p.forward_body is not None
        assert p.forward_body["stream"] is True
        assert p.forward_body["stream_options"] == {"include_usage": True}


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
        (shapes.parse_completions, {"model": "m", "prompt": [[1], [2]]}, 400, None),
        (shapes.parse_completions, {"model": "m", "prompt": ["a", [2]]}, 400, None),
        (shapes.parse_completions, {"model": "m", "prompt": [[1, "x"]]}, 400, None),
        (shapes.parse_completions, {"model": "m", "prompt": "x", "max_tokens": -1}, 400, None),
        (shapes.parse_chat, {"model": "m", "messages": []}, 400, None),
        (shapes.parse_chat, {"model": "m", "messages": [{"content": 3}]}, 400, None),
        (shapes.parse_chat, {"model": 3, "messages": [{"content": "x"}]}, 400, None),
        (shapes.parse_chat, {"model": "m", "messages": [{"content": [{"type": "image_url"}]}]},
         400, None),
    ],
)  # fmt: skip
def test_parse__client_mistakes_are_4xx_with_a_reason(
    fn: Any, body: dict[str, Any], status: int, code: str | None
) -> None:
    err = _err(fn, body)
    assert err.status == status and err.code == code
    assert err.body("rid-1")["error"]["request_id"] == "rid-1"


def test_completions__a_list_of_several_prompts_is_a_400_that_says_why() -> None:
    err = _err(shapes.parse_completions, {"model": "m", "prompt": ["a", "b", "c"]})
    assert "one prompt per request" in err.message and "list of 3" in err.message
    assert err.param == "prompt"


@pytest.mark.parametrize("prompt", [["hi"], [[104, 105]]])
def test_completions__a_list_of_one_prompt_is_that_prompt(prompt: list[Any]) -> None:
    p = shapes.parse_completions({"model": "m", "prompt": prompt, "max_tokens": 2}, TOK, LIM)
    assert p.tokens.tolist() == [104, 105]
    assert p.forward_body is not None and p.forward_body["prompt"] == [104, 105]


def test_chat__text_parts_route_and_forward_as_the_same_string_would() -> None:
    plain = {"model": "m", "messages": [{"role": "user", "content": "hello there"}]}
    parts = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hello"}, {"type": "text", "text": "there"}]}]}  # fmt: skip
    a, b = shapes.parse_chat(plain, TOK, LIM), shapes.parse_chat(parts, TOK, LIM)
    assert a.tokens.tolist() == b.tokens.tolist()
    assert a.forward_body == b.forward_body


def test_chat__other_part_types_are_refused_naming_the_type() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}  # fmt: skip
    err = _err(shapes.parse_chat, body)
    assert err.status == 400 and err.param == "messages"
    assert "'image_url'" in err.message and "messages[0].content[1]" in err.message


def test_chat__guidellm_default_request_is_accepted() -> None:
    lim = shapes.Limits("m", max_context_tokens=4096, max_new_tokens=64)
    body = guidellm_chat("m", "the quick brown fox " * 20, output_tokens=16)
    p = shapes.parse_chat(body, TOK, lim)
    assert p.stream and not p.strip_usage  # it asks for usage itself
    fwd = p.forward_body
    assert fwd is not None and fwd["max_tokens"] == 16 and fwd["ignore_eos"] is True
    assert fwd["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    text = body["messages"][0]["content"][0]["text"]
    assert fwd["prompt"] == TOK.chat([{"role": "user", "content": text}])


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


class _NeverTokenizes:
    """A tokenizer that must not be called: the prompt is refused from its length alone."""

    max_chars_per_token = 4

    def encode(self, text: str) -> list[int]:
        raise AssertionError("tokenized an oversized prompt")

    def chat(self, messages: Any) -> list[int]:
        raise AssertionError("tokenized an oversized chat")


@pytest.mark.parametrize(
    ("parse", "body"),
    [(shapes.parse_completions, {"model": "m", "prompt": "x" * 41}),
     (shapes.parse_generate, {"text": "x" * 41}),
     (shapes.parse_chat, {"model": "m", "messages": [{"role": "user", "content": "x" * 41}]})],
)  # fmt: skip
def test_text_longer_than_context_allows__refused_before_tokenizing(parse: Any, body: Any) -> None:
    with pytest.raises(
        shapes.ApiError
    ) as err:  # 41 characters: at least 11 tokens of at most 4 each
        parse(body, _NeverTokenizes(), shapes.Limits("m", 10, 16))
    assert err.value.code == "context_length_exceeded" and "at least 11" in err.value.message
