"""Reading the store: `meritlens sql` and `meritlens windows`."""

from __future__ import annotations

import click

from meritlens.collector.cli._options import connection_options, format_option

# Listed in `sql --help`: what a query can read.
TABLES = ("spans", "windows", "windows_by_time", "tasks", "coverage", "catalogue")


@click.command()
@click.argument("query")
@connection_options(lake=True)
@format_option("table", "csv", "json", extra=" (JSON and CSV keep every digit; tables round)")
def sql(query: str, connection, fmt: str) -> None:
    """Run one read-only SQL QUERY (SELECT, WITH or EXPLAIN).

    Tables: `spans` (one row per span), `windows` (one row per target, metric and scope), and the
    views `tasks` (one row per task), `coverage` (the latest readiness check per target) and
    `catalogue` (the metric catalogue). Writes, file and URL access and extensions are refused."""
    from meritlens.collector._settings import staging_path
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._query import QueryError, run_query

    source = connection.source()
    try:
        result = run_query(query, source=source)
    except QueryError as exc:
        raise click.ClickException(str(exc)) from None
    render(result, fmt)
    if result.truncated:
        click.echo(f"note: only the first {len(result.rows)} rows are shown (the collector's row limit)", err=True)
    if result.windows_behind:
        click.echo("warning: the collector's windows do not yet include every stored span (the window processor"
                   " is behind or failing; see its log): window rows may be stale", err=True)
    if result.staged_bytes:
        click.echo(f"warning: {staging_path(source.db)} holds {result.staged_bytes} bytes of spans a collector"
                   " acknowledged before it stopped without a clean shutdown; those it had not stored yet are not"
                   " in the result until the next `meritlens serve` (or another writing command) on this file"
                   " stores them", err=True)


# The table's columns; each value is shown with its unit.
_WINDOW_TABLE_COLUMNS = ("target_id", "scope", "metric", "state", "aggregation", "value", "sample_count")


@click.command()
@click.option("--target", default=None, help="Only this target.")
@click.option("--scope", default=None, help="Only this scope ('all' or an assessment id).")
@click.option("--metric", default=None, help="Only this metric.")
@click.option("--since", metavar="DURATION", default=None,
              help="Only the samples that ended in the last DURATION (30m, 24h, 7d, 2w), from the windows by time.")
@click.option("--between", nargs=2, metavar="START END", default=None,
              help="Only the samples that ended between two ISO 8601 times (UTC unless they name a zone), "
                   "from the windows by time.")
@connection_options(lake=True)
@format_option("table", "csv", "json", "signal", extra="; 'signal': one metric_window_available JSON object a line")
def windows(target: str | None, scope: str | None, metric: str | None, since: str | None,
            between: tuple[str, str] | None, connection, fmt: str) -> None:
    """List metric windows: every catalogue metric of each (target, scope), with its state.

    Metrics no window was stored for are listed as not_configured. `--format signal` prints only
    windows with evidence, as `metric_window_available` signals (JSON lines). With --since or
    --between, the windows of that time range: the merge of the hour (then day, then week) buckets
    of `windows_by_time` that overlap it, so the range is rounded out to whole buckets."""
    import json

    from meritlens.analytics.engine import Window, list_windows_sql
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._query import QueryError, run_query

    if since is not None or between:
        result = _range(since, between, target, scope, metric, connection)
    else:
        sql_text = list_windows_sql(target=target, scope=scope, metric=metric, with_unmeasured=fmt != "signal")
        try:
            result = run_query(sql_text, source=connection.source())
        except QueryError as exc:
            raise click.ClickException(str(exc)) from None
    if fmt != "signal":
        render(result, fmt, shown=_WINDOW_TABLE_COLUMNS)
        return
    for row in result.rows:
        window = Window.from_row(row, result.columns)
        if window.has_evidence:
            click.echo(json.dumps(window.to_signal()))


def _range(since: str | None, between: tuple[str, str] | None, target, scope, metric, connection):
    """The windows of --since or --between; the line saying what they cover goes to stderr."""
    import datetime as _dt

    from meritlens.collector.cli._query import QueryError
    from meritlens.collector.cli._ranges import parse_duration, parse_time, range_result, to_us

    if since is not None and between:
        raise click.UsageError("give --since or --between, not both")
    try:
        if since is not None:
            since_us, until_us = to_us(_dt.datetime.now(_dt.timezone.utc) - parse_duration(since)), None
        else:
            start, end = (parse_time(t) for t in between)
            if end <= start:
                raise ValueError(f"--between {between[0]} {between[1]}: the end is not after the start")
            since_us, until_us = to_us(start), to_us(end)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since" if since is not None else "--between") from None
    try:
        result, covered = range_result(connection.source(), since_us, until_us, target=target, scope=scope,
                                       metric=metric)
    except QueryError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(covered, err=True)
    return result
