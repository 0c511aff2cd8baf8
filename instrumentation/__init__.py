"""meritlens.instrumentation: turn an application's LLM calls into OpenTelemetry spans.

Needs only the OpenTelemetry SDK and the OTLP exporter; never imports the collector.
User guide: docs/instrumentation.md.
"""

from meritlens.instrumentation import conventions
from meritlens.instrumentation._config import configure, force_flush, shutdown
from meritlens.instrumentation._instrument import instrument, uninstrument
from meritlens.instrumentation._observe import observe
from meritlens.instrumentation._task import Task, current_task, record_outcome, step, task, tool
from meritlens.instrumentation._usage import TokenUsage, normalize_usage
from meritlens.instrumentation.pricing import price_call

__all__ = [
    "Task",
    "TokenUsage",
    "configure",
    "conventions",
    "current_task",
    "force_flush",
    "instrument",
    "normalize_usage",
    "observe",
    "price_call",
    "record_outcome",
    "shutdown",
    "step",
    "task",
    "tool",
    "uninstrument",
]
