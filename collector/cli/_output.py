"""Printing query results: tables for people (rounded, with units, nothing cut), CSV and JSON exact."""

from __future__ import annotations

import csv
import io
import json
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from meritlens.analytics._format import format_value
from meritlens.collector.store._results import QueryResult, json_default

FORMATS = ("table", "csv", "json")

# Columns of a window row that carry a value in the row's `unit` (the distribution summary).
_VALUE_COLUMNS = frozenset({"value", "mean", "min", "max", "p50", "p90", "p95", "p99"})
# A percentile window's value is its p95 (Window.value): the table names the statistic.
_AGGREGATION_SHOWN = {"percentile": "p95"}


def _unit_of(column: str, row: dict) -> str | None:
    if column in _VALUE_COLUMNS and isinstance(row.get("unit"), str):
        return row["unit"]
    if column.endswith("_usd"):
        return "USD"
    if column.endswith("_s") or column in ("ttft", "duration"):
        return "s"
    return None


def _cell(column: str, value, row: dict) -> Text:
    if value is None:
        return Text("NULL", style="dim")
    if column == "aggregation" and value in _AGGREGATION_SHOWN:
        return Text(_AGGREGATION_SHOWN[value])
    return Text(format_value(value, _unit_of(column, row)))


def render(result: QueryResult, fmt: str, out=None) -> None:
    out = out or sys.stdout
    if fmt == "json":
        rows = [dict(zip(result.columns, row)) for row in result.rows]
        out.write(json.dumps(rows, default=json_default, indent=2) + "\n")
    elif fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(result.columns)
        for row in result.rows:
            writer.writerow(["" if v is None else (json_default(v) if not isinstance(v, (str, int, float, bool)) else v)
                             for v in row])
        out.write(buffer.getvalue())
    else:
        print_table(result.columns, result.rows, out)
        out.write(f"{len(result.rows)} row{'s' if len(result.rows) != 1 else ''}\n")


def print_table(columns: list[str], rows: list[tuple], out=None, title: str | None = None) -> None:
    """A table as wide as its widest cells need (wrapped on a terminal narrower than that, never cut)."""
    out = out or sys.stdout
    cells = [[_cell(c, v, dict(zip(columns, row))) for c, v in zip(columns, row)] for row in rows]
    table = Table(show_lines=False, title=title)
    widths = []
    for index, column in enumerate(columns):
        values = [row[index] for row in rows]
        numeric = any(v is not None for v in values) and all(
            v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values)
        table.add_column(column, justify="right" if numeric else "left", overflow="fold")
        widths.append(max([len(column), *(c[index].cell_len for c in cells)]))
    for row in cells:
        table.add_row(*row)
    needed = sum(widths) + 3 * len(widths) + 1
    terminal = getattr(out, "isatty", lambda: False)()
    width = Console().width if terminal else max(80, needed)
    Console(file=out, width=width).print(table)
