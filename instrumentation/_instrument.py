"""``instrument(client)``: observe every generation call made through an official openai/anthropic client.

The client's ``request`` method (through which every SDK method, helper, ``with_raw_response`` and
``with_streaming_response`` goes, once per logical call, retries included) is wrapped on the instance; the
class is untouched, so other clients are unaffected. Retries are counted by wrapping the client's
``_sleep_for_retry`` (which both SDKs call before each retry, and only then), attributed to the observed call
in progress through a context variable: a call that is not retried pays nothing for it.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from meritlens.instrumentation._requests import RETRY_METHOD, Settings, async_request, hook_retries, sync_request
from meritlens.instrumentation._state import (
    check_role,
    report_internal_error,
)
from meritlens.instrumentation._usage import PROVIDER_ANTHROPIC, PROVIDER_OPENAI

_MARK = "_meritlens_instrumentation"
_INSTANCE_METHODS = ("request", "copy", "with_options", RETRY_METHOD)


def _client_kind(client: Any) -> tuple[str, str, bool] | None:
    """(sdk, provider name, is_async) of a supported client, else None."""
    openai = sys.modules.get("openai")
    if openai is not None:
        if isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
            provider = PROVIDER_OPENAI
            azure = (getattr(openai, "AzureOpenAI", None), getattr(openai, "AsyncAzureOpenAI", None))
            if any(cls is not None and isinstance(client, cls) for cls in azure):
                provider = "azure.ai.openai"
            return PROVIDER_OPENAI, provider, isinstance(client, openai.AsyncOpenAI)
    anthropic = sys.modules.get("anthropic")
    if anthropic is not None:
        if isinstance(client, (anthropic.Anthropic, anthropic.AsyncAnthropic)):
            return PROVIDER_ANTHROPIC, PROVIDER_ANTHROPIC, isinstance(client, anthropic.AsyncAnthropic)
    return None


def instrument(
    client: Any,
    *,
    target: str | None = None,
    role: str | None = None,
    include_usage: bool = True,
    keep_sdk_spans: bool = False,
) -> Any:
    """Observe every generation call made through an official ``openai`` or ``anthropic`` client.

    Supports ``openai.OpenAI`` / ``AsyncOpenAI`` (Chat Completions, Responses, Completions, Embeddings) and
    ``anthropic.Anthropic`` / ``AsyncAnthropic`` (Messages), streaming or not, including the SDK helpers
    (``messages.stream()``, ``chat.completions.stream()``/``parse()``, ``with_raw_response``). The client is
    instrumented in place and returned; copies made with ``with_options()``/``copy()`` are instrumented too.
    Calling it again on the same client replaces the settings.

    ``include_usage``: for an openai chat/completions stream whose caller did not set
    ``stream_options.include_usage``, ask for it so the stream reports tokens; the extra usage-only chunk
    is consumed by meritlens and never reaches the caller's loop. ``keep_sdk_spans``: the anthropic SDK emits
    spans of its own when OpenTelemetry is configured; by default they are switched off on this client so
    each call is counted once (the meritlens span carries the same evidence and more).

    Raises TypeError for any other kind of object.
    """
    return instrument_client(
        client, target=target, role=role, include_usage=include_usage, keep_sdk_spans=keep_sdk_spans
    )


def instrument_client(
    client: Any,
    *,
    target: str | None = None,
    role: str | None = None,
    include_usage: bool = True,
    keep_sdk_spans: bool = False,
    fallback_target: str | None = None,
    by_agent: bool = False,
) -> Any:
    """:func:`instrument` with the zero-code agent's settings: ``fallback_target`` names the target only when
    nothing else does, and ``by_agent`` marks the client as the agent's (its ``uninstrument()`` undoes it)."""
    kind = _client_kind(client)
    if kind is None:
        raise TypeError(
            "instrument() supports openai.OpenAI/AsyncOpenAI and anthropic.Anthropic/AsyncAnthropic clients, "
            f"not {type(client).__name__}"
        )
    check_role(role)
    sdk, provider, is_async = kind
    if _MARK in client.__dict__:
        uninstrument(client)
    settings = Settings(
        provider, sdk, target, role, include_usage, keep_sdk_spans, is_async, fallback_target, by_agent
    )
    for name in _INSTANCE_METHODS:
        if name in client.__dict__:
            settings.saved[name] = client.__dict__[name]
    # The wrappers reach the client through a weak reference: a client -> wrapper -> client cycle would
    # leave every short-lived instrumented client (and its connection pool) to the cyclic garbage collector.
    client_ref = weakref.ref(client)
    own_request = client.__dict__.get("request")
    client.request = (async_request if is_async else sync_request)(
        type(client).request if own_request is None else _unbound(own_request), client_ref, settings
    )
    original_copy = _original(client, client_ref, "copy")

    def copy(*args: Any, **kwargs: Any) -> Any:
        copied = original_copy(*args, **kwargs)
        try:
            instrument_client(
                copied,
                target=target,
                role=role,
                include_usage=include_usage,
                keep_sdk_spans=keep_sdk_spans,
                fallback_target=fallback_target,
                by_agent=by_agent,
            )
        except Exception:
            report_internal_error("instrumenting a client copy")
        return copied

    client.copy = copy
    client.with_options = copy
    settings.count_retries = hook_retries(client, client_ref, is_async)
    if sdk == PROVIDER_ANTHROPIC and not keep_sdk_spans and "_lazy_tracer" in client.__dict__:
        settings.saved["_lazy_tracer"] = client.__dict__["_lazy_tracer"]
        client._lazy_tracer = None  # the SDK's own span would count this call a second time
    client.__dict__[_MARK] = settings
    return client


def instrumented_by_agent(client: Any) -> bool:
    """Whether the zero-code agent (not a call to instrument()) set up this client's instrumentation."""
    settings = client.__dict__.get(_MARK)
    return settings is not None and settings.by_agent


def _original(client: Any, client_ref: weakref.ref[Any], name: str) -> Any:
    """The client's own method ``name``: an instance attribute already there, else the class's, called weakly."""
    own = client.__dict__.get(name)
    if own is not None:
        return own
    function = getattr(type(client), name)

    def original(*args: Any, **kwargs: Any) -> Any:
        return function(client_ref(), *args, **kwargs)

    original.__wrapped__ = function  # type: ignore[attr-defined]
    return original


def _unbound(method: Any) -> Any:
    """A callable taking the client first, around an instance attribute that already has it bound."""

    def unbound(_client: Any, *args: Any, **kwargs: Any) -> Any:
        return method(*args, **kwargs)

    unbound.__wrapped__ = method  # type: ignore[attr-defined]
    return unbound


def uninstrument(client: Any) -> Any:
    """Undo :func:`instrument` on this client (copies made meanwhile stay instrumented). Returns the client."""
    settings = client.__dict__.pop(_MARK, None)
    if settings is None:
        return client
    for name in _INSTANCE_METHODS:
        client.__dict__.pop(name, None)
        if name in settings.saved:
            client.__dict__[name] = settings.saved[name]
    if "_lazy_tracer" in settings.saved:
        client._lazy_tracer = settings.saved["_lazy_tracer"]
    return client
