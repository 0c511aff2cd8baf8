"""meritlens.instrumentation: turn an application's LLM calls into OpenTelemetry spans.

Needs only the OpenTelemetry SDK and the OTLP exporter; never imports the collector.
"""

from meritlens.instrumentation import conventions

__all__ = ["conventions"]
