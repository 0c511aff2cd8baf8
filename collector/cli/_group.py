"""The `meritlens` click group: every command, in the README's order."""

from __future__ import annotations

import logging
import sys

import click

from meritlens.collector.cli._evaluate import evaluate, list_metrics, observations
from meritlens.collector.cli._evidence_commands import profile, readiness
from meritlens.collector.cli._experiments import compare, experiment, frontier
from meritlens.collector.cli._lake_commands import lake_group
from meritlens.collector.cli._query_commands import sql, windows
from meritlens.collector.cli._serve import serve
from meritlens.collector.cli._transfer import export_command, import_command


class _InOrder(click.Group):
    """Lists commands in the order they were added (the README's), not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=_InOrder, context_settings={"help_option_names": ["-h", "--help"]})
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


for _command in (serve, sql, windows, profile, readiness, evaluate, list_metrics, observations, experiment, compare,
                 frontier, import_command, export_command, lake_group):
    cli.add_command(_command)
