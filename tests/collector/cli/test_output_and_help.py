"""What people read: tables rounded with units and the statistic named, nothing cut; CSV and JSON
exact; every read command takes the same connection options; help texts describe every option in
one notation for environment variables."""

from __future__ import annotations

import csv
import io
import json
import re

import click
import pytest
from click.testing import CliRunner

from meritlens.analytics._format import format_value
from meritlens.collector.cli._group import cli
from meritlens.collector.cli._output import render
from meritlens.collector.store._results import QueryResult

LONG_TARGET = "support-bot/answer-with-a-very-long-target-identifier-that-must-never-be-cut-in-a-table"
WINDOW_COLUMNS = ["target_id", "metric", "aggregation", "value", "unit", "p95"]
ROWS = [
    (LONG_TARGET, "end_to_end_latency", "percentile", 0.26098677979999996, "s", 0.26098677979999996),
    (LONG_TARGET, "total_task_cost", "sum", 0.0012345678, "USD", None),
    (LONG_TARGET, "input_tokens", "mean", 1234.5678, "tokens", 1500.0),
]


def _table(columns, rows) -> str:
    out = io.StringIO()
    render(QueryResult(columns, [], rows), "table", out)
    return out.getvalue()


def test_tables_round_name_units_and_the_statistic():
    text = _table(WINDOW_COLUMNS, ROWS)
    assert "0.26098677979999996" not in text and "0.2609867" not in text
    assert "261 ms" in text  # seconds as ms below one second
    assert "$0.001235" in text  # USD with a dollar sign, four significant digits
    assert "1,235" in text and "1,500" in text
    assert "p95" in text and "percentile" not in text
    assert "NULL" in text  # missing stays visibly missing, never 0


def test_tables_never_cut_an_identifier():
    text = _table(WINDOW_COLUMNS, ROWS)
    assert LONG_TARGET in text  # widened to its cells when not on a terminal
    assert "…" not in text


def test_sql_columns_get_units_by_name():
    text = _table(["cost_usd", "duration_s", "ttft_s", "input_tokens"], [(0.000123456, 1.23456, 0.0456, 12)])
    assert "$0.0001235" in text and "1.235 s" in text and "45.6 ms" in text and " 12 " in text


def test_window_values_carry_the_metrics_unit_without_the_unit_column():
    """`select target_id, metric, value, sample_count from windows`: dollars, seconds, tokens and
    ratios each with their unit, read from the catalogue by the row's metric."""
    rows = [("t", "total_task_cost", 0.00095, 17), ("t", "end_to_end_latency", 0.2152, 17),
            ("t", "input_tokens", 3918.0, 17), ("t", "task_success", 0.9412, 17), ("t", "task_quality", 0.9, 3),
            ("t", "task_quality.evaluated", 0.8, 3), ("t", "calls_per_task", 2.0, 3)]
    lines = {line.split("│")[2].strip(): line.split("│")[3].strip()
             for line in _table(["target_id", "metric", "value", "sample_count"], rows).splitlines()
             if line.startswith("│")}
    assert lines == {"total_task_cost": "$0.00095", "end_to_end_latency": "215.2 ms", "input_tokens": "3,918 tokens",
                     "task_success": "94.12%", "task_quality": "0.9", "task_quality.evaluated": "0.8",
                     "calls_per_task": "2"}  # a plugin's metric: its unit is in the `unit` column only


def test_every_numeric_window_column_is_in_the_metrics_unit():
    """The columns come from the windows table's schema, not a list of names: a column it gains (a
    standard deviation, say) is shown in the metric's unit too."""
    from meritlens.analytics._schema import WINDOW_COLUMNS as SCHEMA

    numeric = [c.name for c in SCHEMA if c.sql_type.startswith("DOUBLE") and c.name != "quantile_error"]
    assert {"value", "mean", "min", "max", "p50", "p95", "p99", "stddev"} <= set(numeric)
    text = _table(["metric", *numeric], [("end_to_end_latency", *[0.5] * len(numeric))])
    assert text.count("500 ms") == len(numeric)
    # but the quantiles' error bound is relative to them: a share, whatever the metric's unit
    bound = _table(["metric", "p95", "quantile_error"], [("end_to_end_latency", 0.5, 0.01)])
    assert "500 ms" in bound and "1%" in bound and "10 ms" not in bound


def test_help_texts_never_cut_a_sentence():
    from tests.cli_runner import run_cli

    for args in ((), ("profile",), ("experiment",), ("lake",)):
        listing = run_cli(*args, "--help").stdout.split("Commands:")[1]
        assert "..." not in listing, listing
    for line in run_cli("metrics").stdout.splitlines():
        name, _, description = line.split("\t")
        assert description.endswith("."), line  # the whole first paragraph, never its first line alone


def test_csv_and_json_stay_exact():
    out = io.StringIO()
    render(QueryResult(WINDOW_COLUMNS, [], ROWS), "json", out)
    rows = json.loads(out.getvalue())
    assert rows[0]["value"] == 0.26098677979999996 and rows[0]["aggregation"] == "percentile"
    assert rows[1]["p95"] is None
    out = io.StringIO()
    render(QueryResult(WINDOW_COLUMNS, [], ROWS), "csv", out)
    parsed = list(csv.reader(io.StringIO(out.getvalue())))
    assert float(parsed[1][3]) == 0.26098677979999996 and parsed[1][0] == LONG_TARGET


@pytest.mark.parametrize("value, unit, shown", [
    (0.26098677979999996, None, "0.261"), (2.5, "s", "2.5 s"), (0.0005, "s", "0.5 ms"), (12.0, "USD", "$12"),
    (7, "tokens", "7 tokens"), (0.0, "ratio", "0%"), (0.8333333, "ratio", "83.33%"), (0.9, "score", "0.9"),
    (-0.5, "USD", "-$0.5"), (2.0, "steps", "2 steps"),
])
def test_format_value(value, unit, shown):
    assert format_value(value, unit) == shown


def _commands(group: click.Group, prefix=()):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _commands(command, (*prefix, name))
        else:
            yield (*prefix, name), command


READ_COMMANDS = [("sql",), ("windows",), ("readiness",), ("profile", "check"), ("evaluate",), ("export",),
                 ("import",), ("compare",), ("frontier",), ("experiment", "show"), ("experiment", "list"),
                 ("experiment", "create"), ("experiment", "arm"), ("experiment", "start"), ("experiment", "finish")]


def test_every_data_command_takes_the_same_connection_options():
    commands = dict(_commands(cli))
    for path in READ_COMMANDS:
        names = {p.name for p in commands[path].params}
        assert {"db", "url", "token", "token_file", "tls_ca"} <= names, path


def test_every_option_is_described_in_one_environment_notation():
    for path, command in _commands(cli):
        for param in command.params:
            if not isinstance(param, click.Option):
                continue
            assert param.help and param.help.strip(), f"{' '.join(path)} {param.opts[0]} has no help"
            assert "(env " not in param.help and "env var" not in param.help, (path, param.opts, param.help)
            for mention in re.findall(r"MERITLENS_[A-Z_]+", param.help):
                assert re.search(rf"\[env \$?{mention}[;\]]", param.help) or f"${mention}" in param.help, \
                    (path, param.opts, param.help)


def test_sql_help_names_every_table():
    result = CliRunner().invoke(cli, ["sql", "--help"])
    assert result.exit_code == 0
    for table in ("spans", "windows", "tasks", "coverage", "catalogue"):
        assert f"`{table}`" in result.output, table
