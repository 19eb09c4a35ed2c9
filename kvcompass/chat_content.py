"""OpenAI chat messages with text content, as the templates see them.

Owns one rule, shared by the edge (``edge.openai_shapes``) and the emulated worker
(``workers.emulated.openai_api``) so both read the same messages the same way: a message's
``content`` is a string, or a list of content parts of which only text parts (``{"type":
"text", "text": ...}``; ``input_text`` too, as SGLang accepts) are served. A list is flattened to
one string by joining its texts with a space, which is what SGLang 0.5.23 does for a text-only
chat template (``sglang/srt/parser/jinja_template_utils.py``,
``process_content_for_template_format``, the ``"string"`` content format): a one-part list reads
exactly as the same text sent as a string, so both forms hash to the same prefix keys.

Any other part type (``image_url``, ``input_audio``, ``video_url``, ...) is refused with a
message naming it and where it was: SGLang would hand an image to a multimodal processor this
deployment does not have; silently dropping it would answer a different question. Must not:
tokenize, template, or know HTTP (the callers turn ``ContentError`` into their 400).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvcompass.errors import InvalidInputError

TEXT_PART_TYPES = ("text", "input_text")


class ContentError(InvalidInputError):
    """A chat message whose shape or content parts cannot be served (a 400 at every front)."""


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        got = type(content).__name__
        raise ContentError(f"{where}.content: expected a string or a list of text parts, got {got}")
    texts = []
    for j, part in enumerate(content):
        at = f"{where}.content[{j}]"
        if not isinstance(part, dict):
            raise ContentError(f"{at}: expected a content part object, got {type(part).__name__}")
        kind = part.get("type")
        if kind not in TEXT_PART_TYPES:
            raise ContentError(
                f"{at}: content part type {str(kind)[:60]!r} is not supported "
                "(this deployment serves text only: 'text' parts)"
            )
        text = part.get("text")
        if not isinstance(text, str):
            raise ContentError(f"{at}.text: expected a string, got {type(text).__name__}")
        texts.append(text)
    return " ".join(texts)


def text_messages(messages: Any) -> list[dict[str, Any]]:
    """``messages`` with every ``content`` a string (parts flattened), other fields kept;
    ``ContentError`` for anything else: not a non-empty list, a message that is not an object,
    a role that is not a string, a content that is neither a string nor text parts."""
    if not isinstance(messages, list) or not messages:
        raise ContentError("messages: expected a non-empty list")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise ContentError(f"{where}: expected an object, got {type(m).__name__}")
        if not isinstance(m.get("role", "user"), str):
            raise ContentError(f"{where}.role: expected a string")
        if "content" not in m:
            raise ContentError(f"{where}.content: required")
        out.append({**m, "content": _text_of(m["content"], where)})
    return out
