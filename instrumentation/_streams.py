"""Streams of an LLM call: each item is read as the consumer takes it, and the call's span ends
once, at the stream's end, its close, or (the last resort) when its owner is garbage-collected."""

from __future__ import annotations

import time
import weakref
from typing import Any

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._call import CallRecorder, usage_attributes
from meritlens.instrumentation._state import report_internal_error
from meritlens.instrumentation._reading import StreamReader, add_tool_deltas, tool_names_and_ids
from meritlens.instrumentation._usage import PROVIDER_OPENAI, normalize_usage, openai_usage_counts

_perf_counter_ns = time.perf_counter_ns  # a module global: read on the first chunk of every stream



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

    def unwatch(self) -> None:
        """Stop watching the stream's owner: the span ends another way."""
        finalizer = self.finalizer
        if finalizer is not None:
            self.finalizer = None
            _watched.discard(finalizer)

    def finish(self, error: BaseException | None = None) -> None:
        if self.call.ended:
            return
        self.unwatch()
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
            attributes[c.GEN_AI_RESPONSE_MODEL] = model
        if self.response_id:
            attributes[c.GEN_AI_RESPONSE_ID] = self.response_id
        reasons = self.reasons
        tools = self.tools
        if reasons is not None:  # every choice finished: the stream was seen to its end
            attributes[c.GEN_AI_RESPONSE_FINISH_REASONS] = (
                list(reasons.values()) if len(reasons) == 1 else [reasons[index] for index in sorted(reasons)]
            )
            if tools is None:
                attributes[c.TOOL_CALLS] = 0
            else:
                names, ids = tool_names_and_ids(tools)
                attributes[c.TOOL_CALLS] = len(names)
                if names:
                    attributes[c.TOOL_CALL_NAMES] = names
                    attributes[c.TOOL_CALL_IDS] = ids
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
    hook_response_close(response, observation, is_async)
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
    hook_response_close(response, observation, is_async)
    return True


def hook_response_close(response: Any, observation: StreamObservation, is_async: bool) -> None:
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
