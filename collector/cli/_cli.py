"""The `meritlens` command line."""

from __future__ import annotations

import logging
import os
import sys

import click

from meritlens.collector._settings import (
    DEFAULT_DB,
    DEFAULT_DB_MEMORY_BYTES,
    DEFAULT_DB_THREADS,
    DEFAULT_STAGE_MOVE_S,
    DEFAULT_GRPC_MAX_CONCURRENT_RPCS,
    DEFAULT_GRPC_PORT,
    DEFAULT_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_ATTRIBUTES,
    DEFAULT_MAX_PENDING_BATCHES,
    DEFAULT_MAX_SPANS_PER_REQUEST,
    DEFAULT_SHUTDOWN_TIMEOUT_S,
    DEFAULT_SQL_MAX_ROWS,
    DEFAULT_SQL_TIMEOUT_S,
    ENV_DB,
    ENV_GRPC_MAX_CONCURRENT_RPCS,
    ENV_GRPC_PORT,
    ENV_HOST,
    ENV_HTTP_PORT,
    ENV_MAX_ATTRIBUTE_BYTES,
    ENV_MAX_ATTRIBUTES,
    ENV_MAX_BODY_BYTES,
    ENV_MAX_INFLIGHT_BYTES,
    ENV_WINDOW_MEMORY_BYTES,
    ENV_CHECKPOINT_WAL_BYTES,
    ENV_DB_THREADS,
    ENV_STAGE_SECONDS,
    ENV_DB_MEMORY_BYTES,
    ENV_MAX_PENDING_BATCHES,
    ENV_MAX_SPANS_PER_REQUEST,
    ENV_SHUTDOWN_TIMEOUT,
    ENV_SQL_MAX_ROWS,
    ENV_SQL_TIMEOUT,
    ENV_TLS_CA,
    ENV_TLS_CERT,
    ENV_TLS_KEY,
    ENV_TOKEN,
    ENV_TOKEN_FILE,
    ENV_TARGET_FALLBACK,
    ENV_URL,
    DEFAULT_TARGET_FALLBACK,
    ServerSettings,
    SettingsError,
    parse_bytes,
    resolve_token,
    staging_path,
)

