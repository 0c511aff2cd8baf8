"""Deciding between arms: `meritlens experiment …`, `meritlens compare` and `meritlens frontier`.

The logic lives in meritlens.analytics.engine (experiments, comparisons, frontiers, plots) and
collector/cli/_experiment_io.py (storing manifests); these commands parse options and print."""

from __future__ import annotations


import click

from meritlens.collector.cli._exit import answer
from meritlens.collector.cli._options import connection_options, format_option, iso_time


def _read_cases(cases: tuple[str, ...], cases_file: str | None) -> list[str]:
    listed = list(cases)
    if cases_file is not None:
        try:
            with open(cases_file, encoding="utf-8") as fh:
                lines = [line.strip() for line in fh]
        except OSError as exc:
            raise click.ClickException(f"cannot read --cases-file {cases_file}: {exc.strerror or exc}") from None
        listed += [line for line in lines if line and not line.startswith("#")]
    if not listed:
        raise click.ClickException("give the comparable case set with --case ID (repeatable) or --cases-file FILE")
    return listed


def _experiment_failure(exc: Exception) -> click.ClickException:
    return click.ClickException(str(exc))


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


@click.group()
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
@click.option("--profile", "profile_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Record this task profile (TOML) as the decision's rules.")
@click.option("--description", default=None, help="A note stored with it.")
@connection_options
@format_option("text", "json")
def experiment_create(experiment_id, target, revision, cases, cases_file, seed, repetitions, profile_path,
                      description, connection, fmt) -> None:
    """Create EXPERIMENT_ID and print the case order its seed produced."""
    from meritlens.analytics.engine import ExperimentError, ExperimentManifest, ProfileError, load_profile
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
        stored = save_experiment(manifest, create=True, source=connection.source())
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
@click.option("--started-at", callback=iso_time, default=None, help="Start of the execution window (ISO 8601).")
@click.option("--finished-at", callback=iso_time, default=None, help="End of the execution window (ISO 8601).")
@click.option("--baseline", is_flag=True, help="Make this arm the experiment's baseline.")
@click.option("--description", default=None, help="A note stored with it.")
@connection_options
def experiment_arm(experiment_id, arm_name, assessment, target, request_model, response_models, started_at,
                   finished_at, baseline, description, connection) -> None:
    """Add the arm ARM_NAME to EXPERIMENT_ID, or update it (what already happened cannot change)."""
    from meritlens.analytics.engine import Arm, ExperimentError, ExperimentNotFound
    from meritlens.collector.cli._experiment_io import load, save_experiment
    from meritlens.collector.cli._query import QueryError

    try:
        source = connection.source()
        manifest = load(experiment_id, source=source)
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
        stored = save_experiment(manifest.with_arm(arm, baseline=baseline), source=source)
    except (ExperimentError, ExperimentNotFound, QueryError) as exc:
        raise _experiment_failure(exc) from None
    _print_manifest(stored)


@experiment.command("start")
@click.argument("experiment_id")
@click.argument("arm_name")
@click.option("--at", callback=iso_time, default=None, help="Start time (ISO 8601); default now.")
@connection_options
def experiment_start(experiment_id, arm_name, at, connection) -> None:
    """Open the execution window of ARM_NAME (now): run the arm's cases after this."""
    from meritlens.analytics.engine import ExperimentError, ExperimentNotFound
    from meritlens.collector.cli._experiment_io import start
    from meritlens.collector.cli._query import QueryError

    try:
        stored = start(experiment_id, arm_name, at=at, source=connection.source())
    except (ExperimentError, ExperimentNotFound, QueryError) as exc:
        raise _experiment_failure(exc) from None
    arm = stored.arm(arm_name)
    click.echo(f"arm {arm_name} of {experiment_id} started at {arm.started_at.isoformat()}; run its cases with "
               f"meritlens.assessment.id = {arm.assessment_id!r} in this order:")
    click.echo("\n".join(f"  {c}" for c in stored.case_order))


@experiment.command("finish")
@click.argument("experiment_id")
@click.argument("arm_name")
@click.option("--at", callback=iso_time, default=None, help="End time (ISO 8601); default now.")
@click.option("--response-model", "response_models", multiple=True,
              help="Record this model identity instead of the ones the spans report (repeatable).")
@connection_options
def experiment_finish(experiment_id, arm_name, at, response_models, connection) -> None:
    """Close the execution window of ARM_NAME (now) and record the model identity its spans report.
    Prints the arm's check."""
    from meritlens.analytics.engine import ExperimentError, ExperimentNotFound, check_arm
    from meritlens.collector.cli._experiment_io import finish, reader
    from meritlens.collector.cli._query import QueryError

    try:
        source = connection.source()
        stored = finish(experiment_id, arm_name, at=at, response_models=response_models, source=source)
        with reader(source=source) as query:
            check = check_arm(stored, stored.arm(arm_name), query)
    except (ExperimentError, ExperimentNotFound, QueryError) as exc:
        raise _experiment_failure(exc) from None
    _print_manifest(stored, [check])
    answer(not check.refused)


@experiment.command("show")
@click.argument("experiment_id")
@connection_options
@format_option("text", "json")
def experiment_show(experiment_id, connection, fmt) -> None:
    """Print the manifest of EXPERIMENT_ID and check every arm's spans against it."""
    from meritlens.analytics.engine import ExperimentError, ExperimentNotFound, check_arm, load_experiment
    from meritlens.collector.cli._experiment_io import reader
    from meritlens.collector.cli._query import QueryError

    try:
        with reader(source=connection.source()) as query:
            manifest = load_experiment(query, experiment_id)
            checks = [check_arm(manifest, arm, query) for arm in manifest.arms]
    except (ExperimentError, ExperimentNotFound, QueryError) as exc:
        raise _experiment_failure(exc) from None
    _print_manifest(manifest, checks, fmt)


