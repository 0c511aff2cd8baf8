"""Reading the text a span carries: the model's input, its output and its system instructions.

Instrumentations record content in different places. In order of preference we read the GenAI
semantic-convention attributes (also when they sit on a span event), then OpenInference's
``input.value``/``output.value``, then OpenLLMetry's first prompt/completion. A span that
records no content yields None, never an empty string standing in for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from meritlens.instrumentation import conventions as c


def _parts_text(parts: Any) -> str | None:
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return None
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and isinstance(part.get("content"), str):
            if part.get("type", "text") == "text":
                texts.append(part["content"])
    return "\n".join(texts) if texts else None


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and ("parts" in value or "content" in value or "role" in value)


def messages_text(raw: Any, *, roles: Iterable[str] | None = None) -> str | None:
    """The text of a GenAI messages value (JSON text or already parsed), optionally only some roles.

    Text that is not a JSON messages array is returned as it is: some instrumentations record
    the answer itself (which may be a JSON document of its own) rather than the structured form.
    """
    value = raw
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except ValueError:
            return raw
    if _is_message(value):
        value = [value]
    if not (isinstance(value, list) and value and all(_is_message(m) for m in value)):
        return raw if isinstance(raw, str) else None
    wanted = set(roles) if roles is not None else None
    texts = []
    for message in value:
        if wanted is not None and message.get("role") not in wanted:
            continue
        text = _parts_text(message.get("parts")) if "parts" in message else _parts_text(message.get("content"))
        if text is not None:
            texts.append(text)
    return "\n".join(texts) if texts else None


def _find(attributes: dict, events: list, key: str) -> Any:
    if key in attributes:
        return attributes[key]
    for event in events or ():
        attrs = event.get("attributes") if isinstance(event, dict) else None
        if isinstance(attrs, dict) and key in attrs:
            return attrs[key]
    return None


def output_text(attributes: dict, events: list) -> str | None:
    """The model output recorded on one span, or None."""
    raw = _find(attributes, events, c.GEN_AI_OUTPUT_MESSAGES)
    if raw is not None:
        return messages_text(raw)
    for key in (c.OPENINFERENCE_OUTPUT_VALUE, c.OPENLLMETRY_COMPLETION_CONTENT):
        value = attributes.get(key)
        if isinstance(value, str):
            return value
    return None


def input_text(attributes: dict, events: list) -> str | None:
    """The user-facing input recorded on one span (user messages when roles are given), or None."""
    raw = _find(attributes, events, c.GEN_AI_INPUT_MESSAGES)
    if raw is not None:
        return messages_text(raw, roles=("user",)) or messages_text(raw)
    for key in (c.OPENINFERENCE_INPUT_VALUE, c.OPENLLMETRY_PROMPT_CONTENT):
        value = attributes.get(key)
        if isinstance(value, str):
            return value
    return None


def system_instructions(attributes: dict, events: list) -> str | None:
    """The system prompt recorded on one span, or None."""
    raw = _find(attributes, events, c.GEN_AI_SYSTEM_INSTRUCTIONS)
    if raw is not None:
        if isinstance(raw, str):
            try:
                parsed = json.loads(raw)
            except ValueError:
                return raw
            return _parts_text(parsed) or raw
        return _parts_text(raw)
    raw = _find(attributes, events, c.GEN_AI_INPUT_MESSAGES)
    if raw is not None:
        return messages_text(raw, roles=("system",))
    return None
