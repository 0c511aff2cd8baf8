"""meritlens.analytics.engine: what the collector, its commands and the benchmarks compute with.

The table schemas, the span rules and task fields, the window definitions and their sample SQL, the
window accumulator and evidence digests, readiness, experiments, comparisons, frontiers and the
evaluator. Plugin authors and applications use `meritlens.analytics` instead, whose names stay
stable; the names here follow the engines.

Names are imported from their modules on first use, so a process that needs a few (a collector's
settings read the quantile scale; `meritlens --help` reads none) loads neither numpy nor pydantic.
"""

from __future__ import annotations

from meritlens.instrumentation.exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "_schema": (
        "ADDED_WINDOW_COLUMNS", "COVERAGE_COLUMN_NAMES", "COVERAGE_DDL", "COVERAGE_TABLE", "SPANS_DDL", "SPANS_TABLE",
        "SPAN_COLUMNS", "SPAN_COLUMN_NAMES", "WINDOWS_DDL", "WINDOWS_TABLE", "WINDOW_COLUMNS", "WINDOW_COLUMN_NAMES",
        "WINDOW_KEY_COLUMNS", "WINDOW_STATE_COLUMN_NAMES", "WINDOW_STATE_TABLE", "WINDOW_WATERMARK_COLUMN_NAMES",
        "WINDOW_WATERMARK_TABLE", "WINDOWS_BY_TIME_COLUMN_NAMES", "WINDOWS_BY_TIME_DDL", "WINDOWS_BY_TIME_TABLE",
        "WINDOW_BUCKET_CUTOFFS_TABLE", "WINDOW_BUCKET_STATE_DDL", "WINDOW_BUCKET_STATE_TABLE",
    ),
    "_views": ("COVERAGE_VIEW", "STORE_DDL", "TASKS_VIEW"),
    "_catalogue": ("CATALOGUE", "METRICS", "Direction"),
    "_sql": ("sql_string",),
    "_format": ("format_value", "significant"),
    # spans, tasks and windows
    "_tasks": ("APPLICATION_SPANS", "ERROR_SPAN", "TASK_KEY", "flagged_spans_sql"),
    "_windows": ("EVALUATED_SUFFIX", "EVIDENCE_MEDIA_TYPE", "SCOPE_ALL", "Window", "list_windows_sql"),
    "_definitions": ("DEFINITIONS_BY_METRIC", "SPAN_WINDOW_METRICS", "sample_statistic"),
    "_samples": (
        "KEY_HIGH", "KEY_LOW", "SAMPLE_ROW_COLUMNS", "SAMPLE_VALUES", "WINDOW_INPUT_COLUMNS", "sample_rows_sql",
        "window_samples_sql",
    ),
    "_task_samples": ("TASK_SAMPLE_METRICS", "task_samples_sql"),
    "_evidence": ("span_keys_digest", "window_definitions_digest"),
    "_scale": ("DEFAULT_RELATIVE_ERROR", "scale_for"),
    "_accumulate": ("DEFAULT_SCALE", "WindowAccumulator", "WindowBook", "WindowId", "WindowKey", "delta_keys"),
    "_time_buckets": (
        "BUCKET_KEY_COLUMNS", "HOUR_US", "BucketCutoffs", "RangeWindows", "bucket_range", "bucketed", "compact",
        "keys_in", "merge_plan", "merge_range", "parse_duration",
    ),
    "_window_io": ("WindowRejected", "window_to_json", "windows_from_json"),
    # regressions and plans over the windows by time
    "_regression_report": ("DEFAULT_BASELINE_US", "DEFAULT_RECENT_US", "ReportRanges", "hours_ending",
                           "plan_report", "regression_report"),
    "_regression_text": ("format_plans", "format_regressions"),
    "_regressions": ("Change",),
    "_planning": ("DEFAULT_POWER",),
    # profiles and readiness
    "_profiles": ("ProfileError", "TaskProfile", "format_plan", "load_profile", "profile_from_dict"),
    "_readiness": (
        "CoverageReport", "UnknownSubject", "check_readiness", "coverage_row", "format_report", "judged",
        "record_coverage_sql", "report_json", "require_known",
    ),
    # alert rules
    "_alerts": ("AlertRule", "RuleKind", "evaluate_rule", "no_data", "sequence_start"),
    "_alert_rules": ("NO_DATA", "ProfileAlert"),
    # experiments and decisions
    "_manifest": ("Arm", "ExperimentError", "ExperimentManifest", "ExperimentNotFound", "validate_manifest"),
    "_manifest_store": ("list_experiments_sql", "load_experiment", "save_manifest"),
    "_arm_check": ("check_arm",),
    "_arm_lifecycle": ("finish_arm", "start_arm"),
    "_rules": ("ComparisonError",),
    "_compare": ("compare",),
    "_compare_text": ("format_comparison",),
    "_frontier": ("format_frontier", "frontier"),
    "_plots": ("PLOT_SUFFIXES", "plot_frontier"),
    # evaluation
    "_evaluate": ("EvaluationError", "QueryPage", "default_run_dir", "evaluate"),
    "_judge": ("JudgeCall", "JudgeError", "is_fake_model", "judge_from_spec"),
    "_metric": ("MetricOptions",),
    "_registry": ("load_registry",),
}, base="meritlens.analytics")
