"""Evidence for a decision: `meritlens profile check` and `meritlens readiness`.

The logic lives in meritlens.analytics and collector/serve/_evidence.py (recording readiness,
collector/cli/_readiness_io.py where it is recorded); these commands parse options and print."""

from __future__ import annotations

import click

from meritlens.collector.cli._exit import answer
from meritlens.collector.cli._options import connection_options, format_option
from meritlens.collector.cli._regressions import ask, confidence_option, duration_us


@click.group()
def profile() -> None:
    """Task profiles: which metrics a decision needs and how they are sampled."""


def _share(ctx, param, value: str | None) -> float | None:
    """``10%`` (or ``0.1``) as 0.1."""
    if value is None:
        return None
    text = value.strip()
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a change such as 10% or 0.1") from None
    if not 0 < share < 10:
        raise click.BadParameter(f"{value!r}: the change to detect is a positive share such as 10%")
    return share


def _power(ctx, param, value: float) -> float:
    if not 0 < value < 1:
        raise click.BadParameter(f"power is a probability strictly between 0 and 1 (0.8), not {value}")
    return value


@profile.command("check")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--detect", metavar="CHANGE", callback=_share, default=None,
              help="Also plan: the samples per side each metric needs for a regression to show a change this large "
                   "in its bad direction (10%: 10% higher latency, 10% lower success rate), from the stored windows.")
@click.option("--power", type=float, default=0.8, show_default=True, callback=_power,
              help="With --detect: the probability that the regression shows the change.")
@confidence_option
@click.option("--baseline", default="7d", show_default=True, metavar="DURATION",
              help="With --detect: plan from the windows by time of this long up to now.")
@connection_options(lake=True)
def profile_check(file: str, detect: float | None, power: float, confidence: float, baseline: str,
                  connection) -> None:
    """Validate the profile FILE: print its plan, or every problem it has.

    When the windows can be read (a database or collector, see --db/--url), the plan shows each
    metric's current state and an estimate of the runs' application cost. With --detect, how many
    samples each metric needs to detect that change: power analysis for rates and means, simulation
    from the stored distribution for quantiles, at --confidence over the metrics planned (Bonferroni),
    so min_samples comes from numbers."""
    from meritlens.analytics.engine import SCOPE_ALL, ProfileError, Window, format_plan, list_windows_sql, load_profile
    from meritlens.collector.cli._query import QueryError, run_query

    try:
        task_profile = load_profile(file)
    except ProfileError as exc:
        click.echo(str(exc), err=True)
        answer(False)
    note = None
    asked = connection.db is not None or connection.url is not None or connection.lake is not None
    try:
        # A database or collector the user named must be there; without one, the plan is shown alone.
        source = connection.source()
    except click.ClickException as exc:
        if asked:
            raise
        source, note = None, f"(current windows not shown: {exc.format_message()})"
    current = None
    if source is not None:
        try:
            result = run_query(list_windows_sql(target=task_profile.target, scope=SCOPE_ALL, with_unmeasured=False),
                               source=source)
            current = {w.metric: w for w in (Window.from_row(row, result.columns) for row in result.rows)}
        except QueryError as exc:
            note = f"(current windows not shown: {exc})"
    click.echo(format_plan(task_profile, current, source=file))
    if note:
        click.echo(note)
    if detect is not None:
        click.echo()
        click.echo(_sample_plans(task_profile, source, detect, power, confidence, baseline))


def _sample_plans(task_profile, source, detect: float, power: float, confidence: float, baseline: str) -> str:
    """The plans of --detect as text, or the line saying why there is no stored distribution to plan from."""
    from meritlens.analytics.engine import format_plans
    from meritlens.collector.cli._query import QueryError
    from meritlens.collector.windows._questions import PlanQuestion

    if source is None:
        return "no stored distribution to plan from: no store or collector was found (see --db/--url/--lake)"
    question = PlanQuestion(task_profile.to_dict(), detect, power, confidence,
                            baseline_us=duration_us(baseline, "--baseline"))
    since, until = question.span()
    try:
        plans = ask(source, question, since, until, lambda book: question.answer(book, since, until))
    except QueryError as exc:
        return f"no stored distribution to plan from: {exc}"
    return format_plans(plans)


@click.command()
@click.option("--profile", "profile_path", required=True, type=click.Path(exists=True, dir_okay=False),
              help="The task profile (TOML).")
@click.option("--target", default=None, help="Check this target instead of the profile's.")
@click.option("--scope", default="all", show_default=True,
              help="Which windows count: 'all' (every span of the target) or an assessment id (only the spans "
                   "carrying that meritlens.assessment.id).")
@click.option("--baseline", is_flag=True,
              help="Judge the baseline too: ready only when every required metric also has enough measured "
                   "evidence in the scope. Without it only coverage is judged.")
@connection_options(lake=True)
@format_option("text", "json")
def readiness(profile_path: str, target: str | None, scope: str, baseline: bool, connection, fmt: str) -> None:
    """Check that every metric the profile requires has a live collector (coverage) and, with
    --baseline, enough measured evidence in the scope (the baseline). Records the check in the
    database it reads (see the `coverage` view). A target or scope that no span and no window has is
    an error naming the ones there are, and nothing is recorded."""
    from meritlens.analytics.engine import (
        ProfileError,
        UnknownSubject,
        format_report,
        judged,
        load_profile,
        report_json,
    )
    from meritlens.collector.cli._query import QueryError
    from meritlens.collector.cli._readiness_io import check_readiness_at

    try:
        task_profile = load_profile(profile_path)
    except ProfileError as exc:
        raise click.ClickException(str(exc)) from None
    source = connection.source()
    try:
        report = check_readiness_at(task_profile, target=target, scope=scope, source=source)
    except (QueryError, UnknownSubject) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(report_json(report, baseline=baseline) if fmt == "json" else format_report(report, baseline=baseline))
    answer(judged(report, baseline)[1])