@experiment.command("list")
@connection_options
@format_option()
def experiment_list(connection, fmt) -> None:
    """List the stored experiments."""
    from meritlens.analytics.engine import list_experiments_sql
    from meritlens.collector.cli._output import render
    from meritlens.collector.cli._query import QueryError, run_query

    try:
        result = run_query(list_experiments_sql(), source=connection.source())
    except QueryError as exc:
        if "does not exist" in str(exc):
            raise click.ClickException("no experiments are stored in this database yet") from None
        raise _experiment_failure(exc) from None
    render(result, fmt)


_seed_option = click.option("--seed", type=int, default=None,
                            help="Bootstrap seed (recorded); default: the experiment's shuffle seed.")
_resamples_option = click.option("--resamples", type=click.IntRange(min=100), default=2000, show_default=True,
                                 help="Bootstrap resamples per interval.")


def _decide(experiment_id: str, profile_path: str | None, connection, run):
    """Load the profile and the manifest, then ``run(manifest, profile, query)`` on one reader."""
    from meritlens.analytics.engine import (
        ComparisonError,
        ExperimentNotFound,
        ProfileError,
        load_experiment,
        load_profile,
    )
    from meritlens.collector.cli._experiment_io import reader
    from meritlens.collector.cli._query import QueryError

    try:
        profile = load_profile(profile_path) if profile_path else None
        with reader(source=connection.source()) as query:
            manifest = load_experiment(query, experiment_id)
            return run(manifest, profile, query)
    except (ProfileError, ExperimentNotFound, ComparisonError, QueryError) as exc:
        raise _experiment_failure(exc) from None


def _write_text(path: str, text: str) -> None:
    try:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
    except OSError as exc:
        raise click.ClickException(f"cannot write {path}: {exc.strerror or exc}") from None


@click.command()
@click.option("--experiment", "experiment_id", required=True, help="The experiment.")
@click.option("--baseline", default=None, help="The baseline arm (default: the manifest's, else the first arm).")
@click.option("--profile", "profile_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The task profile (TOML); default: the one recorded in the manifest, else catalogue defaults.")
@_seed_option
@_resamples_option
@connection_options
@format_option("table", "json")
@click.option("--output", type=click.Path(dir_okay=False), default=None, help="Also write the JSON result here.")
def compare(experiment_id, baseline, profile_path, seed, resamples, connection, fmt,
            output) -> None:
    """Compare the baseline arm with every challenger on each required metric: value, difference,
    95% interval, tolerance, constraint, and a verdict only on enough evidence."""
    import json

    from meritlens.analytics.engine import compare as run_compare, format_comparison
    from meritlens.collector.store._results import json_default

    result = _decide(experiment_id, profile_path, connection, lambda manifest, profile, query: run_compare(
        manifest, query, baseline=baseline, profile=profile, profile_source=profile_path, seed=seed,
        resamples=resamples))
    document = json.dumps(result.to_json(), indent=2, default=json_default)
    if output:
        _write_text(output, document + "\n")
    click.echo(document if fmt == "json" else format_comparison(result))
    if result.refused_arms:
        click.echo(f"refused: arm(s) {', '.join(result.refused_arms)} (see the problems above)", err=True)
        answer(False)


@click.command()
@click.option("--experiment", "experiment_id", required=True, help="The experiment.")
@click.option("--x", "x_metric", required=True, help="Metric of the horizontal axis (e.g. total_task_cost).")
@click.option("--y", "y_metric", required=True, help="Metric of the vertical axis (e.g. task_quality).")
@click.option("--z", "z_metric", default=None, help="A third metric (e.g. end_to_end_latency): colour and label.")
@click.option("--profile", "profile_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The task profile (TOML) giving each axis' aggregation and minimum samples.")
@_seed_option
@_resamples_option
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Write the plot here (.png or .svg).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON result here.")
@connection_options
@format_option("table", "json")
def frontier(experiment_id, x_metric, y_metric, z_metric, profile_path, seed, resamples, plot_path, json_path,
             connection, fmt) -> None:
    """The Pareto-optimal arms over two or three metrics, with their intervals; dominated arms and by
    whom."""
    import json

    from meritlens.analytics.engine import PLOT_SUFFIXES, format_frontier, frontier as run_frontier
    from meritlens.collector.store._results import json_default

    if plot_path is not None and not plot_path.lower().endswith(PLOT_SUFFIXES):
        raise click.ClickException(f"--plot must end in {' or '.join(PLOT_SUFFIXES)}, got {plot_path!r}")
    axes = [m for m in (x_metric, y_metric, z_metric) if m is not None]
    result = _decide(experiment_id, profile_path, connection, lambda manifest, profile, query: run_frontier(
        manifest, query, axes, profile=profile, profile_source=profile_path, seed=seed, resamples=resamples))
    document = result.to_json()
    if plot_path is not None:
        from meritlens.analytics.engine import plot_frontier

        document["plot"] = str(plot_frontier(result, plot_path))
    text = json.dumps(document, indent=2, default=json_default)
    if json_path:
        _write_text(json_path, text + "\n")
    click.echo(text if fmt == "json" else format_frontier(result))
    refused = [c.arm for c in result.checks if c.refused]
    if refused:
        click.echo(f"refused: arm(s) {', '.join(refused)} left out (see the reasons above)", err=True)
        answer(False)
