"""One LLM call's span: opened when the call starts, finished once with everything that was read."""

from __future__ import annotations

import time
import weakref
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._state import config, current_scope, report_internal_error, tracer
from meritlens.instrumentation._usage import CHAT, Reading, StreamReader
from meritlens.instrumentation.pricing import _price

_CLIENT = SpanKind.CLIENT
_ERROR_STATUS_LIMIT = 500


def scope_attributes(own: dict[str, Any], explicit: dict[str, Any] | None) -> dict[str, Any]:
    """Span attributes: ``own`` constants, then the task/observe scope, then the call site's explicit values.

    The configured default target fills in when neither the scope nor the call site names one.
    """
    scope = current_scope.get()
    defaults = config.default_attributes
    if scope is None:
        if explicit:
            return {**defaults, **own, **explicit} if defaults else {**own, **explicit}
        return {**defaults, **own} if defaults else own.copy()
    attributes = {**defaults, **own, **scope.attributes}
    if explicit:
        attributes.update(explicit)
    task = scope.task
    if task is not None and task.step_count:
        attributes[c.AGENT_STEP] = task.step_count
    return attributes


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
        "attempts",
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
        self.start_ns = time.perf_counter_ns()
        self.span = tracer().start_span(name, context=parent, kind=_CLIENT, attributes=attributes)
        self.ttfc: float | None = None
        self.attempts = 0
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
            self.ttfc = (time.perf_counter_ns() - self.start_ns) / 1e9

    def finish(self, reading: Reading | None, error: BaseException | None = None) -> None:
        """Write everything known onto the span in one call and end it. Idempotent; never raises."""
        if self.ended:
            return
        self.ended = True
        span = self.span
        try:
            attributes: dict[str, Any] = {}
            if reading is not None and not self.nested_calls:
                _reading_attributes(self, reading, attributes)
            if self.ttfc is not None:
                attributes[c.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] = self.ttfc
            if self.count_retries:
                attributes[c.RETRIES] = self.attempts - 1 if self.attempts > 1 else 0
            if self.streamed is not None:
                attributes[c.GEN_AI_REQUEST_STREAM] = self.streamed
            if error is not None:
                attributes[c.ERROR_TYPE] = type(error).__qualname__
            if attributes:
                span.set_attributes(attributes)
            if not self.named_with_model and reading is not None and reading.response_model:
                span.update_name(f"{self.operation} {reading.response_model}")
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


