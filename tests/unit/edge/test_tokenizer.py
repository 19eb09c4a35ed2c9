"""The edge's built-in tokenizer gives the emulated worker's ids, chat template included."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edge.tokenizer import ByteTokenizer, make_tokenizer
from kvcompass.byte_tokenizer import tokenize
from kvcompass.errors import ConfigError
from workers.emulated import openai_api


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=200))
def test_encode__same_ids_as_the_emulated_worker(text: str) -> None:
    try:
        expected = tokenize(text)
    except UnicodeEncodeError:  # lone surrogates: both sides refuse
        with pytest.raises(UnicodeEncodeError):
            ByteTokenizer().encode(text)
        return
    assert ByteTokenizer().encode(text) == expected


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["system", "user", "assistant"]),
             "content": st.text(alphabet=st.characters(codec="utf-8"), max_size=50)}
        ),
        min_size=1, max_size=4,
    )
)  # fmt: skip
def test_chat__same_ids_as_the_emulated_worker_template(messages: list[dict[str, str]]) -> None:
    assert ByteTokenizer().chat(messages) == openai_api.chat_tokens(messages)


def test_make_tokenizer__unknown_spec_refused() -> None:
    assert isinstance(make_tokenizer("builtin"), ByteTokenizer)
    with pytest.raises(ConfigError, match="builtin"):
        make_tokenizer("sentencepiece:/x")
