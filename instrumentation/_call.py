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
from meritlens.instrumentation._usage import (
    CHAT,
    PROVIDER_OPENAI,
    Reading,
    StreamReader,
    add_tool_deltas,
    get,
    normalize_usage,
    openai_usage_counts,
    read_response,
    tool_names_and_ids,
)
from meritlens.instrumentation.pricing import _price_now

_CLIENT = SpanKind.CLIENT
_ERROR_STATUS_LIMIT = 500
_perf_counter_ns = time.perf_counter_ns


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


class ChatStreamObservation(StreamObservation):
    """The observation of an openai SDK chat ``Stream``/``AsyncStream``, read chunk by chunk in one loop.

    The chunk loop (observe_chat_stream) writes here only on the first chunk, a finish reason, a tool-call delta
    and the usage chunk; finish() turns it into the span's attributes in one pass.
    """

    __slots__ = ("drop_usage_only", "model", "response_id", "reasons", "tools", "usage", "generator")

    def __init__(self, call: CallRecorder, drop_usage_only: bool) -> None:
        self.call = call
        self.reader = None  # type: ignore[assignment]
        self.pulling = False
        self.finalizer = None
        # True when meritlens asked for include_usage: the usage-only chunk is then ours to consume.
        self.drop_usage_only = drop_usage_only
        self.model: Any = None
        self.response_id: Any = None
        self.reasons: dict[int, str] | None = None
        self.tools: dict[Any, list[str]] | None = None
        self.usage: Any = None
        # A weak reference to the sync chunk loop: a close while it runs comes from the stream's own end.
        self.generator: weakref.ref[Any] | None = None

    def record_finish_reason(self, index: Any, reason: Any) -> None:
        if self.reasons is None:
            self.reasons = {}
        self.reasons[index or 0] = str(reason)

    def record_tool_deltas(self, choice: Any, tool_calls: Any) -> None:
        if self.tools is None:
            self.tools = {}
        add_tool_deltas(self.tools, choice, tool_calls)

    def on_close(self) -> None:
        generator = self.generator
        if generator is not None:
            running = generator()
            if running is not None and running.gi_running:
                return
        elif self.pulling:
            return
        self.finish()

    def finish(self, error: BaseException | None = None) -> None:
        call = self.call
        if call.ended:
            return
        finalizer = self.finalizer
        if finalizer is not None:
            self.finalizer = None
            _watched.discard(finalizer)
        attributes: dict[str, Any] = {}
        try:
            if not call.nested_calls:
                self._attributes(attributes)
        except Exception:
            report_internal_error("finishing a stream reading")
            attributes.clear()
        call.end(attributes, error, self.model)

    def _attributes(self, attributes: dict[str, Any]) -> None:
        model = self.model
        if model:
            attributes[_RESPONSE_MODEL] = model
        if self.response_id:
            attributes[_RESPONSE_ID] = self.response_id
        reasons = self.reasons
        tools = self.tools
        if reasons is not None:  # every choice finished: the stream was seen to its end
            attributes[_FINISH_REASONS] = (
                list(reasons.values()) if len(reasons) == 1 else [reasons[index] for index in sorted(reasons)]
            )
            if tools is None:
                attributes[_TOOL_CALLS] = 0
            else:
                names, ids = tool_names_and_ids(tools)
                attributes[_TOOL_CALLS] = len(names)
                if names:
                    attributes[_TOOL_CALL_NAMES] = names
                    attributes[_TOOL_CALL_IDS] = ids
        usage = self.usage
        if usage is not None:
            counts = openai_usage_counts(usage)
            if counts is None:
                counts = normalize_usage(PROVIDER_OPENAI, usage)
            if counts is not None:
                usage_attributes(self.call, model, counts, attributes)


