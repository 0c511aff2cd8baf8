"""The ``@observe`` decorator: one CLIENT span per call of an application's LLM-calling function."""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Iterator
from typing import Any, Callable, TypeVar, overload

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._call import CallRecorder
from meritlens.instrumentation._state import Scope, check_role, current_scope, report_internal_error, scope_attributes
from meritlens.instrumentation._streams import StreamObservation, observe_sdk_stream
from meritlens.instrumentation._reading import Reading, StreamReader, read_response
from meritlens.instrumentation._usage import FAMILY_PROVIDER, family_of

F = TypeVar("F", bound=Callable[..., Any])

# Types whose instances are returned values, never streams to observe.
_PLAIN_VALUES = (str, bytes, bytearray, dict, list, tuple, set, frozenset, int, float, bool)


class _Settings:
    __slots__ = ("own", "explicit", "operation", "provider", "role")

    def __init__(self, target: str | None, role: str | None, operation: str, provider: str | None) -> None:
        check_role(role)
        self.operation = operation
        self.provider = provider
        self.role = role
        own: dict[str, Any] = {c.GEN_AI_OPERATION_NAME: operation, c.ROLE: c.ROLE_APPLICATION}
        if provider is not None:
            own[c.GEN_AI_PROVIDER_NAME] = provider
        self.own = own
        explicit: dict[str, Any] = {}
        if target is not None:
            explicit[c.TARGET_ID] = target
        if role is not None:
            explicit[c.ROLE] = role
        self.explicit = explicit


class _Frame:
    """An observed call in progress: its span, and the scope it opened for code running inside it."""

    __slots__ = ("call", "scope_token", "context_token")

    def __init__(self, settings: _Settings, kwargs: dict[str, Any]) -> None:
        attributes = scope_attributes(settings.own, settings.explicit)
        model = kwargs.get("model")
        request_model = model if isinstance(model, str) and model else None
        if request_model is not None:
            attributes[c.GEN_AI_REQUEST_MODEL] = request_model
        call = self.call = CallRecorder(attributes, settings.operation, settings.provider, request_model)
        outer = current_scope.get()
        inherited = dict(outer.attributes) if outer is not None else {}
        inherited.update(settings.explicit)
        self.scope_token = current_scope.set(Scope(inherited, outer.task if outer is not None else None, call))
        self.context_token = call.activate()

    def leave(self) -> None:
        try:
            CallRecorder.deactivate(self.context_token)
            current_scope.reset(self.scope_token)
        except Exception:
            report_internal_error("leaving an observed call")


def _enter(settings: _Settings, kwargs: dict[str, Any]) -> _Frame | None:
    try:
        return _Frame(settings, kwargs)
    except Exception:
        report_internal_error("starting an observed call")
        return None


def _settle(call: CallRecorder, result: Any) -> Any:
    """Read ``result`` into the span: now for a complete response, or as the consumer reads a stream.

    Returns ``result`` itself, except for a plain generator or iterator, which comes back wrapped.
    """
    try:
        if result is None or isinstance(result, _PLAIN_VALUES) and not isinstance(result, dict):
            call.finish(None)
            return result
        family = family_of(result)
        if family is not None:
            reading = Reading()
            read_response(family, result, reading)
            _learn_provider(call, family)
            call.streamed = False
            call.finish(reading)
            return result
        return _settle_stream(call, result)
    except Exception:
        report_internal_error("reading an observed call's result")
        call.finish(None)
        return result


def _learn_provider(call: CallRecorder, family: str | None) -> None:
    if call.provider is None and family is not None:
        call.provider = FAMILY_PROVIDER.get(family)
        if call.provider is not None:
            call.span.set_attribute(c.GEN_AI_PROVIDER_NAME, call.provider)


class _LearningReader(StreamReader):
    """A StreamReader that also names the provider on the span once it recognizes the events."""

    __slots__ = ("call",)

    def __init__(self, call: CallRecorder) -> None:
        super().__init__(None)
        self.call = call

    def finish(self) -> Reading:
        _learn_provider(self.call, self.family)
        return super().finish()


def _settle_stream(call: CallRecorder, result: Any) -> Any:
    call.streamed = True  # until shown otherwise below
    observation = StreamObservation(call, _LearningReader(call))
    if _is_sdk_object(result):
        raw = getattr(result, "_raw_stream", None)  # SDK helpers (MessageStream, ChatCompletionStream...)
        stream = raw if raw is not None else result
        if observe_sdk_stream(stream, observation, hasattr(type(stream), "__anext__")):
            return result
    if inspect.isgenerator(result):
        return _observe_generator(result, observation)
    if inspect.isasyncgen(result):
        return _observe_async_generator(result, observation)
    if hasattr(result, "__next__"):
        proxy = _IteratorProxy(result, observation)
        observation.watch(proxy)
        return proxy
    if hasattr(result, "__anext__"):
        async_proxy = _AsyncIteratorProxy(result, observation)
        observation.watch(async_proxy)
        return async_proxy
    call.streamed = None  # neither a response nor a stream: unknown
    call.finish(None)
    return result


