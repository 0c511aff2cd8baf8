"""The stored tables' columns: the one home of the `spans`, `windows`, `coverage_checks` and experiment schemas.

The collector writes these columns; every query in analytics reads them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Column:
    name: str
    sql_type: str
    description: str


SPANS_TABLE = "spans"
WINDOWS_TABLE = "windows"
COVERAGE_TABLE = "coverage_checks"
EXPERIMENTS_TABLE = "experiments"
EXPERIMENT_ARMS_TABLE = "experiment_arms"
WINDOW_WATERMARK_TABLE = "window_watermark"
WINDOW_STATE_TABLE = "window_state"
WINDOWS_BY_TIME_TABLE = "windows_by_time"
WINDOW_BUCKET_STATE_TABLE = "window_bucket_state"
WINDOW_BUCKET_CUTOFFS_TABLE = "window_bucket_cutoffs"

SPAN_COLUMNS: tuple[Column, ...] = (
    Column("trace_id", "VARCHAR NOT NULL", "32 lowercase hex characters"),
    Column("span_id", "VARCHAR NOT NULL", "16 lowercase hex characters"),
    Column("parent_span_id", "VARCHAR", "16 lowercase hex characters, NULL for a root span"),
    Column("name", "VARCHAR", "span name"),
    Column("kind", "TINYINT", "OTLP SpanKind number (1 internal, 2 server, 3 client, ...)"),
    Column("start_unix_nano", "BIGINT NOT NULL", "start time, ns since the epoch"),
    Column("end_unix_nano", "BIGINT NOT NULL", "end time, ns since the epoch"),
    Column("start_time", "TIMESTAMPTZ NOT NULL", "start time (microseconds)"),
    Column("end_time", "TIMESTAMPTZ NOT NULL", "end time (microseconds); windows use it"),
    Column("duration_s", "DOUBLE NOT NULL", "end minus start, seconds"),
    Column("status_code", "TINYINT", "OTLP status code (0 unset, 1 ok, 2 error)"),
    Column("status_message", "VARCHAR", "status description"),
    Column("service_name", "VARCHAR", "resource service.name"),
    Column("scope_name", "VARCHAR", "instrumentation scope name"),
    Column("target_id", "VARCHAR", "meritlens.target.id (span, else resource)"),
    Column("role", "VARCHAR", "application | orchestration"),
    Column("task_id", "VARCHAR", "meritlens.task.id"),
    Column("case_id", "VARCHAR", "meritlens.case.id"),
    Column("run_id", "VARCHAR", "meritlens.run.id"),
    Column("assessment_id", "VARCHAR", "meritlens.assessment.id"),
    Column("operation", "VARCHAR", "gen_ai.operation.name"),
    Column("provider", "VARCHAR", "gen_ai.provider.name"),
    Column("request_model", "VARCHAR", "gen_ai.request.model"),
    Column("response_model", "VARCHAR", "gen_ai.response.model"),
    Column("input_tokens", "BIGINT", "input tokens, cached included"),
    Column("output_tokens", "BIGINT", "output tokens, reasoning included"),
    Column("cache_read_tokens", "BIGINT", "cached input tokens read"),
    Column("cache_creation_tokens", "BIGINT", "input tokens written to a cache"),
    Column("reasoning_tokens", "BIGINT", "reasoning output tokens"),
    Column("cost_usd", "DOUBLE", "provider cost in USD; NULL when not priced"),
    Column("ttft_s", "DOUBLE", "time to first chunk, seconds"),
    Column("retries", "INTEGER", "extra attempts of one logical call"),
    Column("tool_calls", "INTEGER", "tool calls requested by the model"),
    Column("agent_step", "INTEGER", "agent step number"),
    Column("tool_name", "VARCHAR", "gen_ai.tool.name (tool spans)"),
    Column("outcome_success", "BOOLEAN", "recorded task outcome"),
    Column("quality_score", "DOUBLE", "recorded quality score"),
    Column("human_intervention", "BOOLEAN", "a person had to step in"),
    Column("error_type", "VARCHAR", "error.type"),
    Column("attributes", "JSON", "span attributes not held in a typed column (or whose value was invalid)"),
    Column("resource", "JSON", "resource attributes"),
    Column("events", "JSON", "span events: [{name, time_unix_nano, attributes}]"),
    Column("links", "JSON", "span links: [{trace_id, span_id, attributes}]"),
    Column("received_at", "TIMESTAMPTZ NOT NULL", "when the collector committed the span"),
)
SPAN_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in SPAN_COLUMNS)

WINDOW_COLUMNS: tuple[Column, ...] = (
    Column("target_id", "VARCHAR NOT NULL", "the measured application LLM target"),
    Column("metric", "VARCHAR NOT NULL", "catalogue metric id"),
    Column("scope", "VARCHAR NOT NULL", "'all', or an assessment id"),
    Column("aggregation", "VARCHAR NOT NULL", "single_value | sum | mean | rate | distribution | percentile"),
    Column("value", "DOUBLE", "the window's value; NULL unless observed"),
    Column("unit", "VARCHAR NOT NULL", "the metric's unit"),
    Column("sample_count", "BIGINT NOT NULL", "samples (in the metric's sample unit) that fed the value"),
    Column("state", "VARCHAR NOT NULL", "measured | not_applicable | not_configured | insufficient_evidence"),
    Column("count", "BIGINT", "distribution summary: number of values"),
    Column("mean", "DOUBLE", "distribution summary"),
    Column("min", "DOUBLE", "distribution summary"),
    Column("max", "DOUBLE", "distribution summary"),
    Column("p50", "DOUBLE", "distribution summary"),
    Column("p90", "DOUBLE", "distribution summary"),
    Column("p95", "DOUBLE", "distribution summary"),
    Column("p99", "DOUBLE", "distribution summary"),
    Column("first_span_time", "TIMESTAMPTZ", "earliest end time of a span that fed the window"),
    Column("last_span_time", "TIMESTAMPTZ", "latest end time of a span that fed the window"),
    Column("evidence_uri", "VARCHAR", "where the evidence is"),
    Column("evidence_media_type", "VARCHAR", "what kind of evidence"),
    Column("evidence_digest", "VARCHAR",
           "digest of the spans that fed it (span_keys_digest: sha256 over their count and md5 sums)"),
    Column("computed_at", "TIMESTAMPTZ NOT NULL", "when the window was computed"),
    # Added after the columns above so that files written before them take them with ALTER TABLE.
    Column("stddev", "DOUBLE", "distribution summary: the samples' standard deviation (n - 1), from exact sums"),
    Column("quantile_error", "DOUBLE",
           "bound on the relative error of min, max and p50-p99: 0 when exact, else the histogram's"),
)
ADDED_WINDOW_COLUMNS: tuple[str, ...] = ("stddev", "quantile_error")
"""Columns files of earlier versions lack; the store adds them when it opens such a file."""
WINDOW_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in WINDOW_COLUMNS)

BUCKET_COLUMNS: tuple[Column, ...] = (
    Column("bucket_start", "TIMESTAMPTZ NOT NULL", "start of the time bucket the samples ended in"),
    Column("bucket_seconds", "BIGINT NOT NULL", "the bucket's width: 3600 (hour), 86400 (day) or 604800 (week)"),
)
WINDOWS_BY_TIME_COLUMNS: tuple[Column, ...] = WINDOW_COLUMNS[:3] + BUCKET_COLUMNS + WINDOW_COLUMNS[3:]
"""`windows_by_time`: a window's columns for the samples that ended in one time bucket."""
WINDOWS_BY_TIME_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in WINDOWS_BY_TIME_COLUMNS)


