"""Helpers for testing a metric without a collector: build spans by hand and call ``compute``.

>>> from meritlens.analytics.testing import make_span, scope_evidence
>>> evidence = scope_evidence([make_span(task_id="t1", outcome_success=True)])
>>> [task.success for task in evidence.tasks]
[True]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

from meritlens.analytics._metric import SCOPE_SPAN_COLUMNS, ScopeEvidence, SpanRow
from meritlens.analytics._windows import SCOPE_ALL
from meritlens.instrumentation import conventions as c

DEFAULT_TARGET = "test-app/answer"
_counter = itertools.count(1)
_BASE_NS = 1_700_000_000_000_000_000


def make_span(**columns: Any) -> SpanRow:
    """A SpanRow with sensible defaults (application role, unique ids, one second long); any
    `spans` column can be given by name, ``attributes``/``events`` as a dict/list."""
    unknown = sorted(set(columns) - set(SCOPE_SPAN_COLUMNS))
    if unknown:
        raise TypeError(f"unknown span columns {unknown}; use {list(SCOPE_SPAN_COLUMNS)}")
    n = next(_counter)
    start = columns.pop("start_unix_nano", _BASE_NS + n * 10_000_000_000)
    end = columns.pop("end_unix_nano", start + 1_000_000_000)
    values: dict[str, Any] = {name: None for name in SCOPE_SPAN_COLUMNS}
    values.update(
        trace_id=f"{n:032x}",
        span_id=f"{n:016x}",
        name="chat test-model",
        kind=3,
        start_unix_nano=start,
        end_unix_nano=end,
        duration_s=(end - start) / 1e9,
        status_code=0,
        target_id=DEFAULT_TARGET,
        role=c.ROLE_APPLICATION,
        operation=c.OP_CHAT,
        attributes={},
        resource={},
        events=[],
        links=[],
    )
    values.update(columns)
    return SpanRow(**values)


def output_attributes(text: str, *, input_text: str | None = None) -> dict[str, str]:
    """Span attributes recording an output (and optionally a user input) the GenAI way."""
    import json

    attributes = {c.GEN_AI_OUTPUT_MESSAGES: json.dumps(
        [{"role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": "stop"}]
    )}
    if input_text is not None:
        message = {"role": "user", "parts": [{"type": "text", "content": input_text}]}
        attributes[c.GEN_AI_INPUT_MESSAGES] = json.dumps([message])
    return attributes


def scope_evidence(spans: Iterable[SpanRow], *, target_id: str = DEFAULT_TARGET,
                   scope: str = SCOPE_ALL) -> ScopeEvidence:
    """The ScopeEvidence a metric would receive for these spans."""
    return ScopeEvidence.from_spans(target_id, scope, spans)