def _is_sdk_object(value: Any) -> bool:
    return type(value).__module__.partition(".")[0] in _SDK_PACKAGES


_SDK_PACKAGES = frozenset({"openai", "anthropic"})


# --- generators and iterators that are not SDK streams ---------------------------------------------------------


def _generator_driver(prologue: Callable[..., tuple[Any, StreamObservation | None]]) -> Callable[..., Any]:
    """A generator function that runs ``prologue(*args, **kwargs)`` at first iteration to get the inner generator
    and its observation, then yields from it with the full protocol (send, throw, close) while observing items.
    """

    def driven(*args: Any, **kwargs: Any) -> Any:
        inner, observation = prologue(*args, **kwargs)
        if observation is None:
            return (yield from inner)
        feed = observation.feed
        to_send: Any = None
        thrown: BaseException | None = None
        while True:
            observation.pulling = True
            try:
                if thrown is not None:
                    error, thrown = thrown, None
                    item = inner.throw(error)
                else:
                    item = inner.send(to_send)
            except StopIteration as stop:
                observation.pulling = False
                observation.finish()
                return stop.value
            except BaseException as error:
                observation.pulling = False
                observation.finish(error)
                raise
            observation.pulling = False
            if not feed(item):
                to_send = None
                continue
            try:
                to_send = yield item
            except GeneratorExit:
                observation.finish()
                inner.close()
                raise
            except BaseException as error:
                thrown = error
                to_send = None

    return driven


def _async_generator_driver(prologue: Callable[..., tuple[Any, StreamObservation | None]]) -> Callable[..., Any]:
    """The async twin of _generator_driver (asend, athrow, aclose)."""

    async def driven(*args: Any, **kwargs: Any) -> Any:
        inner, observation = prologue(*args, **kwargs)
        if observation is None:
            async for item in inner:
                yield item
            return
        feed = observation.feed
        to_send: Any = None
        thrown: BaseException | None = None
        while True:
            observation.pulling = True
            try:
                if thrown is not None:
                    error, thrown = thrown, None
                    item = await inner.athrow(error)
                else:
                    item = await inner.asend(to_send)
            except StopAsyncIteration:
                observation.pulling = False
                observation.finish()
                return
            except BaseException as error:
                observation.pulling = False
                observation.finish(error)
                raise
            observation.pulling = False
            if not feed(item):
                to_send = None
                continue
            try:
                to_send = yield item
            except GeneratorExit:
                observation.finish()
                await inner.aclose()
                raise
            except BaseException as error:
                thrown = error
                to_send = None

    return driven


def _given(inner: Any, observation: StreamObservation) -> tuple[Any, StreamObservation]:
    return inner, observation


_observe_generator = _generator_driver(_given)
_observe_async_generator = _async_generator_driver(_given)


class _IteratorProxy:
    """Forwards everything to a returned iterator (attributes, iteration, ``with``, close) while observing it."""

    __slots__ = ("_inner", "_observation", "__weakref__")

    def __init__(self, inner: Iterator[Any], observation: StreamObservation) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_observation", observation)

    def __iter__(self) -> _IteratorProxy:
        return self

    def __next__(self) -> Any:
        observation = self._observation
        while True:
            observation.pulling = True
            try:
                item = next(self._inner)
            except StopIteration:
                observation.pulling = False
                observation.finish()
                raise
            except BaseException as error:
                observation.pulling = False
                observation.finish(error)
                raise
            observation.pulling = False
            if observation.feed(item):
                return item

    def close(self) -> Any:
        self._observation.finish()
        close = getattr(self._inner, "close", None)
        return close() if close is not None else None

    def __enter__(self) -> Any:
        enter = getattr(self._inner, "__enter__", None)
        if enter is None:
            raise TypeError(f"{type(self._inner).__name__!r} object does not support the context manager protocol")
        entered = enter()
        return self if entered is self._inner else entered

    def __exit__(self, *exc_info: Any) -> Any:
        self._observation.finish(exc_info[1])
        exit_ = getattr(self._inner, "__exit__", None)
        return exit_(*exc_info) if exit_ is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def __repr__(self) -> str:
        return repr(self._inner)


