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
from meritlens.analytics._evaluate import EvaluationError, EvaluationResult, evaluate
from meritlens.analytics._judge import FakeJudge, Judge, JudgeCall, JudgeError, JudgeReply, JudgeSession
from meritlens.analytics._metric import (
    Measurement,
    Metric,
    MetricOptions,
    OptionError,
    ScopeEvidence,
    SpanRow,
    TaskRecord,
)
from meritlens.analytics._registry import BUILTIN_METRICS, ENTRY_POINT_GROUP, MetricRegistry, load_registry
from meritlens.analytics._sidecar import KeyedObservation, read_sidecar, sidecar_path, write_sidecar
from meritlens.analytics._windows import (
    SCOPE_ALL,
    WINDOW_DEFINITIONS,
    Window,
    WindowDefinition,
    WindowState,
)

__all__ = [
    "BUILTIN_METRICS",
    "CATALOGUE",
    "ENTRY_POINT_GROUP",
    "EvaluationError",
    "EvaluationResult",
    "FakeJudge",
    "Judge",
    "JudgeCall",
    "JudgeError",
    "JudgeReply",
    "JudgeSession",
    "KeyedObservation",
    "Measurement",
    "Metric",
    "MetricOptions",
    "MetricRegistry",
    "OptionError",
    "ScopeEvidence",
    "SpanRow",
    "TaskRecord",
    "evaluate",
    "load_registry",
    "read_sidecar",
    "sidecar_path",
    "write_sidecar",
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
