"""`meritlens alerts`: the state of every alert rule the collector evaluates (exit 1 while one fires and is
not silenced), and `meritlens alerts silence`. Read from the running collector, or from the alert tables
of a DuckDB file no collector holds (collector/alerts/_tables.py)."""

from __future__ import annotations

import contextlib
import json

import click

from meritlens.collector.cli._exit import answer
from meritlens.collector.cli._options import connection_options

LAKE_NOTE = ("a lake has no alert state: alert rules are evaluated by a single-node collector"
             " (`meritlens serve --db FILE --profile P`), not in lake mode yet")
_COLUMNS = ("rule", "target", "metric", "kind", "status", "since", "evidence", "value", "bound", "threshold",
            "samples", "silenced_until")


def _file_states(db: str, write=None) -> tuple[list[dict], str | None]:
    """The states saved in ``db`` (with ``write(con)`` applied first, in a transaction), and a note when the
    file holds none."""
    import duckdb

    from meritlens.collector.alerts import _tables
    from meritlens.collector.alerts._watch import state_view
    from meritlens.collector.store._database import now_us, transaction
    from meritlens.collector.store._sqlguard import open_read_only

    try:
        con = duckdb.connect(db) if write is not None else open_read_only(db)
    except duckdb.Error as exc:
        raise click.ClickException(f"cannot open {db}: {str(exc).splitlines()[0]}") from None
    with contextlib.closing(con):
        if not _tables.has_tables(con):
            return [], (f"{db} holds no alert state: a collector evaluates the [[alerts]] rules of the profiles"
                        " it serves with --profile")
        if write is not None:
            with transaction(con):
                write(con)
        now = now_us()
        return [state_view(s, now) for s in _tables.load_states(con)], None


def _collector_json(source, method: str, path: str, payload: dict | None = None) -> dict:
    from meritlens.collector.cli._client import CollectorClient, QueryError

    try:
        with CollectorClient(source.url, token=source.token, ca_file=source.ca_file) as client:
            return client.get_json(path) if method == "GET" else client.post_json(path, payload)
    except QueryError as exc:
        raise click.ClickException(str(exc)) from None


def _print(states: list[dict], note: str | None, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"alerts": states, "note": note}, indent=2))
        return
    if note:
        click.echo(note)
    if states:
        from meritlens.collector.cli._output import print_table

        print_table(list(_COLUMNS), [tuple(s.get(c) for c in _COLUMNS) for s in states])
        firing = [s for s in states if s["status"] == "firing"]
        silenced = [s for s in states if s["status"] == "silenced"]
        click.echo(f"{len(states)} rule{'s' if len(states) != 1 else ''}: {len(firing)} firing"
                   + (f", {len(silenced)} firing but silenced" if silenced else ""))


@click.group(invoke_without_command=True)
@connection_options(lake=True)
@click.option("--json", "as_json", is_flag=True, help="Print the states as JSON.")
@click.pass_context
def alerts(ctx: click.Context, connection, as_json: bool) -> None:
    """The state of every alert rule the collector evaluates; exit 1 while one fires (for CI).

    Each rule of the [[alerts]] of the profiles `serve --profile` loaded, for its target: ok, firing or
    silenced (firing, but silenced with `meritlens alerts silence`), since when, and the evidence of its
    last evaluation. See docs/alerts.md."""
    if ctx.invoked_subcommand is not None:
        return
    from meritlens.collector._paths import ALERTS_PATH

    source = connection.source()
    if source.is_lake:
        raise click.ClickException(LAKE_NOTE)
    if source.is_collector:
        body = _collector_json(source, "GET", ALERTS_PATH)
        states, note = body["alerts"], body.get("note")
    else:
        states, note = _file_states(source.db)
    _print(states, note, as_json)
    answer(not any(s["status"] == "firing" for s in states))


@alerts.command("silence")
@click.argument("rule")
@click.option("--target", default=None, help="Silence the rule for this target only [default: every target].")
@click.option("--for", "duration", required=True, metavar="DURATION",
              help="How long, e.g. 30m, 2h, 1d: its events wait until then and `meritlens alerts` does not count it.")
@connection_options(lake=True)
def silence(rule: str, target: str | None, duration: str, connection) -> None:
    """Silence the alert rule RULE for a while: it is still evaluated, but its events wait until the silence
    ends (an alert that fires and resolves meanwhile sends nothing) and it does not make `meritlens alerts`
    exit 1."""
    from meritlens.analytics.engine import parse_duration
    from meritlens.collector._paths import ALERTS_SILENCE_PATH
    from meritlens.collector.store._database import now_us

    try:
        until_us = now_us() + int(parse_duration(duration).total_seconds() * 1_000_000)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--for") from None
    source = connection.source()
    if source.is_lake:
        raise click.ClickException(LAKE_NOTE)
    if source.is_collector:
        silenced = _collector_json(source, "POST", ALERTS_SILENCE_PATH,
                                   {"rule": rule, "target": target, "until_us": until_us})["silenced"]
    else:
        from meritlens.collector.alerts import _tables

        found: list = []
        states, note = _file_states(source.db, lambda con: found.extend(_tables.silence(con, rule, target, until_us)))
        if note:
            raise click.ClickException(note)
        if not found:
            known = ", ".join(sorted({s["rule"] for s in states})) or "none"
            raise click.ClickException(f"no alert rule {rule!r}{f' for target {target!r}' if target else ''} in"
                                       f" {source.db}; rules: {known}")
        silenced = [s for s in states if s["rule"] == rule and (target is None or s["target"] == target)]
    for state in silenced:
        click.echo(f"silenced {state['rule']} for {state['target']} until {state['silenced_until']}")
