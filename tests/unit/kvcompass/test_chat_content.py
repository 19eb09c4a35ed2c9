"""Chat content parts flattened as SGLang's string content format does (kvcompass.chat_content)."""

from __future__ import annotations

from typing import Any

import pytest

from kvcompass.chat_content import ContentError, text_messages


def test_text_parts__joined_with_a_space_like_sglang() -> None:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"},
                                         {"type": "input_text", "text": "b"}]}]  # fmt: skip
    assert text_messages(msgs) == [{"role": "user", "content": "a b"}]


def test_one_text_part__reads_as_the_same_string() -> None:
    parts = [{"role": "system", "content": "s"},
             {"role": "user", "content": [{"type": "text", "text": "hello"}]}]  # fmt: skip
    plain = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]
    assert text_messages(parts) == plain == text_messages(plain)


def test_other_fields__kept() -> None:
    msgs = [{"role": "user", "name": "x", "content": "hi"}]
    assert text_messages(msgs) == msgs


@pytest.mark.parametrize(
    ("messages", "needle"),
    [
        (None, "non-empty list"),
        ([], "non-empty list"),
        (["hi"], "messages[0]: expected an object"),
        ([{"role": 1, "content": "x"}], "messages[0].role"),
        ([{"role": "user"}], "messages[0].content: required"),
        ([{"content": 3}], "got int"),
        ([{"content": "a"}, {"content": [{"type": "image_url", "image_url": {"url": "u"}}]}],
         "messages[1].content[0]: content part type 'image_url' is not supported"),
        ([{"content": [{"type": "input_audio"}]}], "'input_audio'"),
        ([{"content": [{"text": "no type"}]}], "type 'None'"),
        ([{"content": ["bare string"]}], "content part object"),
        ([{"content": [{"type": "text", "text": 5}]}], "messages[0].content[0].text"),
    ],
)  # fmt: skip
def test_refused__with_where_and_what(messages: Any, needle: str) -> None:
    with pytest.raises(ContentError) as info:
        text_messages(messages)
    assert needle in str(info.value)