COVERAGE_COLUMNS: tuple[Column, ...] = (
    Column("target_id", "VARCHAR NOT NULL", "the target whose readiness was checked"),
    Column("scope", "VARCHAR NOT NULL", "the scope of the baseline windows ('all' or an assessment id)"),
    Column("checked_at", "TIMESTAMPTZ NOT NULL", "when the check ran"),
    Column("required", "VARCHAR[] NOT NULL", "metrics the profile requires"),
    Column("covered", "VARCHAR[] NOT NULL", "required metrics with a live collector"),
    Column("shortfalls", "VARCHAR[] NOT NULL", "why the baseline is not ready, one line per gap"),
    Column("report", "JSON NOT NULL", "the full coverage report"),
)
COVERAGE_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COVERAGE_COLUMNS)


EXPERIMENT_COLUMNS: tuple[Column, ...] = (
    Column("experiment_id", "VARCHAR NOT NULL", "the experiment's name, unique in the store"),
    Column("target_id", "VARCHAR NOT NULL", "the application LLM target the arms measure (an arm may override it)"),
    Column("application_revision", "VARCHAR NOT NULL", "the application revision every arm ran (e.g. a git commit)"),
    Column("case_set", "VARCHAR[] NOT NULL", "the comparable case ids, as given"),
    Column("shuffle_seed", "BIGINT NOT NULL", "seed of the case order"),
    Column("case_order", "VARCHAR[] NOT NULL", "the order the seed produced; arms run the cases in it"),
    Column("repetitions", "INTEGER NOT NULL", "runs of each case per arm"),
    Column("baseline_arm", "VARCHAR", "the arm challengers are compared with by default"),
    Column("profile", "JSON", "the task profile the decision uses (its TOML as JSON), if recorded"),
    Column("description", "VARCHAR", "free text"),
    Column("manifest_digest", "VARCHAR NOT NULL", "sha256 hex of the canonical manifest JSON (arms included)"),
    Column("created_at", "TIMESTAMPTZ NOT NULL", "when the experiment was created"),
    Column("updated_at", "TIMESTAMPTZ NOT NULL", "when the manifest last changed"),
)
EXPERIMENT_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in EXPERIMENT_COLUMNS)

