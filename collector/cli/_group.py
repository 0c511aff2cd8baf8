"""The `meritlens` click group: every command, in the README's order, each `--help` ending with the
exit statuses (collector/cli/_main.py maps every way out of a command to one of them, collector/cli/_exit.py)."""

from __future__ import annotations

import logging
import sys

import click

from meritlens.collector.cli._alerts import alerts
from meritlens.collector.cli._evaluate import evaluate, list_metrics, observations
from meritlens.collector.cli._evidence_commands import profile, readiness
from meritlens.collector.cli._experiments import compare, experiment, frontier
from meritlens.collector.cli._forget import forget
from meritlens.collector.cli._lake_commands import lake_group
from meritlens.collector.cli._output import first_sentence
from meritlens.collector.cli._query_commands import sql, windows
from meritlens.collector.cli._regressions import regressions
from meritlens.collector.cli._serve import serve
from meritlens.collector.cli._transfer import export_command, import_command

ERRORS = ("2 any error (usage, a path that is not there, an unreachable collector, an invalid profile, an unknown "
          "target or scope, a failure while running)")
"""What exit status 2 means, for every command."""

NEGATIVE_ANSWERS = {
    "readiness": "not ready (coverage; with --baseline, coverage or the baseline)",
    "profile check": "the profile has problems (each is printed)",
    "alerts": "an alert rule fires (and is not silenced)",
    "regressions": "some metric is worse",
    "experiment finish": "the arm's spans break the manifest",
    "compare": "an arm's spans break the manifest (the arm is refused)",
    "frontier": "an arm's spans break the manifest (the arm is left out)",
}
"""The commands that answer a yes/no question, and what their negative answer (exit status 1) is."""


def exit_status_help(command: str) -> str:
    """The exit-status paragraph of ``command``'s help (its name under `meritlens`, e.g. "lake status")."""
    negative = NEGATIVE_ANSWERS.get(command)
    no = f"1 {negative}" if negative else "1 never (it answers no yes/no question)"
    return f"Exit status: 0 success; {no}; {ERRORS}."


class _InOrder(click.Group):
    """Lists commands in the order they were added (the README's), not alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)


@click.group(cls=_InOrder, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Exit status of every command: 0 success (or ready), 1 a negative answer only (not ready, a "
                    f"failed check; each command's --help says which), {ERRORS}; 130 when interrupted.")
@click.version_option(package_name="meritlens", message="%(prog)s %(version)s")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs (Spark's too).")
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


def _finish_help(command: click.Command, name: str) -> None:
    """Its whole first sentence in the command lists (click would cut it), and its exit statuses."""
    command.short_help = first_sentence(command.help)
    if isinstance(command, click.Group):
        for sub_name, sub in command.commands.items():
            _finish_help(sub, f"{name} {sub_name}")
    if not isinstance(command, click.Group) or command.invoke_without_command:
        command.epilog = exit_status_help(name)


for _command in (serve, sql, windows, regressions, profile, readiness, alerts, evaluate, list_metrics, observations,
                 experiment, compare, frontier, import_command, export_command, forget, lake_group):
    cli.add_command(_command)
    _finish_help(_command, _command.name)
