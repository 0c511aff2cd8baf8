"""meritlens.analytics: metric catalogue, windows, profiles, readiness and queries.

Names are imported from their private modules on first use, so a process that needs only a few
(the collector reads the schema and the window model) does not load the rest."""

from __future__ import annotations

from meritlens.instrumentation.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "_catalogue": ("CATALOGUE", "METRIC_IDS", "METRICS", "Aggregation", "Direction", "MetricGroup", "MetricKind", "MetricSpec", "SampleUnit", "Source", "get_metric",),
    "_compare": ("Comparison", "compare",),
    "_rules": ("ComparisonError", "MetricRule", "ResultState", "Verdict",),
    "_calculator": ("recompute_interval",),
    "_manifest": ("Arm", "ExperimentError", "ExperimentManifest", "ExperimentNotFound", "shuffled_case_order",),
    "_arm_check": ("ArmCheck", "check_arm",),
    "_manifest_store": ("load_experiment",),
    "_frontier": ("Frontier", "frontier",),
    "_plots": ("plot_frontier",),
    "_profiles": ("MetricPlan", "ProfileError", "ProfileProblem", "SamplingStrategy", "TaskProfile", "load_profile", "profile_from_dict",),
    "_readiness": ("CoverageReport", "MetricReadiness", "QueryFunction", "check_readiness",),
    "_evaluate": ("EvaluationError", "EvaluationResult", "evaluate",),
    "_judge": ("FakeJudge", "Judge", "JudgeCall", "JudgeError", "JudgeReply", "JudgeSession",),
    "_metric": ("Measurement", "Metric", "MetricOptions", "OptionError", "ScopeEvidence", "SpanRow", "TaskRecord",),
    "_registry": ("BUILTIN_METRICS", "ENTRY_POINT_GROUP", "MetricRegistry", "load_registry",),
    "_sidecar": ("KeyedObservation", "read_sidecar", "sidecar_path", "write_sidecar",),
    "_windows": ("SCOPE_ALL", "Window", "WindowState", "list_windows_sql",),
    "_definitions": ("PLUGIN_ONLY_METRICS", "SPAN_WINDOW_METRICS", "WINDOW_DEFINITIONS", "WindowDefinition",),
    "_tasks": ("TASK_FIELDS",),
})