EXPERIMENT_ARM_COLUMNS: tuple[Column, ...] = (
    Column("experiment_id", "VARCHAR NOT NULL", "the experiment"),
    Column("arm", "VARCHAR NOT NULL", "the arm's name"),
    Column("position", "INTEGER NOT NULL", "order of the arm in the manifest"),
    Column("assessment_id", "VARCHAR NOT NULL", "meritlens.assessment.id of the arm's spans: its windows' scope"),
    Column("target_id", "VARCHAR", "target of the arm's spans when it is not the experiment's"),
    Column("request_model", "VARCHAR", "the model alias the arm requested"),
    Column("response_models", "VARCHAR[] NOT NULL", "model identities the provider reported (gen_ai.response.model)"),
    Column("started_at", "TIMESTAMPTZ", "start of the arm's execution window"),
    Column("finished_at", "TIMESTAMPTZ", "end of the arm's execution window"),
    Column("description", "VARCHAR", "free text"),
)
EXPERIMENT_ARM_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in EXPERIMENT_ARM_COLUMNS)


WINDOW_WATERMARK_COLUMNS: tuple[Column, ...] = (
    Column("store", "VARCHAR NOT NULL", "the span table the windows follow (one row)"),
    Column("windowed_us", "BIGINT NOT NULL",
           "the windows include every span committed (received_at) up to this time, µs since the epoch"),
    Column("definitions_digest", "VARCHAR NOT NULL", "digest of the window definitions the rows were computed with"),
    Column("written_at", "TIMESTAMPTZ NOT NULL", "when the row was written"),
)
WINDOW_WATERMARK_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in WINDOW_WATERMARK_COLUMNS)

WINDOW_STATE_COLUMNS: tuple[Column, ...] = (
    Column("target_id", "VARCHAR NOT NULL", "the windows' target"),
    Column("scope", "VARCHAR NOT NULL", "the windows' scope"),
    Column("state", "BLOB NOT NULL",
           "the bounded state of every window of the (target, scope) (WindowBook.export_key)"),
)
"""The window processor's state, one row per (target, scope): it is what the windows were at the
watermark (`window_watermark`), both saved in one transaction."""

