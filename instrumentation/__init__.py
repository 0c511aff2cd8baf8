"""meritlens.instrumentation: turn an application's LLM calls into OpenTelemetry spans.

Needs only the OpenTelemetry SDK and the OTLP exporter; never imports the collector.
User guide: docs/instrumentation.md.

Names are imported from their modules on first use, so a process that reads only the attribute
names (`conventions`: the collector, the CLI) does not load the OpenTelemetry SDK.
"""

from __future__ import annotations

import importlib

_EXPORTS: dict[str, tuple[str, ...]] = {
    "_config": ("configure", "force_flush", "shutdown"),
    "_instrument": ("instrument", "uninstrument"),
    "_observe": ("observe",),
    "_task": ("Task", "current_task", "record_outcome", "step", "task", "tool"),
    "_usage": ("TokenUsage", "normalize_usage"),
    "pricing": ("price_call",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted([*_MODULE_OF, "conventions"])


def __getattr__(name: str):
    if name == "conventions":
        value = importlib.import_module(f"{__name__}.conventions")
    else:
        module = _MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