class _AsyncIteratorProxy:
    """The async twin of _IteratorProxy."""

    __slots__ = ("_inner", "_observation", "__weakref__")

    def __init__(self, inner: AsyncIterator[Any], observation: StreamObservation) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_observation", observation)

    def __aiter__(self) -> _AsyncIteratorProxy:
        return self

    async def __anext__(self) -> Any:
        observation = self._observation
        while True:
            observation.pulling = True
            try:
                item = await self._inner.__anext__()
            except StopAsyncIteration:
                observation.pulling = False
                observation.finish()
                raise
            except BaseException as error:
                observation.pulling = False
                observation.finish(error)
                raise
            observation.pulling = False
            if observation.feed(item):
                return item

    async def aclose(self) -> Any:
        self._observation.finish()
        aclose = getattr(self._inner, "aclose", None) or getattr(self._inner, "close", None)
        if aclose is None:
            return None
        result = aclose()
        return await result if inspect.isawaitable(result) else result

    async def __aenter__(self) -> Any:
        aenter = getattr(self._inner, "__aenter__", None)
        if aenter is None:
            raise TypeError(
                f"{type(self._inner).__name__!r} object does not support the async context manager protocol"
            )
        entered = await aenter()
        return self if entered is self._inner else entered

    async def __aexit__(self, *exc_info: Any) -> Any:
        self._observation.finish(exc_info[1])
        aexit = getattr(self._inner, "__aexit__", None)
        return await aexit(*exc_info) if aexit is not None else None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._inner, name, value)

    def __repr__(self) -> str:
        return repr(self._inner)


# --- the decorator -------------------------------------------------------------------------------------------


def _generator_prologue(func: Callable[..., Any], settings: _Settings) -> Callable[..., Any]:
    def prologue(*args: Any, **kwargs: Any) -> tuple[Any, StreamObservation | None]:
        frame = _enter(settings, kwargs)
        if frame is None:
            return func(*args, **kwargs), None
        try:
            inner = func(*args, **kwargs)
        except BaseException as error:
            frame.leave()
            frame.call.finish(None, error)
            raise
        frame.leave()
        frame.call.streamed = True
        return inner, StreamObservation(frame.call, _LearningReader(frame.call))

    return prologue


def _decorate(func: F, settings: _Settings) -> F:
    if inspect.isasyncgenfunction(func):
        return functools.wraps(func)(_async_generator_driver(_generator_prologue(func, settings)))  # type: ignore[return-value]

    if inspect.isgeneratorfunction(func):
        return functools.wraps(func)(_generator_driver(_generator_prologue(func, settings)))  # type: ignore[return-value]

    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def observed_coroutine(*args: Any, **kwargs: Any) -> Any:
            frame = _enter(settings, kwargs)
            if frame is None:
                return await func(*args, **kwargs)
            try:
                result = await func(*args, **kwargs)
            except BaseException as error:
                frame.leave()
                frame.call.finish(None, error)
                raise
            frame.leave()
            return _settle(frame.call, result)

        return observed_coroutine  # type: ignore[return-value]

    @functools.wraps(func)
    def observed(*args: Any, **kwargs: Any) -> Any:
        frame = _enter(settings, kwargs)
        if frame is None:
            return func(*args, **kwargs)
        try:
            result = func(*args, **kwargs)
        except BaseException as error:
            frame.leave()
            frame.call.finish(None, error)
            raise
        frame.leave()
        return _settle(frame.call, result)

    return observed  # type: ignore[return-value]


@overload
def observe(func: F) -> F: ...
@overload
def observe(
    func: None = None,
    *,
    target: str | None = None,
    role: str | None = None,
    operation: str = c.OP_CHAT,
    provider: str | None = None,
) -> Callable[[F], F]: ...
def observe(
    func: Any = None,
    *,
    target: str | None = None,
    role: str | None = None,
    operation: str = c.OP_CHAT,
    provider: str | None = None,
) -> Any:
    """Emit one CLIENT span per call of the decorated LLM-calling function.

    Works on sync and async functions, generators and async generators, and functions returning streams.
    Usage, model, finish reasons and requested tool calls are read from what the function returns: openai
    (Chat Completions, Responses) and anthropic (Messages) response objects, their stream events, or plain
    dicts of the same shapes. The span is named ``{operation} {model}``; it ends when the function returns,
    or, for a stream, when the stream is exhausted, closed or garbage-collected.

    ``target`` sets ``meritlens.target.id`` (else the enclosing task's, else configure()'s); ``role`` is
    ``application`` (default) or ``orchestration`` for a harness's or judge's own calls. ``provider`` names
    ``gen_ai.provider.name`` when the result does not tell. A ``model=`` keyword argument of the call, when
    present, names the request model. Exceptions propagate unchanged.
    """
    settings = _Settings(target, role, operation, provider)
    if func is not None:
        return _decorate(func, settings)
    return lambda decorated: _decorate(decorated, settings)
