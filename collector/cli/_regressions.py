"""`meritlens regressions`, and the questions it and `profile check --detect` ask of the windows by
time where they are: through a running collector (its routes, collector/serve/_regressions.py) or
read here from a DuckDB file or a lake."""

from __future__ import annotations

import click

from meritlens.collector.cli._exit import answer
from meritlens.collector.cli._options import connection_options, format_option


def ask(source, question, since_us: int, until_us: int, read) -> dict:
    """The answer to ``question`` (`collector/windows/_questions.py`): from the collector's route, or
    ``read(book)`` over the saved bucket states of [since, until) of the file or lake."""
    from meritlens.analytics.engine import SCOPE_ALL
    from meritlens.collector.cli._client import CollectorClient
    from meritlens.collector.cli._ranges import bucket_connection
    from meritlens.collector.windows._state import load_range

    if source.is_collector:
        with CollectorClient(source.url, token=source.token, ca_file=source.ca_file) as client:
            return client.post_json(question.path, question.to_json())
    with bucket_connection(source) as (con, _):
        return read(load_range(con, since_us, until_us, question.subject, SCOPE_ALL))


def duration_us(text: str, option: str) -> int:
    from meritlens.collector.cli._ranges import parse_duration

    try:
        return int(parse_duration(text).total_seconds() * 1_000_000)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint=option) from None


def _confidence(ctx, param, value: float) -> float:
    if not 0 < value < 1:
        raise click.BadParameter(f"a confidence lies strictly between 0 and 1 (0.95), not {value}")
    return value


confidence_option = click.option("--confidence", type=float, default=0.95, show_default=True, callback=_confidence,
                                  help="Confidence level at which all the intervals (or plans) hold together.")


@click.command()
@click.option("--target", default=None, help="Only this target [default: every target; with --profile, its target].")
@click.option("--recent", default="24h", show_default=True, metavar="DURATION",
              help="The recent range: this long (30m, 24h, 7d; whole hours) up to the end of the hour under way.")
@click.option("--baseline", default="7d", show_default=True, metavar="DURATION",
              help="The baseline: this long, just before the recent range.")
@click.option("--same-hours", is_flag=True,
              help="Baseline on the same hours of the day on each of the baseline days (for daily cycles; the "
                   "baseline is whole days and the recent range at most 24h).")
@confidence_option
@click.option("--profile", "profile_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A task profile (TOML): its metrics' min_samples, tolerance and aggregation apply to its target.")
@connection_options(lake=True)
@format_option("text", "json")
def regressions(target: str | None, recent: str, baseline: str, same_hours: bool, confidence: float,
                profile_path: str | None, connection, fmt: str) -> None:
    """Compare every metric of every target between a recent range and a baseline range, each with a
    confidence interval and a verdict: worse, better, no change or not enough samples.

    Answered from the window states kept per hour (then day, week) bucket, never from spans; a
    bucket counts on a side only when it lies wholly in its range. Rates by Newcombe's interval,
    means by Welch's, quantiles (p95) by order statistics; every interval at the Bonferroni level
    over the comparisons made (metrics x targets), so all hold together at --confidence. Exit 1
    when some metric is worse (a CI gate)."""
    import json

    from meritlens.analytics.engine import ProfileError, format_regressions, load_profile
    from meritlens.collector.cli._client import QueryError
    from meritlens.collector.windows._questions import RegressionQuestion

    try:
        profile = load_profile(profile_path).to_dict() if profile_path is not None else None
    except ProfileError as exc:
        raise click.ClickException(" ".join(str(exc).split())) from None
    try:
        question = RegressionQuestion(duration_us(recent, "--recent"), duration_us(baseline, "--baseline"),
                                      same_hours, confidence, target, profile)
        ranges = question.ranges()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    try:
        report = ask(connection.source(), question, ranges.since_us, ranges.until_us,
                     lambda book: question.answer(book, ranges))
    except QueryError as exc:
        raise click.ClickException(str(exc)) from None
    if question.subject is not None and not report["regressions"] and not report["not_compared"]:
        raise click.ClickException(f"no window by time holds samples of {question.subject} in these ranges")
    click.echo(json.dumps(report, indent=2) if fmt == "json" else format_regressions(report))
    if report.get("windows_behind"):
        click.echo("warning: the collector's windows do not yet include every stored span (the window processor"
                   " is behind or failing; see its log)", err=True)
    answer(report["worse"] == 0)
