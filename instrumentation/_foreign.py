"""Other GenAI instrumentations' spans of a call that a meritlens span also records.

The official openai-v2 instrumentation and OpenLLMetry open their spans around the SDK method, so they are
ancestors of ours (one inside the other when both are installed); OpenInference wraps the client's
``request``, so its span is the child of ours. Either way the same call would be counted twice (under a
target from the resource or the collector's fallback), so those spans are marked
``meritlens.role = duplicate``: stored as sent, never counted in a window.
"""

from __future__ import annotations

import weakref
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import SpanProcessor

from meritlens.instrumentation import conventions as c
from meritlens.instrumentation._state import current_call, report_internal_error

_LLM_OPERATIONS = frozenset((c.OP_CHAT, c.OP_TEXT_COMPLETION, c.OP_EMBEDDINGS, "generate_content"))
_OPENINFERENCE_LLM_KINDS = frozenset(("LLM", "EMBEDDING"))


def is_foreign_llm_span(span: Any) -> bool:
    """Whether ``span`` (an SDK span still being recorded) is another instrumentation's LLM-call span.

    Read from the attributes the instrumentations set when they open the span: the GenAI operation
    (openai-v2), the OpenInference span kind, OpenLLMetry's request type.
    """
    scope = getattr(span, "instrumentation_scope", None)
    if scope is None or scope.name == c.TRACER_NAME:
        return False
    attributes = getattr(span, "attributes", None)
    if not attributes:
        return False
    return (
        attributes.get(c.GEN_AI_OPERATION_NAME) in _LLM_OPERATIONS
        or attributes.get(c.OPENINFERENCE_SPAN_KIND) in _OPENINFERENCE_LLM_KINDS
        or c.OPENLLMETRY_REQUEST_TYPE in attributes
    )


# Other instrumentations' LLM spans still open, by span id, while a DuplicateMarker is active: how a call
# finds the ancestors of its direct parent (a span knows only its parent's id).
_open_llm_spans: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def mark_enclosing_duplicates(span: Any) -> None:
    """Mark the other instrumentations' LLM spans directly around a meritlens call: ``span`` (the call's
    parent) and, through the open spans a DuplicateMarker tracks, each LLM span around that one."""
    try:
        while span is not None and span.is_recording() and is_foreign_llm_span(span):
            span.set_attribute(c.ROLE, c.ROLE_DUPLICATE)
            parent = span.parent
            span = _open_llm_spans.get(parent.span_id) if parent is not None else None
    except Exception:
        report_internal_error("marking another instrumentation's span")


class DuplicateMarker(SpanProcessor):
    """Marks the LLM spans other instrumentations open *inside* an instrumented call (OpenInference's), and
    keeps their open LLM spans at hand for the calls that start under them (mark_enclosing_duplicates)."""

    def __init__(self) -> None:
        self.active = True

    def on_start(self, span: Any, parent_context: otel_context.Context | None = None) -> None:
        if not self.active:
            return
        try:
            if not is_foreign_llm_span(span):
                return
            call = current_call.get()
            parent = span.parent
            if call is not None and parent is not None and parent.span_id == call.span.get_span_context().span_id:
                span.set_attribute(c.ROLE, c.ROLE_DUPLICATE)
            else:
                _open_llm_spans[span.get_span_context().span_id] = span
        except Exception:
            report_internal_error("checking another instrumentation's span")

    def on_end(self, span: Any) -> None:
        if _open_llm_spans:
            try:
                _open_llm_spans.pop(span.get_span_context().span_id, None)
            except Exception:
                report_internal_error("forgetting another instrumentation's span")

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True
