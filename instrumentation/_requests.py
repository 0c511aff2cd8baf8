"""What an instrumented client does with each request: its settings and generation routes, the span
of each call (opened before the request, finished from the response, the stream or the raw body),
and its retries, counted by wrapping the client's ``_sleep_for_retry``."""

from __future__ import annotations

import inspect
import json
import sys
import weakref
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._call import CallRecorder, finish_chat_completion
from meritlens.instrumentation._foreign import mark_enclosing_duplicates
from meritlens.instrumentation._state import (
    config,
    current_call,
    current_scope,
    report_internal_error,
    scope_attributes,
)
from meritlens.instrumentation._streams import (
    StreamObservation,
    hook_response_close,
    observe_sdk_chat_stream,
    observe_sdk_stream,
)
from meritlens.instrumentation._reading import Reading, StreamReader, read_response
from meritlens.instrumentation._usage import CHAT, COMPLETION, EMBEDDINGS, MESSAGES, PROVIDER_OPENAI, RESPONSES

RETRY_METHOD = "_sleep_for_retry"


class _Route:
    """A generation endpoint: which operation it is, how to read it, and its constant span attributes."""

    __slots__ = ("operation", "family", "own", "usage_option", "plain_attributes")

    def __init__(
        self,
        operation: str,
        family: str,
        provider: str,
        role: str,
        usage_option: bool,
        explicit: dict[str, Any],
        fallback: dict[str, Any],
    ) -> None:
        self.operation = operation
        self.family = family
        self.own = {c.GEN_AI_OPERATION_NAME: operation, c.GEN_AI_PROVIDER_NAME: provider, c.ROLE: role}
        # Whether the endpoint accepts stream_options.include_usage (openai chat and legacy completions).
        self.usage_option = usage_option
        # The start attributes of a call made outside any task or observed function, without configured defaults.
        self.plain_attributes = {**fallback, **self.own, **explicit}


_OPENAI_ROUTES = (
    ("/chat/completions", c.OP_CHAT, CHAT, True),
    ("/completions", c.OP_TEXT_COMPLETION, COMPLETION, True),
    ("/responses", c.OP_CHAT, RESPONSES, False),
    ("/embeddings", c.OP_EMBEDDINGS, EMBEDDINGS, False),
)
_ANTHROPIC_ROUTES = (("/v1/messages", c.OP_CHAT, MESSAGES, False),)


class Settings:
    __slots__ = (
        "provider",
        "target",
        "role",
        "include_usage",
        "keep_sdk_spans",
        "routes",
        "explicit",
        "is_async",
        "saved",
        "count_retries",
        "fallback_target",
        "by_agent",
    )

    def __init__(
        self,
        provider: str,
        kind: str,
        target: str | None,
        role: str | None,
        include_usage: bool,
        keep_sdk_spans: bool,
        is_async: bool,
        fallback_target: str | None = None,
        by_agent: bool = False,
    ) -> None:
        self.provider = provider
        self.target = target
        self.role = role
        self.include_usage = include_usage
        self.keep_sdk_spans = keep_sdk_spans
        self.is_async = is_async
        explicit: dict[str, Any] = {}
        if target is not None:
            explicit[c.TARGET_ID] = target
        if role is not None:
            explicit[c.ROLE] = role
        self.explicit = explicit or None
        # The zero-code agent's target: used only when neither the call site, a scope nor configure() names one.
        self.fallback_target = fallback_target
        self.by_agent = by_agent
        fallback = {c.TARGET_ID: fallback_target} if fallback_target is not None else {}
        table = _OPENAI_ROUTES if kind == PROVIDER_OPENAI else _ANTHROPIC_ROUTES
        self.routes = {
            url: _Route(operation, family, provider, c.ROLE_APPLICATION, usage_option, explicit, fallback)
            for url, operation, family, usage_option in table
        }
        self.saved: dict[str, Any] = {}
        # Whether this client's retries can be counted (an SDK without _sleep_for_retry: no retry count at all).
        self.count_retries = False


# --- retries ---------------------------------------------------------------------------------------------------


def hook_retries(client: Any, client_ref: weakref.ref[Any], is_async: bool) -> bool:
    """Count each retry of an observed call: wrap the client's ``_sleep_for_retry``. False if it has none."""
    function = getattr(type(client), RETRY_METHOD, None)
    if function is None:
        return False
    own = client.__dict__.get(RETRY_METHOD)
    if is_async:

        async def sleep_for_retry_async(*args: Any, **kwargs: Any) -> Any:
            call = current_call.get()
            if call is not None:
                call.retries += 1
            if own is not None:
                return await own(*args, **kwargs)
            return await function(client_ref(), *args, **kwargs)

        setattr(client, RETRY_METHOD, sleep_for_retry_async)
    else:

        def sleep_for_retry(*args: Any, **kwargs: Any) -> Any:
            call = current_call.get()
            if call is not None:
                call.retries += 1
            if own is not None:
                return own(*args, **kwargs)
            return function(client_ref(), *args, **kwargs)

        setattr(client, RETRY_METHOD, sleep_for_retry)
    return True