def _reading_attributes(call: CallRecorder, reading: Reading, attributes: dict[str, Any]) -> None:
    if reading.response_model:
        attributes[c.GEN_AI_RESPONSE_MODEL] = reading.response_model
    if reading.response_id:
        attributes[c.GEN_AI_RESPONSE_ID] = reading.response_id
    if reading.finish_reasons:
        attributes[c.GEN_AI_RESPONSE_FINISH_REASONS] = reading.finish_reasons
    if reading.complete and reading.tool_names is not None:
        attributes[c.TOOL_CALLS] = len(reading.tool_names)
        if reading.tool_names:
            attributes[c.TOOL_CALL_NAMES] = reading.tool_names
            attributes[c.TOOL_CALL_IDS] = reading.tool_ids or []
    usage = reading.usage
    if usage is None:
        return
    input_tokens, output_tokens, cache_read, cache_creation, reasoning = usage
    if input_tokens is not None:
        attributes[c.GEN_AI_USAGE_INPUT_TOKENS] = input_tokens
    if output_tokens is not None:
        attributes[c.GEN_AI_USAGE_OUTPUT_TOKENS] = output_tokens
    if cache_read is not None:
        attributes[c.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS] = cache_read
    if cache_creation is not None:
        attributes[c.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS] = cache_creation
    if reasoning is not None:
        attributes[c.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = reasoning
    if input_tokens is None:
        return
    if output_tokens is None:
        if call.operation != c.OP_EMBEDDINGS:
            return
        output_tokens = 0  # embeddings produce no output tokens: an observed zero
    cost = _price(
        call.provider,
        reading.response_model or call.request_model,
        call.request_model,
        input_tokens,
        output_tokens,
        cache_read or 0,
        cache_creation or 0,
        reasoning or 0,
    )
    if cost is not None:
        attributes[c.COST_USD] = cost


# --- streams -------------------------------------------------------------------------------------------------


class StreamObservation:
    """Links a stream's consumption to its call span: items are read, the span ends once, at the stream's end."""

    __slots__ = ("call", "reader", "pulling", "finalizer", "__weakref__")

    def __init__(self, call: CallRecorder, reader: StreamReader) -> None:
        self.call = call
        self.reader = reader
        # True while the consumer waits for the next item: a close then comes from the stream's own end.
        self.pulling = False
        # A weak reference whose callback ends the span if the stream's owner is collected first.
        self.finalizer: weakref.ref[Any] | None = None

    def feed(self, item: Any) -> bool:
        reader = self.reader
        try:
            keep = reader.feed(item)
        except Exception:
            report_internal_error("reading a stream event")
            return True
        if reader.first_output and self.call.ttfc is None:
            self.call.mark_first_output()
        return keep

    def finish(self, error: BaseException | None = None) -> None:
        if self.call.ended:
            return
        finalizer = self.finalizer
        if finalizer is not None:
            self.finalizer = None
            _watched.discard(finalizer)
        try:
            reading = self.reader.finish()
        except Exception:
            report_internal_error("finishing a stream reading")
            reading = None
        self.call.finish(reading, error)

    def on_close(self) -> None:
        if not self.pulling:
            self.finish()

    def watch(self, owner: object) -> None:
        """Finish the span if ``owner`` is garbage-collected before its stream ended (the last resort).

        A weakref finalizer: the weak reference (kept alive in a module-level set, as weakref.finalize does,
        only lighter) calls back when ``owner`` dies, holding this observation, never ``owner``.
        """
        finalizer = weakref.ref(owner, self._collected)
        self.finalizer = finalizer
        _watched.add(finalizer)

    def _collected(self, finalizer: weakref.ref[Any]) -> None:
        _watched.discard(finalizer)
        if self.finalizer is finalizer:
            self.finalizer = None
            self.finish()


# The live finalizer references (a weakref is only called back while it is itself alive).
_watched: set[weakref.ref[Any]] = set()


def _read_chat_chunk(observation: StreamObservation, chunk: Any) -> bool:
    """Record what one chat chunk says; False when the caller must not see it (the usage-only chunk
    that `include_usage` added on the caller's behalf)."""
    reader = observation.reader
    try:
        call = observation.call
        if call.ttfc is None:
            call.mark_first_output()
            reader.first_output = True
            reader.reading.response_model = chunk.model
            reader.reading.response_id = chunk.id
        choices = chunk.choices
        if chunk.usage is not None:
            reader._raw_usage = chunk.usage
            if reader._drop_usage_only and not choices:
                return False
        for choice in choices:
            if choice.finish_reason is not None:
                reader.record_finish_reason(choice.index, choice.finish_reason)
            delta = choice.delta
            if delta is not None and delta.tool_calls:
                reader._feed_tool_deltas(choice, delta.tool_calls)
    except Exception:
        report_internal_error("reading a stream chunk")
    return True


def observe_chat_chunks(inner: Any, observation: StreamObservation) -> Any:
    """observe_iterator specialized for the openai SDK's chat chunk objects (the hottest path).

    A plain content chunk costs a few attribute reads; only the first chunk, finish, tool-call and usage chunks
    write to the reader.
    """
    try:
        observation.pulling = True
        for chunk in inner:
            observation.pulling = False
            if not _read_chat_chunk(observation, chunk):
                observation.pulling = True
                continue
            yield chunk
            observation.pulling = True
        observation.pulling = False
    except GeneratorExit:
        observation.pulling = False
        observation.finish()
        raise
    except BaseException as error:
        observation.pulling = False
        observation.finish(error)
        raise
    observation.finish()


async def observe_async_chat_chunks(inner: Any, observation: StreamObservation) -> Any:
    """The async twin of observe_chat_chunks."""
    try:
        observation.pulling = True
        async for chunk in inner:
            observation.pulling = False
            if not _read_chat_chunk(observation, chunk):
                observation.pulling = True
                continue
            yield chunk
            observation.pulling = True
        observation.pulling = False
    except GeneratorExit:
        observation.pulling = False
        observation.finish()
        raise
    except BaseException as error:
        observation.pulling = False
        observation.finish(error)
        raise
    observation.finish()


def observe_iterator(inner: Any, observation: StreamObservation) -> Any:
    """A generator yielding ``inner``'s items (minus those the reader withholds) while observing them."""
    reader = observation.reader
    call = observation.call
    feed = reader._feed_sdk_chunk if reader.sdk_chat else reader.feed
    try:
        observation.pulling = True
        for item in inner:
            observation.pulling = False
            try:
                keep = feed(item)
            except Exception:
                report_internal_error("reading a stream event")
                keep = True
            if call.ttfc is None and reader.first_output:
                call.mark_first_output()
            if keep:
                yield item
            observation.pulling = True
        observation.pulling = False
    except GeneratorExit:
        observation.pulling = False
        observation.finish()
        raise
    except BaseException as error:
        observation.pulling = False
        observation.finish(error)
        raise
    observation.finish()


async def observe_async_iterator(inner: Any, observation: StreamObservation) -> Any:
    """The async twin of observe_iterator."""
    reader = observation.reader
    call = observation.call
    feed = reader._feed_sdk_chunk if reader.sdk_chat else reader.feed
    try:
        observation.pulling = True
        async for item in inner:
            observation.pulling = False
            try:
                keep = feed(item)
            except Exception:
                report_internal_error("reading a stream event")
                keep = True
            if call.ttfc is None and reader.first_output:
                call.mark_first_output()
            if keep:
                yield item
            observation.pulling = True
        observation.pulling = False
    except GeneratorExit:
        observation.pulling = False
        observation.finish()
        raise
    except BaseException as error:
        observation.pulling = False
        observation.finish(error)
        raise
    observation.finish()


def observe_sdk_stream(stream: Any, observation: StreamObservation, is_async: bool) -> bool:
    """Observe an openai/anthropic ``Stream``/``AsyncStream`` in place, without replacing the object.

    Its item iterator is wrapped, and its HTTP response's close is hooked, so the span ends when the stream is
    exhausted, fails, or is closed early by any path (``close()``, a ``with`` block, an SDK helper); a
    finalizer ends it if everything is dropped unread. Returns False when the object is not such a stream.
    """
    response = getattr(stream, "response", None)
    if response is None or not hasattr(stream, "_iterator"):
        return False
    inner = stream._iterator
    if observation.reader.sdk_chat and observation.reader.family is CHAT:
        stream._iterator = (observe_async_chat_chunks if is_async else observe_chat_chunks)(inner, observation)
    else:
        stream._iterator = (observe_async_iterator if is_async else observe_iterator)(inner, observation)
    _hook_response_close(response, observation, is_async)
    observation.watch(response)
    return True


def _hook_response_close(response: Any, observation: StreamObservation, is_async: bool) -> None:
    # The hook holds the response weakly: a response -> hook -> response cycle would delay its collection.
    name = "aclose" if is_async else "close"
    own = response.__dict__.get(name)
    original = getattr(type(response), name)
    response_ref = weakref.ref(response)
    on_close = observation.on_close

    if is_async:

        async def aclose() -> None:
            on_close()
            if own is not None:
                return await own()
            target = response_ref()
            return None if target is None else await original(target)

        setattr(response, name, aclose)
    else:

        def close() -> None:
            on_close()
            if own is not None:
                return own()
            target = response_ref()
            return None if target is None else original(target)

        setattr(response, name, close)
