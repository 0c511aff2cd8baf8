"""Metric plugins: `meritlens evaluate`, `meritlens metrics` and `meritlens observations`."""

from __future__ import annotations

import click

from meritlens.collector.cli._options import connection_options, format_option


def _parse_judge(spec: str | None, base_url: str | None):
    """None without --judge; else the judge named by ``fake[:MODEL]``, ``openai:MODEL`` or ``anthropic:MODEL``."""
    if spec is None:
        if base_url is not None:
            raise click.BadParameter("--judge-base-url needs --judge", param_hint="--judge-base-url")
        return None
    from meritlens.analytics.engine import JudgeError, judge_from_spec

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


@click.command()
@click.option("--target", required=True, help="The target ID whose spans are evaluated.")
@click.option("--scope", default="all", show_default=True, help="'all', or an assessment id.")
@click.option("--metrics", "metric_list", default=None,
              help="Comma-separated metric names (default: every registered metric; see `meritlens metrics`).")
@connection_options
@click.option("--run-dir", type=click.Path(file_okay=False), default=None,
              help="Directory for sidecars and evaluation.json [default: ./meritlens-runs/<target>/<scope>/].")
@click.option("--schema", type=click.Path(exists=True, dir_okay=False), default=None,
              help="JSON Schema file for structured_output_reliability (a task's meritlens.output.schema wins).")
@click.option("--step-threshold", type=click.IntRange(min=0), default=None,
              help="long_horizon_performance counts tasks with more steps than this [default: 10].")
@click.option("--judge", "judge_spec", default=None, metavar="KIND:MODEL",
              help="Judge for judge-driven metrics: openai:MODEL, anthropic:MODEL (exact, pinned model ids; "
                   "keys from OPENAI_API_KEY / ANTHROPIC_API_KEY), or fake[:fake-NAME] for dry runs (hash-derived "
                   "scores, labelled fake wherever they are stored).")
@click.option("--judge-base-url", default=None, help="Base URL of an OpenAI- or Anthropic-compatible API.")
@click.option("--judge-replicas", type=click.IntRange(min=1), default=3, show_default=True,
              help="Judge calls per task; their scores are averaged.")
@click.option("--option", "extra", multiple=True, metavar="KEY=VALUE", help="A metric option (repeatable).")
@format_option("table", "json")
def evaluate(target, scope, metric_list, connection, run_dir, schema, step_threshold, judge_spec,
             judge_base_url, judge_replicas, extra, fmt) -> None:
    """Run metric plugins on TARGET's spans in SCOPE and store each result as a window.

    A re-run replaces the windows of the metrics it ran and keeps the others. A metric that
    failed is an error (exit status 2); the others are still stored.
    """
    import json as _json
    from pathlib import Path

    from meritlens.analytics.engine import (
        EvaluationError,
        MetricOptions,
        default_run_dir,
        evaluate as run_evaluation,
        is_fake_model,
        load_registry,
    )
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
        store = open_evaluation_store(connection.source())
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
        click.echo(_json.dumps({"target": target, "scope": scope, "run_dir": str(directory),
                                "judge_model": judge.model if judge else None,
                                "judge_fake": is_fake_model(judge.model) if judge else None, "results": rows},
                               default=json_default, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        from meritlens.analytics.engine import format_value

        table = Table(title=f"{target} / {scope}: {result.span_count} spans, {result.task_count} tasks")
        for column in ("metric", "status", "value", "samples", "summary"):
            table.add_column(column, overflow="fold")
        for outcome in result.outcomes:
            if outcome.status == "failed":
                table.add_row(outcome.metric, "failed", "", "", outcome.error or "")
            elif outcome.status == "not_applicable":
                table.add_row(outcome.metric, "not_applicable", "", "", outcome.reason or "does not apply")
            for measurement, window in zip(outcome.measurements, outcome.windows):
                table.add_row(window.metric, window.state, format_value(window.value, window.unit),
                              str(window.sample_count), measurement.summary)
        Console(width=160).print(table)
        click.echo(f"run directory: {directory}")
        if judge is not None:
            label = " (fake: scores derived from a hash of the prompt, not a model's judgement)" \
                if is_fake_model(judge.model) else ""
            click.echo(f"judge: {judge.model}{label}")
    if result.failed:
        failed = ", ".join(o.metric for o in result.failed)
        raise click.ClickException(f"{len(result.failed)} metric(s) failed: {failed}")


@click.command()
@click.argument("metric")
@click.option("--target", default=None, help="With --scope, finds the default run directory.")
@click.option("--scope", default="all", show_default=True, help="With --target, finds the default run directory.")
@click.option("--run-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="The run directory holding the sidecar [default: ./meritlens-runs/<target>/<scope>/].")
@format_option("table", "json")
def observations(metric, target, scope, run_dir, fmt) -> None:
    """Print the keyed observations METRIC wrote to its sidecar (malformed rows are skipped and logged)."""
    import json as _json
    from pathlib import Path

    from meritlens.analytics.engine import default_run_dir, load_registry, significant

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
        table.add_column(column, overflow="fold")
    for o in found:
        table.add_row(*(o.keys.get(k, "") for k in key_names), significant(o.value))
    Console(width=160).print(table)
    click.echo(f"{len(found)} observation{'s' if len(found) != 1 else ''}")


@click.command(name="metrics")
def list_metrics() -> None:
    """List the metrics `meritlens evaluate` can run, and installed plugins that were refused."""
    from meritlens.analytics.engine import load_registry
    from meritlens.collector.cli._output import first_paragraph

    registry = load_registry()
    for name, cls in registry.metrics.items():
        origin = "built-in" if registry.is_builtin(name) else f"plugin {registry.plugins[name]}"
        click.echo(f"{name}\t{origin}\t{first_paragraph(cls.__doc__)}")
    for refused in registry.refused:
        click.echo(f"refused: {refused.entry_point} = {refused.value}: {refused.reason}", err=True)
