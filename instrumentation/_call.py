"""One LLM call's span: opened when the call starts, finished once with everything that was read
(a returned response here; a stream in `_streams`)."""

from __future__ import annotations

import time
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._state import config, report_internal_error, tracer
from meritlens.instrumentation._reading import Reading, read_response
from meritlens.instrumentation._usage import CHAT, get, openai_usage_counts
from meritlens.instrumentation.pricing import _price_now

_CLIENT = SpanKind.CLIENT
_ERROR_STATUS_LIMIT = 500
_perf_counter_ns = time.perf_counter_ns


class CallRecorder:
    """The span of one LLM call and what is known about the call so far."""

    __slots__ = (
        "span",
        "start_ns",
        "provider",
        "operation",
        "request_model",
        "named_with_model",
        "ttfc",
        "retries",
        "count_retries",
        "ended",
        "nested_calls",
        "streamed",
        "__weakref__",
    )

    def __init__(
        self,
        attributes: dict[str, Any],
        operation: str,
        provider: str | None,
        request_model: str | None,
        *,
        count_retries: bool = False,
        parent: Any = None,
    ) -> None:
        self.operation = operation
        self.provider = provider
        self.request_model = request_model
        self.named_with_model = request_model is not None
        name = f"{operation} {request_model}" if request_model else operation
        self.start_ns = _perf_counter_ns()
        self.span = (config.tracer or tracer()).start_span(name, context=parent, kind=_CLIENT, attributes=attributes)
        self.ttfc: float | None = None
        # Retries the SDK made of this call (counted by instrument()'s retry hook when count_retries).
        self.retries = 0
        self.count_retries = count_retries
        self.ended = False
        # Instrumented calls made inside an observed function: their spans carry the token evidence.
        self.nested_calls = 0
        # Whether the result was a stream, when only learned from the result (observed functions).
        self.streamed: bool | None = None

    def activate(self) -> object:
        """Make the span current (children nest under it); returns the token for deactivate()."""
        return otel_context.attach(trace.set_span_in_context(self.span))

    @staticmethod
    def deactivate(token: object) -> None:
        otel_context.detach(token)  # type: ignore[arg-type]

    def mark_first_output(self) -> None:
        if self.ttfc is None:
            self.ttfc = (_perf_counter_ns() - self.start_ns) / 1e9

    def finish(self, reading: Reading | None, error: BaseException | None = None) -> None:
        """Write everything known onto the span in one call and end it. Idempotent; never raises."""
        if self.ended:
            return
        attributes: dict[str, Any] = {}
        if reading is not None and not self.nested_calls:
            try:
                _reading_attributes(self, reading, attributes)
            except Exception:
                report_internal_error("finishing a call span")
                attributes.clear()
        self.end(attributes, error, reading.response_model if reading is not None else None)

    def end(self, attributes: dict[str, Any], error: BaseException | None = None, response_model: Any = None) -> None:
        """End the span with ``attributes`` (what was read from the response) plus the call's own facts.

        Idempotent; never raises. ``response_model`` names the span when the request named no model.
        """
        if self.ended:
            return
        self.ended = True
        span = self.span
        try:
            if self.ttfc is not None:
                attributes[_TTFC] = self.ttfc
            if self.count_retries:
                attributes[_RETRIES] = self.retries
            if self.streamed is not None:
                attributes[_REQUEST_STREAM] = self.streamed
            if error is not None:
                attributes[c.ERROR_TYPE] = type(error).__qualname__
            if attributes:
                span.set_attributes(attributes)
            if not self.named_with_model and response_model:
                span.update_name(f"{self.operation} {response_model}")
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, str(error)[:_ERROR_STATUS_LIMIT]))
                if isinstance(error, Exception):
                    span.record_exception(error)
        except Exception:
            report_internal_error("finishing a call span")
        try:
            span.end()
        except Exception:
            report_internal_error("ending a call span")


_TTFC = c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK
_RETRIES = c.RETRIES
_REQUEST_STREAM = c.GEN_AI_REQUEST_STREAM
_RESPONSE_MODEL = c.GEN_AI_RESPONSE_MODEL
_RESPONSE_ID = c.GEN_AI_RESPONSE_ID
_FINISH_REASONS = c.GEN_AI_RESPONSE_FINISH_REASONS
_TOOL_CALLS = c.TOOL_CALLS
_TOOL_CALL_NAMES = c.TOOL_CALL_NAMES
_TOOL_CALL_IDS = c.TOOL_CALL_IDS
_INPUT_TOKENS = c.GEN_AI_USAGE_INPUT_TOKENS
_OUTPUT_TOKENS = c.GEN_AI_USAGE_OUTPUT_TOKENS
_CACHE_READ_TOKENS = c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS
_CACHE_CREATION_TOKENS = c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS
_REASONING_TOKENS = c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS
_COST = c.COST_USD


