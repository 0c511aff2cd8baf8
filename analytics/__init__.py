"""meritlens.analytics: metric catalogue, windows, profiles, readiness and queries."""

from meritlens.analytics._catalogue import (
    CATALOGUE,
    METRIC_IDS,
    METRICS,
    Aggregation,
    Direction,
    MetricGroup,
    MetricSpec,
    SampleUnit,
    Source,
    get_metric,
)
from meritlens.analytics._windows import (
    SCOPE_ALL,
    WINDOW_DEFINITIONS,
    Window,
    WindowDefinition,
    WindowState,
)

__all__ = [
    "CATALOGUE",
    "METRIC_IDS",
    "METRICS",
    "SCOPE_ALL",
    "WINDOW_DEFINITIONS",
    "Aggregation",
    "Direction",
    "MetricGroup",
    "MetricSpec",
    "SampleUnit",
    "Source",
    "Window",
    "WindowDefinition",
    "WindowState",
    "get_metric",
]
