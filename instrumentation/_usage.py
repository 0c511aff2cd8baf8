"""Token usage of an LLM call, and which kind of response an object is.

Provider token semantics are normalized to the GenAI rule in exactly one place, :func:`normalize_usage`.
Reading a whole response or stream (model, finish reasons, tool calls, usage) is in ``_reading``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

PROVIDER_OPENAI = "openai"
PROVIDER_ANTHROPIC = "anthropic"

# Response families: which reader understands an object.
CHAT = "chat"  # openai chat.completion / chat.completion.chunk
COMPLETION = "completion"  # openai text_completion
RESPONSES = "responses"  # openai Responses API
EMBEDDINGS = "embeddings"  # openai embeddings list
MESSAGES = "messages"  # anthropic Messages

FAMILY_PROVIDER = {
    CHAT: PROVIDER_OPENAI,
    COMPLETION: PROVIDER_OPENAI,
    RESPONSES: PROVIDER_OPENAI,
    EMBEDDINGS: PROVIDER_OPENAI,
    MESSAGES: PROVIDER_ANTHROPIC,
}


class TokenUsage(NamedTuple):
    """Token counts under the GenAI rule: input includes cached tokens, output includes reasoning tokens.

    ``None`` means the provider did not report that count (never read as zero).
    """

    input: int | None
    output: int | None
    cache_read: int | None
    cache_creation: int | None
    reasoning: int | None


def get(obj: Any, name: str) -> Any:
    """A field of an SDK object or a dict, or None."""
    if obj.__class__ is dict:
        return obj.get(name)
    return getattr(obj, name, None)


def _int(value: Any) -> int | None:
    return (
        value
        if value.__class__ is int
        else (int(value) if isinstance(value, int) and not isinstance(value, bool) else None)
    )


def normalize_usage(provider: str | None, usage: Any) -> TokenUsage | None:
    """The one place where provider token semantics become the GenAI rule.

    * OpenAI Chat Completions / Completions / Embeddings: ``prompt_tokens`` already include
      ``prompt_tokens_details.cached_tokens`` (and ``cache_write_tokens``); ``completion_tokens`` include
      ``completion_tokens_details.reasoning_tokens``.
    * OpenAI Responses API: ``input_tokens`` include ``input_tokens_details.cached_tokens``;
      ``output_tokens`` include ``output_tokens_details.reasoning_tokens``.
    * Anthropic Messages: ``input_tokens`` EXCLUDE ``cache_read_input_tokens`` and
      ``cache_creation_input_tokens``, which are reported beside it, so GenAI input is their sum;
      ``output_tokens`` include ``output_tokens_details.thinking_tokens``.
    """
    if usage is None:
        return None
    if usage.__class__ is not dict and provider != PROVIDER_ANTHROPIC:
        counts = openai_usage_counts(usage)
        if counts is not None:
            return TokenUsage(*counts)
    if usage.__class__ is dict:
        field = usage.get
    else:

        def field(name: str) -> Any:
            return getattr(usage, name, None)

    prompt_tokens = field("prompt_tokens")
    if prompt_tokens is not None:  # openai chat / completions / embeddings
        prompt_details = field("prompt_tokens_details")
        completion_details = field("completion_tokens_details")
        return TokenUsage(
            _int(prompt_tokens),
            _int(field("completion_tokens")),
            None if prompt_details is None else _int(get(prompt_details, "cached_tokens")),
            None if prompt_details is None else _int(get(prompt_details, "cache_write_tokens")),
            None if completion_details is None else _int(get(completion_details, "reasoning_tokens")),
        )
    input_tokens = _int(get(usage, "input_tokens"))
    output_tokens = _int(get(usage, "output_tokens"))
    if provider == PROVIDER_ANTHROPIC:
        cache_read = _int(get(usage, "cache_read_input_tokens"))
        cache_creation = _int(get(usage, "cache_creation_input_tokens"))
        output_details = get(usage, "output_tokens_details")
        if input_tokens is not None:
            input_tokens += (cache_read or 0) + (cache_creation or 0)
        return TokenUsage(
            input_tokens,
            output_tokens,
            cache_read,
            cache_creation,
            None if output_details is None else _int(get(output_details, "thinking_tokens")),
        )
    # openai Responses API (and any provider that already follows the GenAI rule)
    input_details = get(usage, "input_tokens_details")
    output_details = get(usage, "output_tokens_details")
    if input_tokens is None and output_tokens is None:
        return None
    return TokenUsage(
        input_tokens,
        output_tokens,
        None if input_details is None else _int(get(input_details, "cached_tokens")),
        None if input_details is None else _int(get(input_details, "cache_write_tokens")),
        None if output_details is None else _int(get(output_details, "reasoning_tokens")),
    )


def openai_usage_counts(usage: Any) -> tuple[int, int, int | None, int | None, int | None] | None:
    """normalize_usage's counts for the openai SDK's ``CompletionUsage`` object, read directly (the hot path).

    Returns ``(input, output, cache_read, cache_creation, reasoning)``, or None when ``usage`` is not that
    object with int counts (the general reading in normalize_usage then applies). OpenAI's ``prompt_tokens``
    already include the cached and cache-write tokens, and ``completion_tokens`` the reasoning tokens.
    """
    try:
        input_tokens = usage.prompt_tokens
        output_tokens = usage.completion_tokens
        prompt_details = usage.prompt_tokens_details
        completion_details = usage.completion_tokens_details
        if prompt_details is None:
            cache_read = cache_creation = None
        else:
            cache_read = prompt_details.cached_tokens
            cache_creation = prompt_details.cache_write_tokens
        reasoning = None if completion_details is None else completion_details.reasoning_tokens
    except AttributeError:
        return None
    if (
        input_tokens.__class__ is int
        and output_tokens.__class__ is int
        and (cache_read is None or cache_read.__class__ is int)
        and (cache_creation is None or cache_creation.__class__ is int)
        and (reasoning is None or reasoning.__class__ is int)
    ):
        return input_tokens, output_tokens, cache_read, cache_creation, reasoning
    return None


# --- recognizing a returned object ------------------------------------------------------------------------

_OBJECT_FAMILY = {
    "chat.completion": CHAT,
    "chat.completion.chunk": CHAT,
    "text_completion": COMPLETION,
    "response": RESPONSES,
}
_ANTHROPIC_EVENT_TYPES = frozenset(
    {
        "message_start",
        "message_delta",
        "message_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "ping",
        # the SDK's MessageStream helper adds these
        "text",
        "thinking",
        "signature",
        "input_json",
        "citation",
    }
)
_family_by_class: dict[type, str | None] = {}


def family_of(obj: Any) -> str | None:
    """Which reader understands a response object, stream event or dict; None when none does."""
    cls = obj.__class__
    if cls is not dict:
        cached = _family_by_class.get(cls, _UNSEEN)
        if cached is not _UNSEEN:
            return cached
        family = _detect(obj)
        # SDK model classes always have the same shape; other classes may vary by instance.
        if cls.__module__.partition(".")[0] in ("openai", "anthropic"):
            _family_by_class[cls] = family
        return family
    return _detect(obj)


_UNSEEN: Any = object()


def _detect(obj: Any) -> str | None:
    object_name = get(obj, "object")
    if object_name.__class__ is str:
        family = _OBJECT_FAMILY.get(object_name)
        if family is not None:
            return family
        if object_name == "list" and get(obj, "usage") is not None:
            return EMBEDDINGS
    kind = get(obj, "type")
    if kind.__class__ is str:
        if kind == "message" or kind in _ANTHROPIC_EVENT_TYPES:
            return MESSAGES
        if kind.startswith("response.") or kind == "error":
            return RESPONSES
    # A hand-made dict of the same shape, without the `object`/`type` tag: tell it by its fields.
    usage = get(obj, "usage")
    if usage is not None:
        if get(obj, "choices") is not None and get(usage, "prompt_tokens") is not None:
            return CHAT
        if get(usage, "input_tokens") is not None:
            if get(obj, "content") is not None:
                return MESSAGES
            if get(obj, "output") is not None:
                return RESPONSES
    return None
