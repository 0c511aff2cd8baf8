"""Reading what an LLM call returned: model, finish reasons, requested tool calls and token usage.

Works on the official SDKs' response objects (openai Chat Completions, Completions, Embeddings and Responses;
anthropic Messages), on their stream events, and on plain dicts of the same shapes.
"""

from __future__ import annotations

from typing import Any

from meritlens.instrumentation._usage import (
    CHAT,
    COMPLETION,
    EMBEDDINGS,
    MESSAGES,
    PROVIDER_ANTHROPIC,
    PROVIDER_OPENAI,
    RESPONSES,
    TokenUsage,
    family_of,
    get,
    normalize_usage,
)


# --- reading a complete response ---------------------------------------------------------------------------


class Reading:
    """What was read from one call's response or stream. Fields stay None when not observed."""

    __slots__ = (
        "response_model",
        "response_id",
        "usage",
        "finish_reasons",
        "tool_names",
        "tool_ids",
        "complete",
    )

    def __init__(self) -> None:
        self.response_model: str | None = None
        self.response_id: str | None = None
        self.usage: TokenUsage | None = None
        self.finish_reasons: list[str] | None = None
        self.tool_names: list[str] | None = None
        self.tool_ids: list[str] | None = None
        # True once the full response (or the end of its stream) was seen: tool-call counts are then known.
        self.complete = False


def read_response(family: str, obj: Any, reading: Reading) -> None:
    """Fill ``reading`` from a complete (non-streamed) response of the given family."""
    if family is CHAT or family is COMPLETION:
        _read_choices_response(obj, reading)
    elif family is RESPONSES:
        _read_responses_response(obj, reading)
    elif family is MESSAGES:
        _read_message(obj, reading)
    elif family is EMBEDDINGS:
        reading.response_model = get(obj, "model")
        reading.usage = normalize_usage(PROVIDER_OPENAI, get(obj, "usage"))
        reading.complete = True


def _read_choices_response(obj: Any, reading: Reading) -> None:
    if obj.__class__ is not dict:
        _read_choices_object(obj, reading)
        return
    reading.response_model = get(obj, "model")
    reading.response_id = get(obj, "id")
    reading.usage = normalize_usage(PROVIDER_OPENAI, get(obj, "usage"))
    reasons: list[str] = []
    names: list[str] = []
    ids: list[str] = []
    for choice in get(obj, "choices") or ():
        reason = get(choice, "finish_reason")
        if reason is not None:
            reasons.append(str(reason))
        message = get(choice, "message")
        if message is None:
            continue
        for call in get(message, "tool_calls") or ():
            function = get(call, "function") or get(call, "custom")
            names.append(str(get(function, "name")) if function is not None else "")
            ids.append(str(get(call, "id") or ""))
    reading.finish_reasons = reasons
    reading.tool_names = names
    reading.tool_ids = ids
    reading.complete = True


def _read_choices_object(obj: Any, reading: Reading) -> None:
    """_read_choices_response for SDK objects (and look-alikes), by attribute access: the hot path."""
    reading.response_model = getattr(obj, "model", None)
    reading.response_id = getattr(obj, "id", None)
    usage = getattr(obj, "usage", None)
    reading.usage = None if usage is None else normalize_usage(PROVIDER_OPENAI, usage)
    reasons: list[str] = []
    names: list[str] = []
    ids: list[str] = []
    for choice in getattr(obj, "choices", None) or ():
        reason = getattr(choice, "finish_reason", None)
        if reason is not None:
            reasons.append(str(reason))
        message = getattr(choice, "message", None)
        tool_calls = getattr(message, "tool_calls", None) if message is not None else None
        if tool_calls:
            for call in tool_calls:
                function = get(call, "function") or get(call, "custom")
                names.append(str(get(function, "name")) if function is not None else "")
                ids.append(str(get(call, "id") or ""))
    reading.finish_reasons = reasons
    reading.tool_names = names
    reading.tool_ids = ids
    reading.complete = True


_RESPONSES_TOOL_ITEMS = frozenset({"function_call", "custom_tool_call", "mcp_call"})


def _read_responses_response(obj: Any, reading: Reading) -> None:
    reading.response_model = get(obj, "model")
    reading.response_id = get(obj, "id")
    reading.usage = normalize_usage(PROVIDER_OPENAI, get(obj, "usage"))
    status = get(obj, "status")
    if status == "incomplete":
        details = get(obj, "incomplete_details")
        reason = get(details, "reason") if details is not None else None
        reading.finish_reasons = [str(reason or status)]
    elif status is not None:
        reading.finish_reasons = [str(status)]
    names: list[str] = []
    ids: list[str] = []
    for item in get(obj, "output") or ():
        if get(item, "type") in _RESPONSES_TOOL_ITEMS:
            names.append(str(get(item, "name") or ""))
            ids.append(str(get(item, "call_id") or get(item, "id") or ""))
    reading.tool_names = names
    reading.tool_ids = ids
    reading.complete = status in (None, "completed", "incomplete", "failed", "cancelled")