def observe_chat_stream(inner: Any, observation: ChatStreamObservation) -> Any:
    """A generator yielding the chunks of an openai SDK chat ``Stream`` while reading them (the hottest path).

    A content chunk costs a few attribute reads. The usage-only chunk that meritlens asked for is withheld.
    The chunk reading is written out here and in the async twin: a function call per chunk is measurable.
    """
    call = observation.call
    drop_usage_only = observation.drop_usage_only
    first = True
    try:
        for chunk in inner:
            try:
                if first:
                    first = False
                    call.ttfc = (_perf_counter_ns() - call.start_ns) / 1e9
                    observation.model = chunk.model
                    observation.response_id = chunk.id
                choices = chunk.choices
                if chunk.usage is not None:
                    observation.usage = chunk.usage
                    if drop_usage_only and not choices:
                        continue
                for choice in choices:
                    if choice.finish_reason is not None:
                        observation.record_finish_reason(choice.index, choice.finish_reason)
                    delta = choice.delta
                    if delta is not None and delta.tool_calls:
                        observation.record_tool_deltas(choice, delta.tool_calls)
            except Exception:
                report_internal_error("reading a stream chunk")
            yield chunk
    except GeneratorExit:
        observation.finish()
        raise
    except BaseException as error:
        observation.finish(error)
        raise
    observation.finish()


async def observe_async_chat_stream(inner: Any, observation: ChatStreamObservation) -> Any:
    """The async twin of observe_chat_stream (a ``pulling`` flag tells the stream's own close from the caller's)."""
    call = observation.call
    drop_usage_only = observation.drop_usage_only
    first = True
    try:
        observation.pulling = True
        async for chunk in inner:
            observation.pulling = False
            try:
                if first:
                    first = False
                    call.ttfc = (_perf_counter_ns() - call.start_ns) / 1e9
                    observation.model = chunk.model
                    observation.response_id = chunk.id
                choices = chunk.choices
                if chunk.usage is not None:
                    observation.usage = chunk.usage
                    if drop_usage_only and not choices:
                        observation.pulling = True
                        continue
                for choice in choices:
                    if choice.finish_reason is not None:
                        observation.record_finish_reason(choice.index, choice.finish_reason)
                    delta = choice.delta
                    if delta is not None and delta.tool_calls:
                        observation.record_tool_deltas(choice, delta.tool_calls)
            except Exception:
                report_internal_error("reading a stream chunk")
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


def observe_sdk_chat_stream(stream: Any, call: CallRecorder, drop_usage_only: bool, is_async: bool) -> bool:
    """observe_sdk_stream for an openai SDK chat stream, read by ChatStreamObservation. False if not one."""
    response = getattr(stream, "response", None)
    if response is None or not hasattr(stream, "_iterator"):
        return False
    observation = ChatStreamObservation(call, drop_usage_only)
    if is_async:
        stream._iterator = observe_async_chat_stream(stream._iterator, observation)
    else:
        generator = stream._iterator = observe_chat_stream(stream._iterator, observation)
        observation.generator = weakref.ref(generator)
    _hook_response_close(response, observation, is_async)
    return True


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
    stream._iterator = (observe_async_iterator if is_async else observe_iterator)(inner, observation)
    _hook_response_close(response, observation, is_async)
    return True


def _hook_response_close(response: Any, observation: StreamObservation, is_async: bool) -> None:
    """End the observation's span when ``response`` is closed (by any path) or garbage-collected unclosed.

    One weak reference serves both: the close hook reaches the response through it (a response -> hook ->
    response cycle would delay its collection), and its callback is the garbage-collection finalizer
    (see StreamObservation.watch).
    """
    name = "aclose" if is_async else "close"
    own = response.__dict__.get(name)
    original = getattr(type(response), name)
    response_ref = weakref.ref(response, observation._collected)
    observation.finalizer = response_ref
    _watched.add(response_ref)

    if is_async:

        async def aclose() -> None:
            observation.on_close()
            if own is not None:
                return await own()
            target = response_ref()
            return None if target is None else await original(target)

        setattr(response, name, aclose)
    else:

        def close() -> None:
            observation.on_close()
            if own is not None:
                return own()
            target = response_ref()
            return None if target is None else original(target)

        setattr(response, name, close)
