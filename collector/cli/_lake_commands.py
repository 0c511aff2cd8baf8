"""`meritlens lake ...`: the windows of a span lake computed on Spark, and the lake's status.

The reading commands take ``--lake`` through the shared connection options (collector/cli/_options.py,
collector/cli/_resolve.py); this group holds what only a lake has."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile

import click

from meritlens.collector._settings import SETTINGS
from meritlens.collector.cli._options import env_help, setting_option


def _lake_source(lake: str):
    """The lake's source (collector/cli/_resolve.py); a one-line error when there is none."""
    from meritlens.collector.cli._resolve import ResolveError, resolve

    try:
        return resolve(None, None, lake=lake, lake_allowed=True)
    except ResolveError as exc:
        raise click.ClickException(str(exc)) from None


@click.group("lake")
def lake_group() -> None:
    """A span lake: many collectors (`serve --lake`) writing Parquet, windows computed by Spark."""


@contextlib.contextmanager
def _spark_output_quiet(debug: bool):
    """Spark's JVM and py4j write their own logs to stderr; unless ``debug``, they go to a file
    instead (inherited by the JVM the job starts), removed after a run that succeeds and named in the
    error of one that fails after Spark wrote to it."""
    if debug:
        yield
        return
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines come at exit too
    log = tempfile.NamedTemporaryFile(prefix="meritlens-spark-", suffix=".log", delete=False)
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        yield
    except Exception as exc:
        sys.stderr.flush()
        message = " ".join(str(exc).split())
        if os.path.getsize(log.name):
            raise click.ClickException(f"{message} (Spark's log: {log.name})") from None
        os.unlink(log.name)
        raise click.ClickException(message) from None
    else:
        os.unlink(log.name)
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        log.close()


@lake_group.command("windows")
@setting_option("lake", required=True, metavar="PATH",
                help=env_help("The lake (a directory every collector and Spark worker reaches, or a URI)",
                              SETTINGS["lake"].env))
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master: local[*], or spark://HOST:7077 for a standalone cluster.")
@click.option("--driver-host", default=None,
              help="Address the workers reach this driver at (default: 127.0.0.1 for a local or loopback master).")
@click.option("--conf", "conf", multiple=True, metavar="KEY=VALUE", help="A Spark setting (repeatable).")
@click.option("--full", is_flag=True, help="Recompute from every segment, not from the last run's state.")
@setting_option("quantile_error",
                help=env_help("Bound on the relative error of the quantiles of windows of more than 1,000 samples, as "
                              "the collectors'", SETTINGS["quantile_error"].env, SETTINGS["quantile_error"].default_text))
@click.pass_context
def lake_windows(ctx: click.Context, lake: str, master: str, driver_host: str | None, conf: tuple[str, ...],
                 full: bool, quantile_error: float) -> None:
    """Compute every window of the lake's spans on Spark and publish them as the lake's windows.

    Each span counts once however many collectors or retries stored it; the result replaces the
    previous windows at once (readers see one run's windows or the other's). A run reads only the
    segments published since the last run (it keeps that run's window state), or every segment with
    --full or when that state cannot be used. Spark's own log is shown only with --debug."""
    from meritlens.collector.lake._job import run_windows_job

    settings = {}
    for pair in conf:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--conf")
        settings[key.strip()] = value
    try:
        with _spark_output_quiet(ctx.find_root().obj["debug"]):
            result = run_windows_job(lake, master, driver_host=driver_host, conf=settings, full=full,
                                     quantile_error=quantile_error)
    except (FileNotFoundError, RuntimeError, ValueError) as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None
    click.echo(f"computed {result.windows} windows from {result.segments} segments ({result.mode}:"
               f" {result.new_segments} read, {result.sample_rows} samples)"
               f" in {result.seconds:.1f}s; published {result.version} (computed_at {result.computed_at.isoformat()})")


@lake_group.command("status")
@setting_option("lake", required=True, metavar="PATH", help=env_help("The lake", SETTINGS["lake"].env))
def lake_status(lake: str) -> None:
    """Segments and spans on the lake, and when its windows were computed."""
    from meritlens.collector.cli._query import QueryError, run_query
    from meritlens.collector.lake._layout import SPANS_DIR, Lake
    from meritlens.collector.lake._versions import current_computed_at

    source = _lake_source(lake)
    try:
        spans, windows = run_query("SELECT (SELECT count(*) FROM spans), (SELECT count(*) FROM windows)",
                                   source=source).rows[0]
    except QueryError as exc:
        raise click.ClickException(str(exc)) from None
    on_lake = Lake(lake)
    segments, computed_at = len(on_lake.files(SPANS_DIR)), current_computed_at(on_lake)
    when = computed_at.isoformat() if computed_at is not None else "never (run `meritlens lake windows`)"
    click.echo(f"{segments} segments, {spans} distinct spans; {windows} windows, computed {when}")