_db_option = click.option(
    "--db", envvar=ENV_DB, default=DEFAULT_DB, show_default=True, help=f"DuckDB file (env {ENV_DB})."
)
_url_option = click.option(
    "--url", envvar=ENV_URL, default=None,
    help=f"Query through this running collector instead of opening the file (env {ENV_URL}).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="meritlens", message="%(prog)s %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """meritlens: evidence-grade metrics for LLM applications, native to OpenTelemetry."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _size(ctx, param, value):
    if value is None:
        return None
    try:
        return parse_bytes(value, "--" + param.name.replace("_", "-"))
    except SettingsError as exc:
        raise click.BadParameter(str(exc)) from None


@cli.command()
@click.option("--db", default=None, help=f"DuckDB file [env {ENV_DB}; default {DEFAULT_DB}].")
@click.option("--host", default=None,
              help=f"Bind address of both receivers [env {ENV_HOST}; default {DEFAULT_HOST}]. "
                   "A non-loopback address without a token logs a warning.")
@click.option("--http-port", type=int, default=None,
              help=f"OTLP/HTTP and SQL port; 0 picks a free one [env {ENV_HTTP_PORT}; default {DEFAULT_HTTP_PORT}].")
@click.option("--grpc-port", type=int, default=None,
              help=f"OTLP/gRPC port; 0 picks a free one [env {ENV_GRPC_PORT}; default {DEFAULT_GRPC_PORT}].")
@click.option("--no-grpc", is_flag=True, help="Do not start the OTLP/gRPC receiver.")
@click.option("--token", default=None,
              help=f"Bearer token every endpoint requires [env {ENV_TOKEN}]; prefer --token-file.")
@click.option("--token-file", type=click.Path(dir_okay=False), default=None,
              help=f"File whose first line is the bearer token [env {ENV_TOKEN_FILE}].")
@click.option("--tls-cert", type=click.Path(dir_okay=False), default=None,
              help=f"PEM certificate (chain) for HTTPS and gRPC TLS [env {ENV_TLS_CERT}].")
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None,
              help=f"PEM private key of --tls-cert [env {ENV_TLS_KEY}].")
@click.option("--max-body-bytes", callback=_size, default=None,
              help=f"Largest request after decompression, e.g. 20MiB [env {ENV_MAX_BODY_BYTES}; default 20MiB].")
@click.option("--max-inflight-bytes", callback=_size, default=None,
              help="Memory budget of requests being processed (bodies plus an estimate per span); over it "
                   f"requests get 503/UNAVAILABLE [env {ENV_MAX_INFLIGHT_BYTES}; default 128MiB].")
@click.option("--window-memory-bytes", callback=_size, default=None,
              help="Memory for the window processor's state, e.g. 256MiB; beyond it the least recently written "
                   f"targets are rebuilt from their spans when written again [env {ENV_WINDOW_MEMORY_BYTES}; "
                   "default 256MiB].")
@click.option("--db-memory-bytes", callback=_size, default=None,
              help=f"DuckDB's memory limit, e.g. 512MiB; a long-running collector's RSS grows towards it "
                   f"[env {ENV_DB_MEMORY_BYTES}; default {DEFAULT_DB_MEMORY_BYTES >> 20}MiB].")
@click.option("--checkpoint-wal-bytes", callback=_size, default=None,
              help="Write-ahead log size at which DuckDB checkpoints the file; larger: less CPU per span, a "
                   f"larger WAL to replay after a crash [env {ENV_CHECKPOINT_WAL_BYTES}; default 64MiB].")
@click.option("--db-threads", type=int, default=None,
              help="DuckDB's worker threads; more make large SQL queries and the start-up rebuild faster and "
                   f"cost the collector's small statements CPU [env {ENV_DB_THREADS}; default {DEFAULT_DB_THREADS}].")
@click.option("--stage-seconds", "stage_s", type=float, default=None,
              help="How long acknowledged spans may wait in the staging log (forced to disk next to the "
                   "DuckDB file) before one INSERT stores them in DuckDB; 0 stores each export in DuckDB "
                   f"before answering it, at ~2x the writer's CPU [env {ENV_STAGE_SECONDS}; default "
                   f"{DEFAULT_STAGE_MOVE_S:g}].")
@click.option("--max-pending-batches", type=int, default=None,
              help=f"Batches waiting for the writer [env {ENV_MAX_PENDING_BATCHES}; default "
                   f"{DEFAULT_MAX_PENDING_BATCHES}].")
@click.option("--max-spans-per-request", type=int, default=None,
              help=f"[env {ENV_MAX_SPANS_PER_REQUEST}; default {DEFAULT_MAX_SPANS_PER_REQUEST}].")
@click.option("--max-attributes", type=int, default=None,
              help="Attributes per span, event, link or resource; a span over it is refused "
                   f"[env {ENV_MAX_ATTRIBUTES}; default {DEFAULT_MAX_ATTRIBUTES}].")
@click.option("--max-attribute-bytes", callback=_size, default=None,
              help="Longest string/bytes value, key or name; a span over it is refused "
                   f"[env {ENV_MAX_ATTRIBUTE_BYTES}; default 1MiB].")
@click.option("--grpc-max-concurrent-rpcs", type=int, default=None,
              help=f"[env {ENV_GRPC_MAX_CONCURRENT_RPCS}; default {DEFAULT_GRPC_MAX_CONCURRENT_RPCS}].")
@click.option("--sql-timeout", "sql_timeout_s", type=float, default=None,
              help="Seconds before a SQL query is interrupted "
                   f"[env {ENV_SQL_TIMEOUT}; default {DEFAULT_SQL_TIMEOUT_S:g}].")
@click.option("--sql-max-rows", type=int, default=None,
              help=f"Rows a SQL response holds at most [env {ENV_SQL_MAX_ROWS}; default {DEFAULT_SQL_MAX_ROWS}].")
@click.option("--target-fallback", default=None,
              help="Target ID for LLM-call spans that carry none, from {service.name}, {model}, {provider}, "
                   f"{{scope}}; 'none' turns it off [env {ENV_TARGET_FALLBACK}; default {DEFAULT_TARGET_FALLBACK}].")
@click.option("--shutdown-timeout", "shutdown_timeout_s", type=float, default=None,
              help="Seconds SIGTERM waits for in-flight requests "
                   f"[env {ENV_SHUTDOWN_TIMEOUT}; default {DEFAULT_SHUTDOWN_TIMEOUT_S:g}].")
@click.option("--profile", "profiles", multiple=True, type=click.Path(exists=True),
              help="A task profile (TOML), or a directory of them; the dashboard at / shows each "
                   "profile's target's readiness. Repeatable.")
def serve(token: str | None, token_file: str | None, no_grpc: bool, **options) -> None:
    """Receive OTLP spans, store them in DuckDB and keep the metric windows current.

    Also serves a read-only dashboard at its HTTP address (http://127.0.0.1:4318/ by default).
    Every option also reads the environment variable named in its help; see docs/collector.md.
    """
    given = {name: value for name, value in options.items() if value is not None}
    try:
        if token is not None or token_file is not None:
            given["token"] = resolve_token(token, token_file)
        if no_grpc:
            given["grpc_port"] = None
        settings = ServerSettings(**given)
        settings.validate()
    except SettingsError as exc:
        raise click.UsageError(str(exc)) from None
    from meritlens.collector.serve._server import normalize_options, serve as run

    try:
        normalize_options(settings)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target-fallback") from None
    if settings.profiles:
        from meritlens.collector.serve._profiles_view import load_profiles

        try:
            load_profiles(settings.profiles)
        except ValueError as exc:  # a ProfileError lists every problem of the file
            raise click.BadParameter(str(exc), param_hint="--profile") from None
    run(settings)


def client_options(command):
    """--token, --token-file and --tls-ca: how a command talks to a collector that asks for them."""
    command = click.option("--tls-ca", type=click.Path(dir_okay=False), default=None,
                           help=f"CA file to trust for an https collector [env {ENV_TLS_CA}].")(command)
    command = click.option("--token-file", type=click.Path(dir_okay=False), default=None,
                           help=f"File holding the collector's bearer token [env {ENV_TOKEN_FILE}].")(command)
    return click.option("--token", default=None, help=f"The collector's bearer token [env {ENV_TOKEN}].")(command)


@cli.command()
@click.argument("query")
@_db_option
@_url_option
@client_options
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def sql(query: str, db: str, url: str | None, token: str | None, token_file: str | None, tls_ca: str | None,
        fmt: str) -> None:
    """Run a read-only SQL QUERY over `spans` and `windows`."""
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._query import QueryError, run_query

    try:
        result = run_query(query, db=db, url=url, token=resolve_token(token, token_file), ca_file=tls_ca)
    except (QueryError, SettingsError) as exc:
        raise click.ClickException(str(exc)) from None
    render(result, fmt)
    if result.truncated:
        click.echo(f"note: only the first {len(result.rows)} rows are shown (the collector's row limit)", err=True)
    if result.windows_behind:
        click.echo("warning: the collector's windows do not yet include every stored span (the window processor"
                   " is behind or failing; see its log): window rows may be stale", err=True)
    if result.staged_bytes:
        click.echo(f"warning: {staging_path(db)} holds {result.staged_bytes} bytes of spans a collector acknowledged"
                   " before it stopped without a clean shutdown; those it had not stored yet are not in the"
                   " result until the next `meritlens serve` (or another writing command) on this file stores"
                   " them", err=True)


_format_option = click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True,
    help="How to print the result.",
)
_progress_option = click.option(
    "--progress/--no-progress", default=None,
    help="Show a progress bar on stderr (default: when stderr is a terminal).",
)


@cli.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=True, readable=True))
@_db_option
@_url_option
@client_options
@_format_option
@_progress_option
@click.pass_context
def import_command(ctx: click.Context, files: tuple[str, ...], db: str, url: str | None, token: str | None,
                   token_file: str | None, tls_ca: str | None, fmt: str, progress: bool | None) -> None:
    """Load span FILES into the store: OTLP JSON or protobuf (gzip too), JSON lines as the OTel
    Collector's file exporter writes them, or a `meritlens export` directory or spans.parquet.

    Writes into the DuckDB file when no process holds it (creating it if needed), else through the
    collector that holds it (its /v1/traces). Spans already stored are not counted twice. Exits 1
    if a file could not be read or a span was refused; everything accepted is kept."""
    from meritlens.collector.cli._import import ImportFailed, expand_paths, import_files, open_destination
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._progress import progress_bar
    from meritlens.collector.store._results import QueryResult

    paths = expand_paths(list(files))
    if not paths:
        raise click.UsageError("no files to import (the directories given are empty)")
    try:
        destination = open_destination(db, url, token=resolve_token(token, token_file), ca_file=tls_ca)
    except ImportFailed as exc:
        raise click.ClickException(str(exc)) from None
    sizes = [max(1, os.path.getsize(p)) for p in paths]
    where = db if destination.via == "file" else destination.url
    with progress_bar(progress, total=sum(sizes), unit="spans") as bar:
        done_before = [sum(sizes[:i]) for i in range(len(paths))]
        spans_read = [0] * len(paths)

        def advance(index: int, fraction: float, spans: int) -> None:
            spans_read[index] = spans
            bar.update(completed=done_before[index] + fraction * sizes[index],
                       description=os.path.basename(paths[index]), count=sum(spans_read))

        try:
            results = import_files(paths, destination, progress=advance)
        except ImportFailed as exc:
            raise click.ClickException(str(exc)) from None
    columns = ["file", "format", "spans", "refused", "new", "duplicates", "problem"]
    rows = [(r.file, r.format, r.spans, r.refused, r.new, r.duplicates,
             "; ".join(r.problems + r.refusal_reasons) or None) for r in results]
    render(QueryResult(columns, [], rows), fmt)
    total = sum(r.spans for r in results)
    refused = sum(r.refused for r in results)
    failed = [r for r in results if r.problems]
    summary = f"read {total} span{'s' if total != 1 else ''} from {len(results)} file{'s' if len(results) != 1 else ''}"
    if destination.via == "file":
        summary += (f" into {where}: {sum(r.new for r in results)} new, "
                    f"{sum(r.duplicates for r in results)} already stored")
    else:
        summary += f" through the collector at {where}: {total - refused} accepted"
    if refused:
        summary += f", {refused} refused"
    if failed:
        summary += f"; {len(failed)} file{'s' if len(failed) != 1 else ''} could not be fully read"
    click.echo(summary, err=True)
    if refused or failed:
        ctx.exit(1)


@cli.command("export")
@click.option("--parquet", "parquet_dir", required=True, type=click.Path(file_okay=False),
              help="Write <DIR>/spans.parquet and <DIR>/windows.parquet.")
@_db_option
@_url_option
@click.option("--table", "tables", multiple=True, type=click.Choice(["spans", "windows"]),
              help="Only these tables (repeatable; default both).")
@click.option("--compression", type=click.Choice(["snappy", "zstd", "gzip", "none"]), default="snappy",
              show_default=True, help="Parquet compression codec.")
@client_options
@_format_option
@_progress_option
def export_command(parquet_dir: str, db: str, url: str | None, tables: tuple[str, ...], compression: str,
                   token: str | None, token_file: str | None, tls_ca: str | None, fmt: str,
                   progress: bool | None) -> None:
    """Export spans and windows as Parquet files (readable by DuckDB, pandas, Spark).

    Reads the DuckDB file read-only when no process holds it, else the collector that holds it
    (its read-only /api/arrow endpoint)."""
    from meritlens.collector.cli._export import ExportFailed, export_parquet
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._progress import progress_bar
    from meritlens.collector.store._results import QueryResult

    with progress_bar(progress, total=None, unit="rows") as bar:
        current = [None]

        def advance(table: str, rows: int, total: int | None) -> None:
            if current[0] != table:
                current[0] = table
                bar.new_row(f"{table}.parquet", total)
            bar.update(completed=rows, count=rows)

        try:
            written = export_parquet(db, url, parquet_dir, tables=tables or ("spans", "windows"),
                                     compression=compression, progress=advance,
                                     token=resolve_token(token, token_file), ca_file=tls_ca)
        except ExportFailed as exc:
            raise click.ClickException(str(exc)) from None
    render(QueryResult(["table", "file", "rows"], [], [(w.table, w.path, w.rows) for w in written]), fmt)


# --- evidence: windows, profile check, readiness ------------------------------------------------------
# The logic lives in meritlens.analytics (any read-only query function) and collector/serve/_evidence.py
# (recording readiness); these commands only parse options and print.

class _UsageFailure(click.ClickException):
    """A command could not run as asked (bad profile, no data reachable): exit status 2."""

    exit_code = 2


_WINDOW_TABLE_COLUMNS = ("target_id", "scope", "metric", "state", "aggregation", "value", "unit", "sample_count")


@cli.command()
@click.option("--target", default=None, help="Only this target.")
@click.option("--scope", default=None, help="Only this scope ('all' or an assessment id).")
@click.option("--metric", default=None, help="Only this metric.")
@_db_option
@_url_option
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "signal"]), default="table",
              show_default=True, help="'signal': one metric_window_available JSON object per line.")
def windows(target: str | None, scope: str | None, metric: str | None, db: str, url: str | None, fmt: str) -> None:
    """List metric windows: every catalogue metric of each (target, scope), with its state.

    Metrics no window was stored for are listed as not_configured. `--format signal` prints only
    windows with evidence, as `metric_window_available` signals (JSON lines)."""
    import json

    from meritlens.analytics._windows import Window, list_windows_sql
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._query import QueryError, run_query
    from meritlens.collector.store._results import QueryResult

    sql = list_windows_sql(target=target, scope=scope, metric=metric, with_unmeasured=fmt != "signal")
    try:
        result = run_query(sql, db=db, url=url)
    except QueryError as exc:
        raise click.ClickException(str(exc)) from None
    if fmt == "table":
        keep = [result.columns.index(c) for c in _WINDOW_TABLE_COLUMNS]
        result = QueryResult([result.columns[i] for i in keep], [result.types[i] for i in keep if result.types],
                             [tuple(row[i] for i in keep) for row in result.rows])
    if fmt != "signal":
        render(result, fmt)
        return
    for row in result.rows:
        window = Window.from_row(row, result.columns)
        if window.has_evidence:
            click.echo(json.dumps(window.to_signal()))


@cli.group()
def profile() -> None:
    """Task profiles: which metrics a decision needs and how they are sampled."""


@profile.command("check")
@click.argument("file", type=click.Path(dir_okay=False))
@_db_option
@_url_option
def profile_check(file: str, db: str, url: str | None) -> None:
    """Validate the profile FILE: print every problem and exit 1, or print its plan and exit 0.

    When the windows can be read (--db/--url), the plan shows each metric's current state and an
    estimate of the runs' application cost."""
    from meritlens.analytics._profiles import ProfileError, format_plan, load_profile
    from meritlens.analytics._windows import SCOPE_ALL, Window, list_windows_sql
    from meritlens.collector.cli._query import QueryError, run_query

    try:
        task_profile = load_profile(file)
    except ProfileError as exc:
        click.echo(str(exc), err=True)
        sys.exit(1)
    note = None
    try:
        result = run_query(list_windows_sql(target=task_profile.target, scope=SCOPE_ALL, with_unmeasured=False),
                           db=db, url=url)
        current = {w.metric: w for w in (Window.from_row(row, result.columns) for row in result.rows)}
    except QueryError as exc:
        current, note = None, f"(current windows not shown: {exc})"
    click.echo(format_plan(task_profile, current, source=file))
    if note:
        click.echo(note)


@cli.command()
@click.option("--profile", "profile_path", required=True, type=click.Path(dir_okay=False),
              help="The task profile (TOML).")
@click.option("--target", default=None, help="Check this target instead of the profile's.")
@click.option("--scope", default="all", show_default=True, help="Scope of the baseline windows.")
@click.option("--baseline", is_flag=True, help="Exit 0 only when the baseline is ready too.")
@_db_option
@_url_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def readiness(profile_path: str, target: str | None, scope: str, baseline: bool, db: str, url: str | None,
              fmt: str) -> None:
    """Check that every metric the profile requires has a live collector (and, for the baseline,
    enough evidence). Records the check (see the `coverage` view). Exit 0 ready, 1 not, 2 error."""
    from meritlens.analytics._profiles import ProfileError, load_profile
    from meritlens.analytics._readiness import format_report, report_json
    from meritlens.collector.serve._evidence import check_readiness_at
    from meritlens.collector.cli._query import QueryError

    try:
        task_profile = load_profile(profile_path)
        report = check_readiness_at(task_profile, target=target, scope=scope, db=db, url=url)
    except (ProfileError, QueryError) as exc:
        raise _UsageFailure(str(exc)) from None
    click.echo(report_json(report) if fmt == "json" else format_report(report))
    sys.exit(0 if (report.baseline_ready if baseline else report.ready) else 1)
# --- metric plugins: `meritlens evaluate` and `meritlens metrics` ---------------------------------------
def _parse_judge(spec: str | None, base_url: str | None):
    """None without --judge; else the judge named by ``fake[:MODEL]``, ``openai:MODEL`` or ``anthropic:MODEL``."""
    if spec is None:
        if base_url is not None:
            raise click.BadParameter("--judge-base-url needs --judge", param_hint="--judge-base-url")
        return None
    from meritlens.analytics._judge import JudgeError, judge_from_spec

    try:
        return judge_from_spec(spec, base_url=base_url)
    except JudgeError as exc:
        raise click.BadParameter(str(exc), param_hint="--judge") from None


def _parse_options(pairs: tuple[str, ...]) -> dict[str, str]:
    options: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--option")
        options[key.strip()] = value
    return options


@cli.command()
@click.option("--target", required=True, help="The target ID whose spans are evaluated.")
@click.option("--scope", default="all", show_default=True, help="'all', or an assessment id.")
@click.option("--metrics", "metric_list", default=None,
              help="Comma-separated metric names (default: every registered metric; see `meritlens metrics`).")
@_db_option
@_url_option
@click.option("--token", envvar=ENV_TOKEN, default=None, help=f"Bearer token of the collector (env {ENV_TOKEN}).")
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Directory for sidecars and evaluation.json [default: ./meritlens-runs/<target>/<scope>/].")
@click.option("--schema", type=click.Path(exists=True, dir_okay=False), default=None,
              help="JSON Schema file for structured_output_reliability (a task's meritlens.output.schema wins).")
@click.option("--step-threshold", type=click.IntRange(min=0), default=None,
              help="long_horizon_performance counts tasks with more steps than this [default: 10].")
@click.option("--judge", "judge_spec", default=None, metavar="KIND:MODEL",
              help="Judge for judge-driven metrics: openai:MODEL, anthropic:MODEL (exact, pinned model ids; "
                   "keys from OPENAI_API_KEY / ANTHROPIC_API_KEY), or fake[:MODEL] for dry runs.")
@click.option("--judge-base-url", default=None, help="Base URL of an OpenAI- or Anthropic-compatible API.")
@click.option("--judge-replicas", type=click.IntRange(min=1), default=3, show_default=True,
              help="Judge calls per task; their scores are averaged.")
@click.option("--option", "extra", multiple=True, metavar="KEY=VALUE", help="A metric option (repeatable).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def evaluate(target, scope, metric_list, db, url, token, run_dir, schema, step_threshold, judge_spec,
             judge_base_url, judge_replicas, extra, fmt) -> None:
    """Run metric plugins on TARGET's spans in SCOPE and store each result as a window.

    A re-run replaces the windows of the metrics it ran and keeps the others. Exits 1 when a
    metric failed (the others are still stored).
    """
    import json as _json
    from pathlib import Path

    from meritlens.analytics import EvaluationError, MetricOptions, evaluate as run_evaluation, load_registry
    from meritlens.analytics._evaluate import default_run_dir
    from meritlens.collector.cli._evaluation import open_evaluation_store
    from meritlens.collector.store._results import json_default

    registry = load_registry()
    try:
        metrics = registry.resolve(metric_list.split(",") if metric_list else registry.names)
    except KeyError as exc:
        raise click.BadParameter(exc.args[0], param_hint="--metrics") from None
    if not metrics:
        raise click.BadParameter("no metric named", param_hint="--metrics")
    options = _parse_options(extra)
    if schema is not None:
        options["schema"] = schema
    if step_threshold is not None:
        options["step_threshold"] = str(step_threshold)
    judge = _parse_judge(judge_spec, judge_base_url)
    directory = Path(run_dir) if run_dir else default_run_dir(target, scope)
    try:
        store = open_evaluation_store(db, url=url, token=token)
        try:
            result = run_evaluation(
                store, target_id=target, scope=scope, metrics=metrics, run_dir=directory,
                options=MetricOptions(options), judge=judge, judge_replicas=judge_replicas,
            )
        finally:
            store.close()
    except EvaluationError as exc:
        raise click.ClickException(str(exc)) from None
    if fmt == "json":
        rows = []
        for outcome in result.outcomes:
            base = {"metric": outcome.metric, "status": outcome.status, "error": outcome.error,
                    "reason": outcome.reason}
            for window in outcome.windows:
                rows.append({**base, "window": window.metric, "state": window.state, "value": window.value,
                             "unit": window.unit, "sample_count": window.sample_count,
                             "evidence_digest": window.evidence_digest})
            if not outcome.windows:
                rows.append(base)
        click.echo(_json.dumps({"target": target, "scope": scope, "run_dir": str(directory), "results": rows},
                               default=json_default, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"{target} / {scope}: {result.span_count} spans, {result.task_count} tasks")
        for column in ("metric", "status", "value", "unit", "samples", "summary"):
            table.add_column(column)
        for outcome in result.outcomes:
            if outcome.status == "failed":
                table.add_row(outcome.metric, "failed", "", "", "", outcome.error or "")
            elif outcome.status == "not_applicable":
                table.add_row(outcome.metric, "not_applicable", "", "", "", outcome.reason or "does not apply")
            for measurement, window in zip(outcome.measurements, outcome.windows):
                table.add_row(window.metric, window.state, f"{window.value:.4g}", window.unit,
                              str(window.sample_count), measurement.summary)
        Console(width=160).print(table)
        click.echo(f"run directory: {directory}")
    if result.failed:
        click.echo(f"{len(result.failed)} metric(s) failed: {', '.join(o.metric for o in result.failed)}", err=True)
        sys.exit(1)


@cli.command()
@click.argument("metric")
@click.option("--target", default=None, help="With --scope, finds the default run directory.")
@click.option("--scope", default="all", show_default=True)
@click.option("--run-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="The run directory holding the sidecar [default: ./meritlens-runs/<target>/<scope>/].")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def observations(metric, target, scope, run_dir, fmt) -> None:
    """Print the keyed observations METRIC wrote to its sidecar (malformed rows are skipped and logged)."""
    import json as _json
    from pathlib import Path

    from meritlens.analytics import load_registry
    from meritlens.analytics._evaluate import default_run_dir

    registry = load_registry()
    try:
        [metric_class] = registry.resolve([metric])
    except KeyError as exc:
        raise click.BadParameter(exc.args[0], param_hint="METRIC") from None
    if run_dir is None and target is None:
        raise click.UsageError("give --run-dir, or --target (and --scope) to use the default run directory")
    directory = Path(run_dir) if run_dir else default_run_dir(target, scope)
    found = metric_class().read_keyed_observations(directory)
    if fmt == "json":
        click.echo(_json.dumps([{"keys": o.keys, "value": o.value} for o in found], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    key_names = sorted({k for o in found for k in o.keys})
    table = Table(title=f"{metric} observations in {directory}")
    for column in [*(f"key.{k}" for k in key_names), "value"]:
        table.add_column(column)
    for o in found:
        table.add_row(*(o.keys.get(k, "") for k in key_names), f"{o.value:.6g}")
    Console(width=160).print(table)
    click.echo(f"{len(found)} observation{'s' if len(found) != 1 else ''}")


@cli.command(name="metrics")
def list_metrics() -> None:
    """List the metrics `meritlens evaluate` can run, and installed plugins that were refused."""
    from meritlens.analytics import load_registry

    registry = load_registry()
    for name, cls in registry.metrics.items():
        origin = "built-in" if registry.is_builtin(name) else f"plugin {registry.plugins[name]}"
        doc = (cls.__doc__ or "").strip().splitlines()[0] if cls.__doc__ else ""
        click.echo(f"{name}\t{origin}\t{doc}")
    for refused in registry.refused:
        click.echo(f"refused: {refused.entry_point} = {refused.value}: {refused.reason}", err=True)


# --- decide: experiments, comparison, frontier ---------------------------------------------------------
# The logic lives in meritlens.analytics (_experiments, _compare, _frontier, _plots) and
# collector/cli/_experiment_io.py (storing manifests); these commands parse options and print.

def _iso_time(ctx, param, value):
    """An ISO 8601 time with a time zone (or None)."""
    import datetime as dt

    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time (e.g. 2025-01-31T12:00:00+00:00)") from None
    if parsed.tzinfo is None:
        raise click.BadParameter(f"{value!r} has no time zone; add one (e.g. +00:00 or Z)")
    return parsed


def _read_cases(cases: tuple[str, ...], cases_file: str | None) -> list[str]:
    listed = list(cases)
    if cases_file is not None:
        try:
            with open(cases_file, encoding="utf-8") as fh:
                lines = [line.strip() for line in fh]
        except OSError as exc:
            raise _UsageFailure(f"cannot read --cases-file {cases_file}: {exc.strerror or exc}") from None
        listed += [line for line in lines if line and not line.startswith("#")]
    if not listed:
        raise _UsageFailure("give the comparable case set with --case ID (repeatable) or --cases-file FILE")
    return listed


def _experiment_failure(exc: Exception) -> click.ClickException:
    return _UsageFailure(str(exc))


def _client(token: str | None, token_file: str | None, tls_ca: str | None) -> dict:
    """How to talk to a collector: its bearer token (given, from a file, else from the environment)
    and the CA file of an https one."""
    try:
        return {"token": resolve_token(token, token_file), "ca_file": tls_ca}
    except SettingsError as exc:
        raise _UsageFailure(str(exc)) from None


def _print_manifest(manifest, checks=None, fmt: str = "text") -> None:
    import json

    if fmt == "json":
        out = manifest.to_json()
        if checks is not None:
            out["checks"] = [c.to_json() for c in checks]
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(f"experiment {manifest.experiment_id}  (manifest {manifest.digest[:12]})")
    click.echo(f"  target {manifest.target_id}, revision {manifest.application_revision}")
    click.echo(f"  {len(manifest.cases)} cases x {manifest.repetitions} repetitions, shuffle seed "
               f"{manifest.shuffle_seed}; order: {', '.join(manifest.case_order[:8])}"
               + (" ..." if len(manifest.case_order) > 8 else ""))
    if manifest.profile is not None:
        click.echo(f"  profile: {', '.join(manifest.profile['metrics'])}")
    for arm in manifest.arms:
        window = (f"[{arm.started_at.isoformat() if arm.started_at else '-'}, "
                  f"{arm.finished_at.isoformat() if arm.finished_at else '-'}]")
        flag = " (baseline)" if arm.name == manifest.baseline else ""
        click.echo(f"  arm {arm.name}{flag}: assessment {arm.assessment_id}, requested "
                   f"{arm.request_model or '-'}, reported {', '.join(arm.response_models) or '-'}, window {window}")
    for check in checks or ():
        lines = [f"    ! {p}" for p in check.problems] + [f"    - {w}" for w in check.warnings]
        if lines:
            click.echo(f"  check of {check.arm}: {'REFUSED' if check.refused else 'ok'}")
            click.echo("\n".join(lines))


@cli.group()
def experiment() -> None:
    """Experiments: the manifest of a baseline-vs-challengers run (revision, cases, seed, arms)."""


@experiment.command("create")
@click.argument("experiment_id")
@click.option("--target", required=True, help="The application LLM target the arms measure.")
@click.option("--revision", required=True, help="The application revision every arm runs (e.g. a git commit).")
@click.option("--case", "cases", multiple=True, help="A case id of the comparable case set (repeatable).")
@click.option("--cases-file", type=click.Path(dir_okay=False), default=None,
              help="A file of case ids, one per line ('#' comments).")
@click.option("--seed", type=int, required=True, help="Seed of the case order (recorded).")
@click.option("--repetitions", type=int, default=1, show_default=True, help="Runs of each case per arm.")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              help="Record this task profile (TOML) as the decision's rules.")
@click.option("--description", default=None)
@_db_option
@_url_option
@client_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def experiment_create(experiment_id, target, revision, cases, cases_file, seed, repetitions, profile_path,
                      description, db, url, token, token_file, tls_ca, fmt) -> None:
    """Create EXPERIMENT_ID and print the case order its seed produced."""
    from meritlens.analytics._experiments import ExperimentError, ExperimentManifest
    from meritlens.analytics._profiles import ProfileError, load_profile
    from meritlens.collector.cli._experiment_io import save_experiment
    from meritlens.collector.cli._query import QueryError

    try:
        profile = load_profile(profile_path) if profile_path else None
        manifest = ExperimentManifest.new(
            experiment_id, target_id=target, application_revision=revision, cases=_read_cases(cases, cases_file),
            shuffle_seed=seed, repetitions=repetitions, profile=profile, description=description,
        )
    except (ProfileError, ExperimentError) as exc:
        raise _experiment_failure(exc) from None
    try:
        stored = save_experiment(manifest, db=db, url=url, create=True, **_client(token, token_file, tls_ca))
    except (ExperimentError, QueryError) as exc:
        raise _experiment_failure(exc) from None
    _print_manifest(stored, fmt=fmt)


@experiment.command("arm")
@click.argument("experiment_id")
@click.argument("arm_name")
@click.option("--assessment", required=True, help="The meritlens.assessment.id the arm's spans carry.")
@click.option("--target", default=None, help="The arm's target, when not the experiment's.")
@click.option("--request-model", default=None, help="The model (alias) the arm requests.")
@click.option("--response-model", "response_models", multiple=True,
              help="A model identity the provider reports (repeatable); `finish` records them from the spans.")
@click.option("--started-at", callback=_iso_time, default=None, help="Start of the execution window (ISO 8601).")
@click.option("--finished-at", callback=_iso_time, default=None, help="End of the execution window (ISO 8601).")
@click.option("--baseline", is_flag=True, help="Make this arm the experiment's baseline.")
@click.option("--description", default=None)
@_db_option
@_url_option
@client_options
def experiment_arm(experiment_id, arm_name, assessment, target, request_model, response_models, started_at,
                   finished_at, baseline, description, db, url, token, token_file, tls_ca) -> None:
    """Add the arm ARM_NAME to EXPERIMENT_ID, or update it (what already happened cannot change)."""
    from meritlens.analytics._experiments import Arm, ExperimentError, ExperimentNotFound
    from meritlens.collector.cli._experiment_io import load, save_experiment
    from meritlens.collector.cli._query import QueryError

    try:
        client = _client(token, token_file, tls_ca)
        manifest = load(experiment_id, db=db, url=url, **client)
        fields = dict(name=arm_name, assessment_id=assessment, target_id=target, request_model=request_model,
                      response_models=tuple(response_models), started_at=started_at, finished_at=finished_at,
                      description=description)
        try:
            current = manifest.arm(arm_name).model_dump()
            fields = {**current, **{k: v for k, v in fields.items() if v not in (None, ())}}
        except KeyError:
            pass
        from pydantic import ValidationError

        try:
            arm = Arm.model_validate(fields)
        except ValidationError as exc:
            raise ExperimentError([e["msg"].removeprefix("Value error, ") for e in exc.errors()],
                                  experiment_id) from None
        stored = save_experiment(manifest.with_arm(arm, baseline=baseline), db=db, url=url, **client)
    except (ExperimentError, ExperimentNotFound, QueryError) as exc:
        raise _experiment_failure(exc) from None
    _print_manifest(stored)


@experiment.command("start")
@click.argument("experiment_id")
@click.argument("arm_name")
@click.option("--at", callback=_iso_time, default=None, help="Start time (ISO 8601); default now.")
@_db_option
@_url_option
@client_options
def experiment_start(experiment_id, arm_name, at, db, url, token, token_file, tls_ca) -> None:
    """Open the execution window of ARM_NAME (now): run the arm's cases after this."""
    from meritlens.analytics._experiments import ExperimentError, ExperimentNotFound
    from meritlens.collector.cli._experiment_io import start
    from meritlens.collector.cli._query import QueryError

    try:
        stored = start(experiment_id, arm_name, db=db, url=url, at=at, **_client(token, token_file, tls_ca))
    except (ExperimentError, ExperimentNotFound, QueryError) as exc:
        raise _experiment_failure(exc) from None
    arm = stored.arm(arm_name)
    click.echo(f"arm {arm_name} of {experiment_id} started at {arm.started_at.isoformat()}; run its cases with "
               f"meritlens.assessment.id = {arm.assessment_id!r} in this order:")
    click.echo("\n".join(f"  {c}" for c in stored.case_order))


@experiment.command("finish")
@click.argument("experiment_id")
@click.argument("arm_name")
@click.option("--at", callback=_iso_time, default=None, help="End time (ISO 8601); default now.")
@click.option("--response-model", "response_models", multiple=True,
              help="Record this model identity instead of the ones the spans report (repeatable).")
@_db_option
@_url_option
@client_options
def experiment_finish(experiment_id, arm_name, at, response_models, db, url, token, token_file, tls_ca) -> None:
    """Close the execution window of ARM_NAME (now) and record the model identity its spans report.
    Prints the arm's check; exits 1 when its spans break the manifest."""
    from meritlens.analytics._experiments import ExperimentError, ExperimentNotFound, check_arm
    from meritlens.collector.cli._experiment_io import finish, reader
    from meritlens.collector.cli._query import QueryError

    try:
        client = _client(token, token_file, tls_ca)
        stored = finish(experiment_id, arm_name, db=db, url=url, at=at, response_models=response_models, **client)
        with reader(db=db, url=url, **client) as query:
            check = check_arm(stored, stored.arm(arm_name), query)
    except (ExperimentError, ExperimentNotFound, QueryError) as exc:
        raise _experiment_failure(exc) from None
    _print_manifest(stored, [check])
    sys.exit(1 if check.refused else 0)


@experiment.command("show")
@click.argument("experiment_id")
@_db_option
@_url_option
@client_options
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def experiment_show(experiment_id, db, url, token, token_file, tls_ca, fmt) -> None:
    """Print the manifest of EXPERIMENT_ID and check every arm's spans against it."""
    from meritlens.analytics._experiments import ExperimentError, ExperimentNotFound, check_arm, load_experiment
    from meritlens.collector.cli._experiment_io import reader
    from meritlens.collector.cli._query import QueryError

    try:
        with reader(db=db, url=url, **_client(token, token_file, tls_ca)) as query:
            manifest = load_experiment(query, experiment_id)
            checks = [check_arm(manifest, arm, query) for arm in manifest.arms]
    except (ExperimentError, ExperimentNotFound, QueryError) as exc:
        raise _experiment_failure(exc) from None
    _print_manifest(manifest, checks, fmt)


@experiment.command("list")
@_db_option
@_url_option
@client_options
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True)
def experiment_list(db, url, token, token_file, tls_ca, fmt) -> None:
    """List the stored experiments."""
    from meritlens.analytics._experiments import list_experiments_sql
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._query import QueryError, run_query

    try:
        client = _client(token, token_file, tls_ca)
        result = run_query(list_experiments_sql(), db=db, url=url, ca_file=client["ca_file"], token=client["token"])
    except QueryError as exc:
        if "does not exist" in str(exc):
            raise _UsageFailure("no experiments are stored in this database yet") from None
        raise _experiment_failure(exc) from None
    render(result, fmt)


_seed_option = click.option("--seed", type=int, default=None,
                            help="Bootstrap seed (recorded); default: the experiment's shuffle seed.")
_resamples_option = click.option("--resamples", type=click.IntRange(min=100), default=2000, show_default=True,
                                 help="Bootstrap resamples per interval.")


def _decide(experiment_id: str, profile_path: str | None, db: str, url: str | None, client: dict, run):
    """Load the profile and the manifest, then ``run(manifest, profile, query)`` on one reader."""
    from meritlens.analytics._compare import ComparisonError
    from meritlens.analytics._experiments import ExperimentNotFound, load_experiment
    from meritlens.analytics._profiles import ProfileError, load_profile
    from meritlens.collector.cli._experiment_io import reader
    from meritlens.collector.cli._query import QueryError

    try:
        profile = load_profile(profile_path) if profile_path else None
        with reader(db=db, url=url, **client) as query:
            manifest = load_experiment(query, experiment_id)
            return run(manifest, profile, query)
    except (ProfileError, ExperimentNotFound, ComparisonError, QueryError) as exc:
        raise _experiment_failure(exc) from None


def _write_text(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise _UsageFailure(f"cannot write {path}: {exc.strerror or exc}") from None


@cli.command()
@click.option("--experiment", "experiment_id", required=True, help="The experiment.")
@click.option("--baseline", default=None, help="The baseline arm (default: the manifest's, else the first arm).")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              help="The task profile (TOML); default: the one recorded in the manifest, else catalogue defaults.")
@_seed_option
@_resamples_option
@_db_option
@_url_option
@client_options
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--output", type=click.Path(dir_okay=False), default=None, help="Also write the JSON result here.")
def compare(experiment_id, baseline, profile_path, seed, resamples, db, url, token, token_file, tls_ca, fmt,
            output) -> None:
    """Compare the baseline arm with every challenger on each required metric: value, difference,
    95% interval, tolerance, constraint, and a verdict only on enough evidence. Exit 0 compared,
    1 when an arm's spans break the manifest (it is refused), 2 on a usage error."""
    import json

    from meritlens.analytics._compare import compare as run_compare, format_comparison
    from meritlens.collector.store._results import json_default

    result = _decide(experiment_id, profile_path, db, url, _client(token, token_file, tls_ca), lambda manifest, profile, query: run_compare(
        manifest, query, baseline=baseline, profile=profile, profile_source=profile_path, seed=seed,
        resamples=resamples))
    document = json.dumps(result.to_json(), indent=2, default=json_default)
    if output:
        _write_text(output, document + "\n")
    click.echo(document if fmt == "json" else format_comparison(result))
    if result.refused_arms:
        click.echo(f"refused: arm(s) {', '.join(result.refused_arms)} (see the problems above)", err=True)
        sys.exit(1)


@cli.command()
@click.option("--experiment", "experiment_id", required=True, help="The experiment.")
@click.option("--x", "x_metric", required=True, help="Metric of the horizontal axis (e.g. total_task_cost).")
@click.option("--y", "y_metric", required=True, help="Metric of the vertical axis (e.g. task_quality).")
@click.option("--z", "z_metric", default=None, help="A third metric (e.g. end_to_end_latency): colour and label.")
@click.option("--profile", "profile_path", type=click.Path(dir_okay=False), default=None,
              help="The task profile (TOML) giving each axis' aggregation and minimum samples.")
@_seed_option
@_resamples_option
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write the plot here (.png or .svg).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON result here.")
@_db_option
@_url_option
@client_options
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def frontier(experiment_id, x_metric, y_metric, z_metric, profile_path, seed, resamples, plot_path, json_path, db,
             url, token, token_file, tls_ca, fmt) -> None:
    """The Pareto-optimal arms over two or three metrics, with their intervals; dominated arms and by
    whom. Exit 0, or 1 when an arm's spans break the manifest (it is left out), 2 on a usage error."""
    import json

    from meritlens.analytics._frontier import format_frontier, frontier as run_frontier
    from meritlens.analytics._plots import PLOT_SUFFIXES
    from meritlens.collector.store._results import json_default

    if plot_path is not None and not plot_path.lower().endswith(PLOT_SUFFIXES):
        raise _UsageFailure(f"--plot must end in {' or '.join(PLOT_SUFFIXES)}, got {plot_path!r}")
    axes = [m for m in (x_metric, y_metric, z_metric) if m is not None]
    result = _decide(experiment_id, profile_path, db, url, _client(token, token_file, tls_ca), lambda manifest, profile, query: run_frontier(
        manifest, query, axes, profile=profile, profile_source=profile_path, seed=seed, resamples=resamples))
    document = result.to_json()
    if plot_path is not None:
        from meritlens.analytics._plots import plot_frontier

        document["plot"] = str(plot_frontier(result, plot_path))
    text = json.dumps(document, indent=2, default=json_default)
    if json_path:
        _write_text(json_path, text + "\n")
    click.echo(text if fmt == "json" else format_frontier(result))
    refused = [c.arm for c in result.checks if c.refused]
    if refused:
        click.echo(f"refused: arm(s) {', '.join(refused)} left out (see the reasons above)", err=True)
        sys.exit(1)


def main() -> None:
    """Console-script entry point. Exit codes: 0 ok, 1 failure, 2 usage error, 130 interrupted."""
    debug = "--debug" in sys.argv[1:]
    try:
        code = cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if debug:
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        click.echo(f"Error: {message}", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