# --- the request wrappers ----------------------------------------------------------------------------------------


def _start(settings: Settings, route: _Route, options: Any, stream: bool) -> tuple[CallRecorder, bool]:
    """Open the call's span. Returns it and whether meritlens added stream_options.include_usage."""
    body = options.json_data
    model = None
    injected = False
    if body.__class__ is dict:
        model = body.get("model")
        if stream and route.usage_option and settings.include_usage:
            stream_options = body.get("stream_options")
            if stream_options is None or (stream_options.__class__ is dict and "include_usage" not in stream_options):
                options.json_data = {
                    **body,
                    "stream_options": {**(stream_options or {}), "include_usage": True},
                }
                injected = True
    scope = current_scope.get()
    if scope is None and not config.default_attributes:
        attributes = route.plain_attributes.copy()
    else:
        attributes = scope_attributes(route.own, settings.explicit)
        if settings.fallback_target is not None and c.TARGET_ID not in attributes:
            attributes[c.TARGET_ID] = settings.fallback_target
        if scope is not None and scope.frame is not None:
            scope.frame.nested_calls += 1
    parent = _get_current_span()
    if parent.is_recording():
        mark_enclosing_duplicates(parent)  # other instrumentations' spans around this very call
    if model.__class__ is not str:
        model = None
    else:
        attributes[_REQUEST_MODEL] = model
    attributes[_REQUEST_STREAM] = stream
    return CallRecorder(attributes, route.operation, settings.provider, model, count_retries=settings.count_retries), (
        injected
    )


_REQUEST_MODEL = c.GEN_AI_REQUEST_MODEL
_REQUEST_STREAM = c.GEN_AI_REQUEST_STREAM
_attach = otel_context.attach
_detach = otel_context.detach
_set_span_in_context = trace.set_span_in_context
_get_current_span = trace.get_current_span


def _settle(
    call: CallRecorder,
    route: _Route,
    result: Any,
    stream: bool,
    injected: bool,
    is_async: bool,
    raw_types: tuple[type, ...],
) -> Any:
    """Read a completed request's result into the span (or arrange to, for a stream). Returns ``result``."""
    try:
        family = route.family
        if stream:
            if family is CHAT:
                if observe_sdk_chat_stream(result, call, injected, is_async):
                    return result
            else:
                observation = StreamObservation(call, StreamReader(family, injected, sdk_objects=True))
                if observe_sdk_stream(result, observation, is_async):
                    return result
        elif not isinstance(result, raw_types):
            if family is CHAT:
                finish_chat_completion(call, result)
            else:
                reading = Reading()
                read_response(family, result, reading)
                call.finish(reading)
            return result
        _settle_raw(call, route, result, stream, injected, is_async)
    except Exception:
        report_internal_error("reading an instrumented call's result")
        call.finish(None)
    return result


def _raw_response_types() -> tuple[type, ...]:
    """The loaded SDKs' raw response wrappers (``with_raw_response`` / ``with_streaming_response`` results)."""
    found: list[type] = []
    for module_name, class_name in (
        ("openai._legacy_response", "LegacyAPIResponse"),
        ("openai._response", "BaseAPIResponse"),
        ("anthropic._response", "BaseAPIResponse"),
        ("anthropic._legacy_response", "LegacyAPIResponse"),
    ):
        module = sys.modules.get(module_name)
        cls = getattr(module, class_name, None) if module is not None else None
        if isinstance(cls, type):
            found.append(cls)
    return tuple(found)


def _settle_raw(call: CallRecorder, route: _Route, result: Any, stream: bool, injected: bool, is_async: bool) -> None:
    """``with_raw_response`` / ``with_streaming_response`` results, which the caller parses later."""
    http_response = getattr(result, "http_response", None)
    if http_response is None:
        call.finish(None)
        return
    if stream:
        # Parsing an SSE response only builds its Stream (no I/O), and the wrapper caches it, so the caller's
        # own parse() returns this very stream, observed in place.
        parse = getattr(result, "parse", None)
        if parse is not None and not inspect.iscoroutinefunction(parse):
            parsed = parse()
            observation = StreamObservation(call, StreamReader(route.family, injected, sdk_objects=True))
            if observe_sdk_stream(parsed, observation, is_async):
                return
        _finish_at_close(call, route, http_response, is_async)
        return
    if _body_read(http_response):
        _finish_from_body(call, route, http_response)
    else:
        _finish_at_close(call, route, http_response, is_async)


def _body_read(http_response: Any) -> bool:
    try:
        return http_response.content is not None  # raises when the body was not read
    except Exception:
        return False