WINDOW_BUCKET_STATE_COLUMNS: tuple[Column, ...] = (
    Column("target_id", "VARCHAR NOT NULL", "the windows' target"),
    Column("scope", "VARCHAR NOT NULL", "the windows' scope"),
    Column("bucket_start_us", "BIGINT NOT NULL", "the bucket's start, µs since the epoch"),
    Column("bucket_us", "BIGINT NOT NULL", "the bucket's width, µs"),
    Column("state", "BLOB NOT NULL", "the bucket's windows' state (WindowBook.export_key)"),
)
"""The state of `windows_by_time`, one row per (target, scope, bucket), saved with `window_state`."""
WINDOW_BUCKET_CUTOFFS_COLUMNS: tuple[Column, ...] = (
    Column("store", "VARCHAR NOT NULL", "the span table (one row)"),
    Column("hours_from_us", "BIGINT NOT NULL", "hour buckets from this time on"),
    Column("days_from_us", "BIGINT NOT NULL", "day buckets from this time up to the hours"),
    Column("weeks_from_us", "BIGINT NOT NULL", "week buckets from this time up to the days; nothing before"),
)
"""Where the bucket tiers of the saved bucket state begin (`_time_buckets.BucketCutoffs`)."""
WINDOW_STATE_COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in WINDOW_STATE_COLUMNS)


def create_table_sql(table: str, columns: tuple[Column, ...], primary_key: tuple[str, ...] = ()) -> str:
    body = ",\n  ".join(f"{c.name} {c.sql_type}" for c in columns)
    key = f",\n  PRIMARY KEY ({', '.join(primary_key)})" if primary_key else ""
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {body}{key}\n)"


# No primary key: (trace_id, span_id) is unique by the store's own check (collector/store/_store.py says
# why a B-tree index is not kept), and the table stays in commit order.
SPANS_DDL = create_table_sql(SPANS_TABLE, SPAN_COLUMNS)
WINDOW_KEY_COLUMNS: tuple[str, ...] = ("target_id", "metric", "scope")
"""The primary key of `windows`: one row per window."""
WINDOWS_DDL = create_table_sql(WINDOWS_TABLE, WINDOW_COLUMNS, WINDOW_KEY_COLUMNS)
COVERAGE_DDL = create_table_sql(COVERAGE_TABLE, COVERAGE_COLUMNS, ("target_id", "scope", "checked_at"))
EXPERIMENTS_DDL = create_table_sql(EXPERIMENTS_TABLE, EXPERIMENT_COLUMNS, ("experiment_id",))
EXPERIMENT_ARMS_DDL = create_table_sql(EXPERIMENT_ARMS_TABLE, EXPERIMENT_ARM_COLUMNS, ("experiment_id", "arm"))
WINDOW_WATERMARK_DDL = create_table_sql(WINDOW_WATERMARK_TABLE, WINDOW_WATERMARK_COLUMNS, ("store",))
WINDOW_STATE_DDL = create_table_sql(WINDOW_STATE_TABLE, WINDOW_STATE_COLUMNS, ("target_id", "scope"))
WINDOWS_BY_TIME_DDL = create_table_sql(WINDOWS_BY_TIME_TABLE, WINDOWS_BY_TIME_COLUMNS,
                                       ("target_id", "metric", "scope", "bucket_start"))
WINDOW_BUCKET_STATE_DDL = create_table_sql(WINDOW_BUCKET_STATE_TABLE, WINDOW_BUCKET_STATE_COLUMNS,
                                           ("target_id", "scope", "bucket_start_us"))
WINDOW_BUCKET_CUTOFFS_DDL = create_table_sql(WINDOW_BUCKET_CUTOFFS_TABLE, WINDOW_BUCKET_CUTOFFS_COLUMNS, ("store",))
