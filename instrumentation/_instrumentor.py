"""Zero-code: ``opentelemetry-instrument python app.py`` observes every openai and anthropic client the
application creates, exactly as ``instrument(client)`` does, with no meritlens code in the application.

The agent finds :class:`MeritlensInstrumentor` through the ``opentelemetry_instrumentor`` entry point
``meritlens``. It wraps the ``__init__`` of the SDKs' client classes, so each new client (Azure variants and
copies included) is instrumented on its instance; the classes' methods stay untouched. Needs the
``opentelemetry-instrumentation`` package (``pip install 'meritlens[agent]'``), which the agent itself is.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import weakref
from collections.abc import Collection
from typing import Any

from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # type: ignore[attr-defined]
from opentelemetry.sdk.resources import OTELResourceDetector

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._config import configure, shutdown
from meritlens.instrumentation._foreign import DuplicateMarker
from meritlens.instrumentation._instrument import instrument_client, instrumented_by_agent, uninstrument
from meritlens.instrumentation._state import config, log, report_internal_error

TARGET_ENV = "MERITLENS_TARGET"
"""The target ID of every call the agent observes (else the resource's ``meritlens.target.id``)."""

# The SDK client classes whose construction is observed; subclasses (Azure) go through their __init__.
_CLIENT_CLASSES = (("openai", ("OpenAI", "AsyncOpenAI")), ("anthropic", ("Anthropic", "AsyncAnthropic")))
_ABSENT = object()
# One marker per tracer provider: the SDK offers no way to remove a span processor, so a marker is
# switched off at uninstrument() and switched on again by the next instrument().
_markers: weakref.WeakKeyDictionary[Any, DuplicateMarker] = weakref.WeakKeyDictionary()


def agent_target(provider: Any) -> str | None:
    """``MERITLENS_TARGET``, else ``meritlens.target.id`` of the provider's resource (of
    ``OTEL_RESOURCE_ATTRIBUTES`` when the provider has none yet), else None."""
    value = os.environ.get(TARGET_ENV, "").strip()
    if value:
        return value
    attributes = getattr(getattr(provider, "resource", None), "attributes", None)
    if attributes is None:
        attributes = OTELResourceDetector().detect().attributes
    resource_target = attributes.get(c.TARGET_ID)
    return str(resource_target) if resource_target else None


class MeritlensInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """The ``opentelemetry-instrument`` entry point: every openai/anthropic client gets ``instrument()``.

    ``instrument(tracer_provider=…, target=…)`` when called in code: the provider is used as by
    ``configure(tracer_provider=…)`` unless meritlens is already configured; ``target`` overrides
    ``MERITLENS_TARGET`` and the resource. ``uninstrument()`` restores the client classes exactly and
    uninstruments the clients it instrumented.
    """

    _patched: dict[type, Any]
    _clients: weakref.WeakSet[Any]
    _configured: Any = None

    def instrumentation_dependencies(self) -> Collection[str]:
        # Either SDK is enough and neither is required: _instrument patches the ones installed.
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        provider = kwargs.get("tracer_provider")
        if provider is not None and config.tracer_provider is None:
            configure(tracer_provider=provider)
            self._configured = provider
        provider = provider or config.tracer_provider or trace.get_tracer_provider()
        target = kwargs.get("target") or agent_target(provider)
        if target is None:
            log.info("meritlens: no target ID (set %s or the resource attribute %s); spans carry none",
                     TARGET_ENV, c.TARGET_ID)
        self._patched = {}
        self._clients = weakref.WeakSet()
        for module_name, class_names in _CLIENT_CLASSES:
            try:
                if importlib.util.find_spec(module_name) is None:
                    continue
                module = importlib.import_module(module_name)
            except Exception:
                report_internal_error(f"importing {module_name}")
                continue
            for name in class_names:
                cls = getattr(module, name, None)
                if isinstance(cls, type):
                    self._patch(cls, target)
        self._mark_duplicates(provider)

    def _patch(self, cls: type, target: str | None) -> None:
        original = cls.__dict__.get("__init__", _ABSENT)
        init = cls.__init__
        clients = self._clients

        @functools.wraps(init)
        def __init__(client: Any, *args: Any, **kwargs: Any) -> None:
            init(client, *args, **kwargs)
            try:
                instrument_client(client, fallback_target=target, by_agent=True)
                clients.add(client)
            except Exception:
                report_internal_error("instrumenting a new client")

        cls.__init__ = __init__  # type: ignore[misc]
        self._patched[cls] = (original, __init__)

    def _mark_duplicates(self, provider: Any) -> None:
        if not hasattr(provider, "add_span_processor"):
            return  # no SDK provider (the API's no-op one): no span is recorded to mark
        try:
            marker = _markers.get(provider)
            if marker is None:
                marker = _markers[provider] = DuplicateMarker()
                provider.add_span_processor(marker)
            marker.active = True
        except Exception:
            report_internal_error("adding the duplicate-span marker")

    def _uninstrument(self, **kwargs: Any) -> None:
        for cls, (original, ours) in self._patched.items():
            if cls.__dict__.get("__init__") is not ours:
                log.warning("meritlens: %s.__init__ was wrapped again after meritlens; left as it is", cls.__name__)
            elif original is _ABSENT:
                del cls.__init__  # type: ignore[misc]
            else:
                cls.__init__ = original  # type: ignore[misc]
        self._patched = {}
        for client in list(self._clients):
            if instrumented_by_agent(client):  # a client the application instrumented itself keeps its settings
                uninstrument(client)
        self._clients = weakref.WeakSet()
        for marker in _markers.values():
            marker.active = False
        if self._configured is not None and config.tracer_provider is self._configured:
            shutdown()
        self._configured = None