_ANTHROPIC_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})


def _read_message(obj: Any, reading: Reading) -> None:
    reading.response_model = get(obj, "model")
    reading.response_id = get(obj, "id")
    reading.usage = normalize_usage(PROVIDER_ANTHROPIC, get(obj, "usage"))
    reason = get(obj, "stop_reason")
    reading.finish_reasons = [] if reason is None else [str(reason)]
    names: list[str] = []
    ids: list[str] = []
    for block in get(obj, "content") or ():
        if get(block, "type") in _ANTHROPIC_TOOL_BLOCKS:
            names.append(str(get(block, "name") or ""))
            ids.append(str(get(block, "id") or ""))
    reading.tool_names = names
    reading.tool_ids = ids
    reading.complete = True


# --- reading a stream, event by event ------------------------------------------------------------------------


class StreamReader:
    """Accumulates a stream's events into a Reading. ``first_output`` turns True at the first output event."""

    __slots__ = (
        "reading",
        "family",
        "first_output",
        "sdk_chat",
        "_reasons",
        "_tools",
        "_raw_usage",
        "_drop_usage_only",
    )

    def __init__(self, family: str | None, drop_usage_only_chunks: bool = False, sdk_objects: bool = False) -> None:
        self.reading = Reading()
        self.family = family
        self.first_output = False
        self._reasons: dict[int, str] | None = None
        self._tools: dict[Any, list[str]] | None = None
        self._raw_usage: Any = None
        # True when meritlens asked for include_usage: the usage-only chunk is then ours to consume.
        self._drop_usage_only = drop_usage_only_chunks
        # An SDK's own chat stream is read by attribute access (the hot path); anything else by the generic reader.
        self.sdk_chat = sdk_objects and family in (CHAT, COMPLETION)

    def feed(self, event: Any) -> bool:
        """Read one event; return False when the event must be withheld from the consumer."""
        if self.sdk_chat:
            return self._feed_sdk_chunk(event)
        family = self.family
        if family is None:
            family = self.family = family_of(event)
            if family is None:
                return True
        if family is CHAT or family is COMPLETION:
            return self._feed_chunk(event)
        if family is MESSAGES:
            self._feed_anthropic(event)
        elif family is RESPONSES:
            self._feed_responses(event)
        return True

    def record_finish_reason(self, index: Any, reason: Any) -> None:
        if self._reasons is None:
            self._reasons = {}
        self._reasons[index or 0] = str(reason)

    def _feed_sdk_chunk(self, chunk: Any) -> bool:
        """_feed_chunk for the openai SDK's chunk objects, by plain attribute access."""
        self.first_output = True
        reading = self.reading
        if reading.response_model is None:
            reading.response_model = chunk.model
            reading.response_id = chunk.id
        choices = chunk.choices
        usage = chunk.usage
        if usage is not None:
            self._raw_usage = usage
            if self._drop_usage_only and not choices:
                return False
        for choice in choices:
            if choice.finish_reason is not None:
                if self._reasons is None:
                    self._reasons = {}
                self._reasons[choice.index] = str(choice.finish_reason)
            delta = getattr(choice, "delta", None)  # legacy completions chunks have text, not delta
            if delta is not None and delta.tool_calls:
                self._feed_tool_deltas(choice, delta.tool_calls)
        return True

    # openai chat.completion.chunk / text_completion chunks, as objects or dicts
    def _feed_chunk(self, chunk: Any) -> bool:
        self.first_output = True
        reading = self.reading
        if reading.response_model is None:
            reading.response_model = get(chunk, "model")
            reading.response_id = get(chunk, "id")
        choices = get(chunk, "choices")
        usage = get(chunk, "usage")
        if usage is not None:
            self._raw_usage = usage
            if self._drop_usage_only and not choices:
                return False
        if choices:
            for choice in choices:
                reason = get(choice, "finish_reason")
                if reason is not None:
                    if self._reasons is None:
                        self._reasons = {}
                    self._reasons[get(choice, "index") or 0] = str(reason)
                delta = get(choice, "delta")
                if delta is None:
                    continue
                tool_calls = get(delta, "tool_calls")
                if tool_calls:
                    self._feed_tool_deltas(choice, tool_calls)
        return True

    def _feed_tool_deltas(self, choice: Any, tool_calls: Any) -> None:
        if self._tools is None:
            self._tools = {}
        add_tool_deltas(self._tools, choice, tool_calls)

    def _feed_anthropic(self, event: Any) -> None:
        kind = get(event, "type")
        if kind == "message_start":
            message = get(event, "message")
            reading = self.reading
            reading.response_model = get(message, "model")
            reading.response_id = get(message, "id")
            start_usage = _usage_fields(get(message, "usage"))
            # message_start's output count is a placeholder; only message_delta reports real output.
            start_usage.pop("output_tokens", None)
            start_usage.pop("output_tokens_details", None)
            self._raw_usage = start_usage
        elif kind == "content_block_start":
            self.first_output = True
            block = get(event, "content_block")
            if get(block, "type") in _ANTHROPIC_TOOL_BLOCKS:
                if self._tools is None:
                    self._tools = {}
                self._tools[get(event, "index")] = [str(get(block, "name") or ""), str(get(block, "id") or "")]
        elif kind == "message_delta":
            delta = get(event, "delta")
            reason = get(delta, "stop_reason") if delta is not None else None
            if reason is not None:
                self._reasons = {0: str(reason)}
            usage = get(event, "usage")
            if usage is not None:
                merged = self._raw_usage if self._raw_usage is not None else {}
                for key, value in _usage_fields(usage).items():
                    if value is not None:  # message_delta counts are cumulative
                        merged[key] = value
                self._raw_usage = merged
        elif kind == "message_stop":
            self.reading.complete = True
        elif kind == "content_block_delta":
            self.first_output = True

    def _feed_responses(self, event: Any) -> None:
        kind = get(event, "type")
        if kind in _RESPONSES_FINAL_EVENTS:
            response = get(event, "response")
            if response is not None:
                _read_responses_response(response, self.reading)
                self.reading.complete = True
                self.first_output = True
        elif kind in _RESPONSES_START_EVENTS:
            response = get(event, "response")
            if response is not None and self.reading.response_model is None:
                self.reading.response_model = get(response, "model")
                self.reading.response_id = get(response, "id")
        else:
            self.first_output = True

    def finish(self) -> Reading:
        """The reading so far (call once, when the stream ends or is closed)."""
        reading = self.reading
        family = self.family
        if family is CHAT or family is COMPLETION:
            if self._raw_usage is not None:
                reading.usage = normalize_usage(PROVIDER_OPENAI, self._raw_usage)
            if self._reasons is not None:
                reading.finish_reasons = [self._reasons[i] for i in sorted(self._reasons)]
            # a chat stream is complete once every choice reported a finish reason
            reading.complete = self._reasons is not None
        elif family is MESSAGES:
            if self._raw_usage is not None:
                reading.usage = normalize_usage(PROVIDER_ANTHROPIC, self._raw_usage)
            if self._reasons is not None:
                reading.finish_reasons = list(self._reasons.values())
        if family is not RESPONSES and self._tools is not None:
            reading.tool_names, reading.tool_ids = tool_names_and_ids(self._tools)
        elif family is not RESPONSES and reading.complete:
            reading.tool_names = []
            reading.tool_ids = []
        return reading