def _finish_from_body(call: CallRecorder, route: _Route, http_response: Any) -> None:
    reading = Reading()
    try:
        read_response(route.family, json.loads(http_response.content), reading)
    except ValueError:
        pass  # not JSON: nothing to read
    call.finish(reading)


def _finish_at_close(call: CallRecorder, route: _Route, http_response: Any, is_async: bool) -> None:
    """For a body the caller reads later: end the span when the response closes, reading the body if it was read.

    An SSE body consumed this way (without the SDK's Stream) is not parsed: the span then has no token counts.
    """

    class _AtClose(StreamObservation):
        __slots__ = ()

        def finish(self, error: BaseException | None = None) -> None:
            if self.call.ended:
                return
            self.unwatch()
            if not self.reader.family == "sse" and _body_read(http_response):
                try:
                    _finish_from_body(self.call, route, http_response)
                    return
                except Exception:
                    report_internal_error("reading a raw response body")
            self.call.finish(None, error)

    observation = _AtClose(call, StreamReader("sse" if _is_sse(http_response) else route.family))
    hook_response_close(http_response, observation, is_async)


def _is_sse(http_response: Any) -> bool:
    content_type = http_response.headers.get("content-type", "")
    return "text/event-stream" in content_type


def sync_request(function: Any, client_ref: weakref.ref[Any], settings: Settings) -> Any:
    """The instance's ``request``: ``function`` (the class's, taking the client first) observed."""
    routes = settings.routes
    raw_types = _raw_response_types()

    def request(cast_to: Any, options: Any, *args: Any, stream: bool = False, **kwargs: Any) -> Any:
        route = routes.get(options.url)
        if route is None:
            return function(client_ref(), cast_to, options, *args, stream=stream, **kwargs)
        try:
            call, injected = _start(settings, route, options, stream)
            context_token = _attach(_set_span_in_context(call.span))
            call_token = current_call.set(call)
        except Exception:
            report_internal_error("starting an instrumented call")
            return function(client_ref(), cast_to, options, *args, stream=stream, **kwargs)
        try:
            result = function(client_ref(), cast_to, options, *args, stream=stream, **kwargs)
        except BaseException as error:
            _leave(call_token, context_token)
            call.finish(None, error)
            raise
        try:
            current_call.reset(call_token)
            _detach(context_token)
        except Exception:
            report_internal_error("leaving an instrumented call")
        return _settle(call, route, result, stream, injected, False, raw_types)

    request.__wrapped__ = function  # type: ignore[attr-defined]
    return request


def async_request(function: Any, client_ref: weakref.ref[Any], settings: Settings) -> Any:
    """The async twin of sync_request."""
    routes = settings.routes
    raw_types = _raw_response_types()

    async def request(cast_to: Any, options: Any, *args: Any, stream: bool = False, **kwargs: Any) -> Any:
        route = routes.get(options.url)
        if route is None:
            return await function(client_ref(), cast_to, options, *args, stream=stream, **kwargs)
        try:
            call, injected = _start(settings, route, options, stream)
            context_token = _attach(_set_span_in_context(call.span))
            call_token = current_call.set(call)
        except Exception:
            report_internal_error("starting an instrumented call")
            return await function(client_ref(), cast_to, options, *args, stream=stream, **kwargs)
        try:
            result = await function(client_ref(), cast_to, options, *args, stream=stream, **kwargs)
        except BaseException as error:
            _leave(call_token, context_token)
            call.finish(None, error)
            raise
        _leave(call_token, context_token)
        if stream and hasattr(result, "http_response"):
            parse = getattr(result, "parse", None)
            if parse is not None and inspect.iscoroutinefunction(parse):
                try:
                    await parse()  # builds and caches the AsyncStream (no I/O) so it can be observed in place
                except Exception:
                    report_internal_error("preparing a raw async stream")
                return _settle_async_raw_stream(call, route, result, injected)
        return _settle(call, route, result, stream, injected, True, raw_types)

    request.__wrapped__ = function  # type: ignore[attr-defined]
    return request


def _settle_async_raw_stream(call: CallRecorder, route: _Route, result: Any, injected: bool) -> Any:
    try:
        cached = getattr(result, "_parsed_by_type", None) or {}
        parsed = next(iter(cached.values()), None)
        observation = StreamObservation(call, StreamReader(route.family, injected, sdk_objects=True))
        if parsed is None or not observe_sdk_stream(parsed, observation, True):
            _finish_at_close(call, route, result.http_response, True)
    except Exception:
        report_internal_error("reading a raw async stream")
        call.finish(None)
    return result


def _leave(call_token: Any, context_token: Any) -> None:
    try:
        current_call.reset(call_token)
        _detach(context_token)
    except Exception:
        report_internal_error("leaving an instrumented call")
