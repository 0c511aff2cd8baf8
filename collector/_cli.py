"""The `meritlens` command line."""

from __future__ import annotations

import logging
import sys

import click

from meritlens.collector._settings import (
    DEFAULT_DB,
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
)

_db_option = click.option(
    "--db", envvar=ENV_DB, default=DEFAULT_DB, show_default=True, help=f"DuckDB file (env {ENV_DB})."
)
_url_option = click.option(
    "--url", envvar=ENV_URL, default=None,
    help=f"Query through this running collector instead of opening the file (env {ENV_URL}).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
def serve(token: str | None, token_file: str | None, no_grpc: bool, **options) -> None:
    """Receive OTLP spans, store them in DuckDB and keep the metric windows current.

    Every option also reads the environment variable named in its help; see docs/collector.md.
    """
    from meritlens.collector._server import normalize_options, serve as run

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
    try:
        normalize_options(settings)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--target-fallback") from None
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
    from meritlens.collector._output import render
    from meritlens.collector._query import QueryError, run_query

    try:
        result = run_query(query, db=db, url=url, token=resolve_token(token, token_file), ca_file=tls_ca)
    except (QueryError, SettingsError) as exc:
        raise click.ClickException(str(exc)) from None
    render(result, fmt)
    if result.truncated:
        click.echo(f"note: only the first {len(result.rows)} rows are shown (the collector's row limit)", err=True)


# --- evidence: windows, profile check, readiness ------------------------------------------------------
# The logic lives in meritlens.analytics (any read-only query function) and collector/_evidence.py
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
    from meritlens.collector._output import render
    from meritlens.collector._query import QueryError, run_query
    from meritlens.collector._store import QueryResult

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
    from meritlens.collector._query import QueryError, run_query

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
    from meritlens.collector._evidence import check_readiness_at
    from meritlens.collector._query import QueryError

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
    from meritlens.collector._evaluation import open_evaluation_store
    from meritlens.collector._http import json_default

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


def main() -> None:
    """Console-script entry point."""
    debug = "--debug" in sys.argv[1:]
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - one line unless --debug
        if debug:
            raise
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