_RESPONSES_FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_RESPONSES_START_EVENTS = frozenset({"response.created", "response.in_progress", "response.queued"})
_ANTHROPIC_USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens_details",
)


def _usage_fields(usage: Any) -> dict[str, Any]:
    if usage is None:
        return {}
    return {name: get(usage, name) for name in _ANTHROPIC_USAGE_FIELDS}


def _sort_key(key: Any) -> tuple[Any, ...]:
    if isinstance(key, tuple):
        return tuple(-1 if part is None else part for part in key)
    return (-1 if key is None else key,)


def add_tool_deltas(tools: dict[Any, list[str]], choice: Any, tool_calls: Any) -> None:
    """Merge a chat chunk's tool-call deltas into ``tools``: (choice index, call index) -> [name, id]."""
    for call in tool_calls:
        key = (get(choice, "index") or 0, get(call, "index"))
        entry = tools.get(key)
        if entry is None:
            entry = tools[key] = ["", ""]
        call_id = get(call, "id")
        if call_id:
            entry[1] = str(call_id)
        function = get(call, "function") or get(call, "custom")
        name = get(function, "name") if function is not None else None
        if name:
            entry[0] = str(name)


def tool_names_and_ids(tools: dict[Any, list[str]]) -> tuple[list[str], list[str]]:
    """The requested tool calls' names and ids, in choice and call order."""
    ordered = [tools[key] for key in sorted(tools, key=_sort_key)]
    return [entry[0] for entry in ordered], [entry[1] for entry in ordered]