def _reading_attributes(call: CallRecorder, reading: Reading, attributes: dict[str, Any]) -> None:
    if reading.response_model:
        attributes[_RESPONSE_MODEL] = reading.response_model
    if reading.response_id:
        attributes[_RESPONSE_ID] = reading.response_id
    if reading.finish_reasons:
        attributes[_FINISH_REASONS] = reading.finish_reasons
    if reading.complete and reading.tool_names is not None:
        attributes[_TOOL_CALLS] = len(reading.tool_names)
        if reading.tool_names:
            attributes[_TOOL_CALL_NAMES] = reading.tool_names
            attributes[_TOOL_CALL_IDS] = reading.tool_ids or []
    if reading.usage is not None:
        usage_attributes(call, reading.response_model, reading.usage, attributes)


def usage_attributes(
    call: CallRecorder,
    response_model: str | None,
    usage: tuple[int | None, int | None, int | None, int | None, int | None],
    attributes: dict[str, Any],
) -> None:
    """Token attributes and the cost, from normalized counts (input, output, cache read, cache creation, reasoning).

    The counts are ints (never bools) or None, as normalize_usage and openai_usage_counts give them.
    """
    input_tokens, output_tokens, cache_read, cache_creation, reasoning = usage
    if input_tokens is not None:
        attributes[_INPUT_TOKENS] = input_tokens
    if output_tokens is not None:
        attributes[_OUTPUT_TOKENS] = output_tokens
    if cache_read is not None:
        attributes[_CACHE_READ_TOKENS] = cache_read
    if cache_creation is not None:
        attributes[_CACHE_CREATION_TOKENS] = cache_creation
    if reasoning is not None:
        attributes[_REASONING_TOKENS] = reasoning
    if input_tokens is None:
        return
    if output_tokens is None:
        if call.operation != c.OP_EMBEDDINGS:
            return
        output_tokens = 0  # embeddings produce no output tokens: an observed zero
    request_model = call.request_model
    cost = _price_now(
        call.provider,
        response_model or request_model,
        request_model,
        input_tokens,
        output_tokens,
        cache_read or 0,
        cache_creation or 0,
        reasoning or 0,
    )
    if cost is not None:
        attributes[_COST] = cost


# --- one pass per response type (instrument()'s hot paths) ------------------------------------------------------


def finish_chat_completion(call: CallRecorder, response: Any) -> None:
    """Finish a call from an openai SDK ``ChatCompletion`` in one pass: read, price, set attributes, end.

    Anything that is not that object's usual shape goes through the general reader (read_response).
    """
    try:
        attributes = _chat_completion_attributes(call, response)
    except AttributeError:
        attributes = None
    if attributes is None:
        reading = Reading()
        read_response(CHAT, response, reading)
        call.finish(reading)
        return
    call.end(attributes, None, response.model)


def _chat_completion_attributes(call: CallRecorder, response: Any) -> dict[str, Any] | None:
    model = response.model
    response_id = response.id
    choices = response.choices
    usage = response.usage
    attributes: dict[str, Any] = {}
    if model:
        attributes[_RESPONSE_MODEL] = model
    if response_id:
        attributes[_RESPONSE_ID] = response_id
    reasons = []
    names: list[str] | None = None
    for choice in choices:
        reason = choice.finish_reason
        if reason is not None:
            reasons.append(str(reason))
        message = choice.message
        if message is not None and message.tool_calls:
            if names is None:
                names, ids = [], []
            for tool_call in message.tool_calls:
                function = get(tool_call, "function") or get(tool_call, "custom")
                names.append(str(get(function, "name")) if function is not None else "")
                ids.append(str(get(tool_call, "id") or ""))
    if reasons:
        attributes[_FINISH_REASONS] = reasons
    if names is None:
        attributes[_TOOL_CALLS] = 0
    else:
        attributes[_TOOL_CALLS] = len(names)
        attributes[_TOOL_CALL_NAMES] = names
        attributes[_TOOL_CALL_IDS] = ids
    if usage is not None:
        counts = openai_usage_counts(usage)
        if counts is None:
            return None
        usage_attributes(call, model, counts, attributes)
    return attributes
