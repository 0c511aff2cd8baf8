"""meritlens.instrumentation: turn an application's LLM calls into OpenTelemetry spans.

Needs only the OpenTelemetry SDK and the OTLP exporter; never imports the collector.
User guide: docs/instrumentation.md.

`RedactingSpanExporter` applies a redaction policy (`redaction`, docs/redaction.md) to spans before they
leave the process. `MeritlensInstrumentor` is the `opentelemetry-instrument` (zero-code) entry point; it needs the
`opentelemetry-instrumentation` package (`pip install 'meritlens[agent]'`).

Names are imported from their modules on first use, so a process that reads only the attribute
names (`conventions`: the collector, the CLI) does not load the OpenTelemetry SDK.
"""

from __future__ import annotations

from meritlens.instrumentation.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "_config": ("configure", "force_flush", "shutdown"),
    "_instrument": ("instrument", "uninstrument"),
    "_instrumentor": ("MeritlensInstrumentor",),
    "_observe": ("observe",),
    "_redact_export": ("RedactingSpanExporter",),
    "_task": ("Task", "current_task", "record_outcome", "step", "task", "tool"),
    "_usage": ("TokenUsage", "normalize_usage"),
    "pricing": ("price_call",),
}, submodules=("conventions", "redaction"))
